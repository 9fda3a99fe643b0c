"""A Java KCL 3.5 multi-stream consumer and kcl-mp multi-stream hosts on one lease table
(issue 32's acceptance), one after the other: Java, then kcl-mp, then Java again, three streams
(tests/support/multi_stream_java.py, in a loopback-only network namespace):

- every record put to a stream delivered exactly once, to a processor of its own stream,
  across both handovers (each host's processors checkpoint at its graceful stop);
- each processor that took over a lease started from the checkpoint the other kind wrote
  last for it: kcl-mp from Java's and Java from kcl-mp's;
- the lease items are one format whoever made them: key ``account:stream:epoch:shardId``,
  ``streamName`` the serialized identifier, ``shardId`` the bare shard id, the epoch the
  stream's creation time, and the same attributes of the same types on the leases Java created
  as on the one kcl-mp created, at the end of each host's run (but for kcl-mp's own).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from kcl_mp.leases.lease import not_a_lease

from ..support.handover import one_shape, processors, read_result, resumes
from ..support.harness import recorded, records_only, run_support_module

pytestmark = [pytest.mark.integration, pytest.mark.java]


@pytest.mark.timeout(240)
def test_java_and_kcl_mp_hand_multi_stream_leases_over_both_ways(tmp_path):
    out = tmp_path / "multi"
    run_support_module("multi_stream_java", out, timeout=220)
    judge(out)


def judge(out: Path) -> None:
    result = read_result(out)
    streams = result["streams"]
    identifier = {f"{s['arn'].split(':')[4]}:{name}:{s['epoch']}": name for name, s in streams.items()}
    entries = recorded(out / "records")
    found = processors(entries)
    for entry in records_only(entries):
        found[entry["_pid"]].setdefault("records", []).append(entry)

    # every record once, to a processor of its stream
    stream_of = {put_id: name for put_id, name, *_ in result["puts"]}
    delivered = Counter(json.loads(r["data"])["id"] for r in records_only(entries))
    assert set(delivered) == set(stream_of), f"{len(set(stream_of) - set(delivered))} records never delivered"
    assert max(delivered.values()) == 1, [(n, c) for n, c in delivered.items() if c > 1][:5]
    for pid, processor in found.items():
        assert processor["stream"] in identifier, processor  # both recorders name the stream of the lease
        got = {stream_of[json.loads(r["data"])["id"]] for r in processor.get("records", ())}
        assert got <= {identifier[processor["stream"]]}, (pid, processor["stream"], got)

    # each processor after the first of a lease started from its predecessor's last checkpoint
    resumed, leases = resumes(found)
    assert resumed == {"kcl-mp after Java": 3, "Java after kcl-mp": len(leases)}, resumed

    # the lease items: one format whoever created them (the third stream's lease kcl-mp's)
    epochs = {name: s["epoch"] for name, s in streams.items()}
    for worker in ("kclmp-1", "java-2"):  # all released by kcl-mp; all held by Java
        items = [i for i in result["snapshots"][worker] if not_a_lease(i, list(streams)) is None]
        assert {(i["streamName"]["S"], i["shardId"]["S"]) for i in items} == leases, items
        for item in items:
            stream, shard = item["streamName"]["S"], item["shardId"]["S"]
            account, name, epoch = stream.split(":")
            assert item["leaseKey"] == {"S": f"{stream}:{shard}"} and int(epoch) == epochs[name], item
        one_shape(worker, items, lambda key: f":{result['kclmp_first']}:" in key)

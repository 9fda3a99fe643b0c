"""A Java DynamoDB Streams Kinesis Adapter 2.x multi-stream consumer and kcl-mp multi-stream
hosts on one lease table (issue 32, over DynamoDB streams), one after the other: Java, then
kcl-mp, then Java again, three tables' streams (tests/support/adapter_multi_stream_java.py, in a
loopback-only network namespace):

- every change written to a table delivered exactly once, to a processor of its own stream,
  across both handovers (each host's processors checkpoint at its graceful stop);
- each processor that took over a lease started from the checkpoint the other kind wrote last
  for it: kcl-mp from Java's and Java from kcl-mp's;
- the lease items are one format whoever made them, the adapter's in multi-stream mode: key
  ``<identifier>:<shardId>``, ``streamName`` the identifier
  ``account:region$account$table$label:1`` (epoch always 1), ``shardId`` the bare shard id,
  and the same attributes of the same types on the leases Java created as on the one kcl-mp
  created, at the end of each host's run (but for kcl-mp's own, and the ``entityType`` LEASE
  kcl-mp's created leases carry as KCL 3.5's do: the adapter's KCL 3.1.1 writes none).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from kcl_mp.leases.lease import ENTITY_TYPE

from ..support.handover import one_shape, processors, read_result, resumes
from ..support.harness import changes_delivered, recorded, run_support_module

pytestmark = [pytest.mark.integration, pytest.mark.java]


@pytest.mark.timeout(240)
def test_java_adapter_and_kcl_mp_hand_multi_stream_leases_over_both_ways(tmp_path):
    out = tmp_path / "multi"
    run_support_module("adapter_multi_stream_java", out, timeout=220)
    judge(out)


def judge(out: Path) -> None:
    result = read_result(out)
    streams = result["streams"]
    table_of = {s["identifier"]: table for table, s in streams.items()}
    found = processors(recorded(out / "records"))
    for change in changes_delivered(out / "records"):
        found[change["_pid"]].setdefault("changes", []).append(change)

    # every change once, to a processor of its table's stream
    table_written = dict(result["writes"])
    delivered = Counter(c["key"] for p in found.values() for c in p.get("changes", ()))
    assert set(delivered) == set(table_written), f"{len(set(table_written) - set(delivered))} changes never delivered"
    assert max(delivered.values()) == 1, [(n, c) for n, c in delivered.items() if c > 1][:5]
    for pid, processor in found.items():
        assert processor["stream"] in table_of, processor  # both recorders name the stream of the lease
        got = {table_written[c["key"]] for c in processor.get("changes", ())}
        assert got <= {table_of[processor["stream"]]}, (pid, processor["stream"], got)

    # each processor after the first of a lease started from its predecessor's last checkpoint
    resumed, lived = resumes(found)
    leases = {(s["identifier"], shard) for s in streams.values() for shard in s["shards"]}
    assert lived == leases, sorted(lived)
    assert resumed == {"kcl-mp after Java": len(leases) - len(streams[result["kclmp_first"]]["shards"]),
                       "Java after kcl-mp": len(leases)}, resumed

    # the lease items: one format whoever created them (the third stream's leases kcl-mp's)
    kclmp_first = streams[result["kclmp_first"]]["identifier"]
    for worker in ("kclmp-1", "java-2"):  # all released by kcl-mp; all held by Java
        items = result["snapshots"][worker]
        assert {(i["streamName"]["S"], i["shardId"]["S"]) for i in items} == leases, items
        for item in items:
            stream, shard = item["streamName"]["S"], item["shardId"]["S"]
            assert item["leaseKey"] == {"S": f"{stream}:{shard}"} and stream.endswith(":1"), item
            assert item.get(ENTITY_TYPE, {"S": "LEASE"}) == {"S": "LEASE"}, item
        one_shape(worker, items, lambda key: key.startswith(kclmp_first), frozenset({ENTITY_TYPE}))

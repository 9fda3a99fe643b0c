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

import json
from collections import Counter
from pathlib import Path

import pytest

from kcl_mp.leases.lease import CPU_PERCENT, ENTITY_TYPE, RELEASED_BY, RELEASED_UNTIL

from ..support.harness import changes_delivered, recorded, run_support_module

pytestmark = [pytest.mark.integration, pytest.mark.java]
# kcl-mp's own attributes (Java reads past them): the cost a renewal reports once measured, a give-up's
KCLMP_OWN = {CPU_PERCENT, RELEASED_BY, RELEASED_UNTIL}
# written by either kind's renewals once records flowed, so a lease has it or not by timing alone
RENEWED = {"throughputKBps"}


@pytest.mark.timeout(240)
@pytest.mark.beside_timing_last  # a minute of two JVMs and kcl-mp, bounds of 90 s a phase: on the cores the timing tests leave idle
def test_java_adapter_and_kcl_mp_hand_multi_stream_leases_over_both_ways(tmp_path):
    out = tmp_path / "multi"
    run_support_module("adapter_multi_stream_java", out, timeout=220)
    judge(out)


def judge(out: Path) -> None:
    result = json.loads((out / "result.json").read_text())
    phases, streams = result["phases"], result["streams"]
    print("phases (s from the start):", {k: round(v - phases["start"], 1) for k, v in phases.items()})
    logs = {p.name: p.read_text(errors="replace")[-3000:] for p in out.glob("*.log") if p.name != "moto.log"}
    assert result["failure"] is None, f"{result['failure']}\n" + "\n".join(f"--- {n}\n{t}" for n, t in logs.items())
    # kcl-mp exits 0 after SIGTERM; the JVM 143 (128 + SIGTERM) once its shutdown hook is done
    assert result["exits"] == {"java-1": 143, "kclmp-1": 0, "java-2": 143}, result["exits"]

    table_of = {s["identifier"]: table for table, s in streams.items()}
    entries = recorded(out / "records")
    processors: dict[int, dict] = {}  # pid -> its initialize line, with its changes and checkpoints
    for entry in entries:
        if entry.get("event") == "initialize":
            processors[entry["_pid"]] = {**entry, "changes": [], "checkpoints": []}
    for entry in entries:
        if entry.get("event") == "checkpoint" and entry["error"] is None:
            processors[entry["_pid"]]["checkpoints"].append(entry)
    for change in changes_delivered(out / "records"):
        processors[change["_pid"]]["changes"].append(change)

    # every change once, to a processor of its table's stream
    table_written = dict(result["writes"])
    delivered = Counter(c["key"] for p in processors.values() for c in p["changes"])
    assert set(delivered) == set(table_written), f"{len(set(table_written) - set(delivered))} changes never delivered"
    assert max(delivered.values()) == 1, [(n, c) for n, c in delivered.items() if c > 1][:5]
    for pid, processor in processors.items():
        assert processor["stream"] in table_of, processor  # both recorders name the stream of the lease
        got = {table_written[c["key"]] for c in processor["changes"]}
        assert got <= {table_of[processor["stream"]]}, (pid, processor["stream"], got)

    # each processor after the first of a lease started from its predecessor's last checkpoint
    resumed: Counter = Counter()
    lives: dict[tuple[str, str], list[dict]] = {}
    for processor in sorted(processors.values(), key=lambda p: p["at"]):
        lives.setdefault((processor["stream"], processor["shard"]), []).append(processor)
    for (stream, shard), chain in sorted(lives.items()):
        assert chain[0]["seq"] == "TRIM_HORIZON", chain[0]
        for before, after in zip(chain, chain[1:]):
            last = before["checkpoints"][-1]
            assert (after["seq"], after["sub"]) == (last["seq"], last["sub"]), (stream, shard, last, after)
            resumed[f"{kind(after['host'])} after {kind(before['host'])}"] += 1
    print("processors resumed from the other kind's checkpoint:", dict(resumed))
    leases = {(s["identifier"], shard) for s in streams.values() for shard in s["shards"]}
    assert set(lives) == leases, sorted(lives)
    assert resumed == {"kcl-mp after Java": len(leases) - len(streams[result["kclmp_first"]]["shards"]),
                       "Java after kcl-mp": len(leases)}, resumed

    # the lease items: one format whoever created them (the third stream's leases kcl-mp's)
    for worker in ("kclmp-1", "java-2"):  # all released by kcl-mp; all held by Java
        items = result["snapshots"][worker]
        assert {(i["streamName"]["S"], i["shardId"]["S"]) for i in items} == leases, items
        shapes = {}
        for item in items:
            stream, shard = item["streamName"]["S"], item["shardId"]["S"]
            assert item["leaseKey"] == {"S": f"{stream}:{shard}"} and stream.endswith(":1"), item
            assert item.get(ENTITY_TYPE, {"S": "LEASE"}) == {"S": "LEASE"}, item
            shapes[item["leaseKey"]["S"]] = {attribute: list(value) for attribute, value in item.items()
                                             if attribute not in KCLMP_OWN | RENEWED | {ENTITY_TYPE}}
        kclmp_made = [shape for key, shape in shapes.items() if key.startswith(streams[result["kclmp_first"]]
                                                                                ["identifier"])]
        assert kclmp_made and all(shape == kclmp_made[0] for shape in shapes.values()), (worker, shapes)


def kind(host: str) -> str:
    return "Java" if host.startswith("java") else "kcl-mp"

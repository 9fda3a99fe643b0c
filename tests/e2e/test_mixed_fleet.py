"""A mixed fleet: the Java MultiLangDaemon and two kcl-mp hosts on one lease table.

The scenario (tests/support/mixed_fleet.py) runs in a loopback-only network namespace
and leaves its evidence; this test judges it:

- the leases spread over all three; stopping the Java host hands its leases to kcl-mp,
  and restarting it takes leases back;
- a kcl-mp processor that took over a lease from the Java host started at the checkpoint
  the Java host wrote last (kcl-mp resumes from Java's checkpoints), and the other way;
- every record put was delivered; no checkpoint ever went backwards;
- no shard was processed by two hosts at once for longer than the failover time;
- when the kcl-mp hosts join the Java fleet, no shard is left without a processor for
  longer than a take interval (a handoff asked of a Java owner whose processor had not
  started was never answered: a 30 s hole); the longest gap of each phase is printed.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from kcl_mp.config import LeaseSettings
from kcl_mp.devtools.java_daemon import DEFAULT_VERSION
from kcl_mp.leases.lease import ENTITY_TYPE, not_a_lease

from ..support.fleet_findings import processing_overlap
from ..support.harness import kcl_versions, recorded, run_support_module
from ..support.mixed_fleet import APP

pytestmark = [pytest.mark.integration, pytest.mark.java]

JAVA = "java-1"
# The Java daemon's KCL cores (harness.kcl_versions: $KCLMP_TEST_KCL_VERSIONS; 3.5.1 ~2.5 min a run).
# By default 3.1.3, what kclpy-ext bundles: the 3.x acceptance carries 3.5.1
KCL_VERSIONS = kcl_versions(DEFAULT_VERSION)


@pytest.mark.parametrize("version", KCL_VERSIONS)
def test_java_and_kcl_mp_share_one_lease_table(tmp_path, version):
    out = tmp_path / "mixed"
    run_support_module("mixed_fleet", out, version, timeout=1200)
    judge(out)


def judge(out: Path) -> None:
    result = json.loads((out / "result.json").read_text())
    logs = {path.name: path.read_text(errors="replace")[-3000:] for path in out.glob("*.log")}
    assert result["failure"] is None, f"{result['failure']}\nphases {result['phases']}\n" + "\n".join(
        f"--- {name}\n{text}" for name, text in sorted(logs.items()) if name != "moto.log")
    phases, history, failover_s = result["phases"], result["history"], result["failover_s"]
    print("phases:", {k: round(v - phases["start"], 1) if isinstance(v, float) else v for k, v in phases.items()})

    # spread over all three, then all on kcl-mp, then some back on Java
    assert sorted(phases["spread_owners"].values()) == [2, 3, 3], phases["spread_owners"]
    assert phases["back_owners"].get(JAVA, 0) >= 2, phases["back_owners"]
    # kcl-mp exits 0 after SIGTERM; the JVM 143 (128 + SIGTERM) once its shutdown hook is done
    assert result["exits"]["kclmp-a"] == result["exits"]["kclmp-b"] == 0 and result["exits"][JAVA] in (0, 143), \
        result["exits"]
    assert result["backwards"] == [], result["backwards"]

    if result["java_version"] != "3.1.3":  # the peer's daemon says which core it runs on
        assert all(f"kcl-core {result['java_version']} from " in (out / f"{JAVA}.{run}.log").read_text()
                   for run in (1, 2)), "the Java daemon did not run on its KCL core"
    # the rows beside the leases: none with 3.1.3 (its coordinator state and worker metrics have
    # tables of their own); 3.5 keeps them in the lease table, kcl-mp's metrics included
    others = {item["leaseKey"]["S"]: item[ENTITY_TYPE]["S"] for item in result["items"]["end"]
              if not_a_lease(item) is not None}
    assert others == ({} if result["java_version"] == "3.1.3" else {
        "Migration3.0": "CLIENT_VERSION_MIGRATION", JAVA: "WORKER_METRIC_STATS", "kclmp-a": "WORKER_METRIC_STATS",
        "kclmp-b": "WORKER_METRIC_STATS"}), others

    # lease items: what both daemons write, as the Java KCL types it; nothing a daemon wrote is
    # dropped by the other (only a finished handoff's checkpointOwner, a consumed
    # pendingCheckpoint, and a released lease's leaseOwner go away, as in Java)
    types = {"leaseKey": "S", "entityType": "S", "leaseOwner": "S", "leaseCounter": "N", "checkpoint": "S",
             "checkpointSubSequenceNumber": "N", "ownerSwitchesSinceCheckpoint": "N", "startingHashKey": "S",
             "endingHashKey": "S", "parentShardId": "SS", "childShardIds": "SS", "checkpointOwner": "S",
             "pendingCheckpoint": "S", "pendingCheckpointSubSequenceNumber": "N", "pendingCheckpointState": "B",
             "throughputKBps": "N", "kclmpCpuPercent": "N"}
    spread = {i["leaseKey"]["S"]: i for i in result["items"]["spread"]}
    for item in (i for i in result["items"]["end"] if i["leaseKey"]["S"] not in others):
        if result["java_version"] != "3.1.3":  # 3.5 marks every lease it creates
            assert item["entityType"] == {"S": "LEASE"}, item
        for name, value in item.items():
            assert name in types, f"unexpected attribute {name} in {item}"
            assert list(value) == [types[name]], f"{name} typed {list(value)} in {item}"
        for name in ("leaseKey", "leaseCounter", "checkpoint", "checkpointSubSequenceNumber",
                     "ownerSwitchesSinceCheckpoint", "startingHashKey", "endingHashKey"):
            assert name in item, f"{name} missing in {item}"
        dropped = set(spread[item["leaseKey"]["S"]]) - set(item) - {
            "checkpointOwner", "pendingCheckpoint", "pendingCheckpointSubSequenceNumber", "leaseOwner"}
        assert not dropped, f"{dropped} dropped from {item['leaseKey']['S']}"

    entries = recorded(out / "records")
    records = [e for e in entries if "event" not in e]
    delivered = {(e["_shard"], e["seq"], e["sub"]) for e in records}
    puts = {(shard, seq, sub) for _, shard, seq, sub in result["puts"]}
    assert puts <= delivered, f"{len(puts - delivered)} records never delivered"

    # every processor that started on a lease another host held before started from that
    # host's last checkpoint
    resumed = defaultdict(int)
    for start in (e for e in entries if e.get("event") == "initialize"):
        before = [c for c in history[start["_shard"]] if c[0] <= start["at"]]
        previous = [c for c in before if c[1] not in (None, start["host"])]
        if not previous:
            continue
        # the table as it was at the start (the monitor polls every 0.25 s: allow its lag)
        seen = [before[-1]] + [c for c in history[start["_shard"]] if start["at"] < c[0] <= start["at"] + 1.0]
        assert start["seq"] in {c[2].split("/")[0] for c in seen if c[2]}, (start, seen)
        resumed[(previous[-1][1] == JAVA, start["host"] == JAVA)] += 1
    print(f"processors resumed from the other daemon's checkpoint: kcl-mp after Java {resumed[(True, False)]}, "
          f"Java after kcl-mp {resumed[(False, True)]}")
    assert resumed[(True, False)] >= 2, f"kcl-mp resumed from Java's checkpoints only {dict(resumed)}"
    assert resumed[(False, True)] >= 2, f"Java resumed from kcl-mp's checkpoints only {dict(resumed)}"

    # two hosts on one shard at once: never longer than the failover time
    worst, _ = processing_overlap(entries)
    print(f"longest time two hosts processed one shard at once: {max(worst, 0):.1f} s (failover {failover_s:.0f} s)")
    assert worst <= failover_s, worst

    # no shard without a processor for longer than a take interval while kcl-mp joins
    take_s = LeaseSettings(table_name=APP, failover_time_ms=int(failover_s * 1000)).take_interval_s
    lines = defaultdict(list)  # (shard, pid) -> when each line was written, but for leaseLost
    for e in entries:
        if e.get("event") != "leaseLost":  # told once the lease has moved: it had stopped before
            lines[(e["_shard"], e["_pid"])].append(e["at"])
    lives = defaultdict(list)  # shard -> (initialize at, last line at) per processor
    for (shard, _), stamps in lines.items():
        lives[shard].append((min(stamps), max(stamps)))
    # kcl-mp joins from the first processor the Java daemon started (not from when it took the
    # leases: how long a JVM takes to start its processors is not a move's doing)
    started = min(first for spans in lives.values() for first, _ in spans)
    windows = {"kcl-mp joins": (started, phases["java_stop"]),
               "Java stops": (phases["java_stop"], phases["java_restart"]),
               "Java restarts": (phases["java_restart"], phases["delivered"])}
    longest = {}
    for phase, (start, end) in windows.items():
        gap, where = longest_gap(lives, start, end)
        longest[phase] = gap
        print(f"longest time a shard had no processor, {phase}: {gap:.1f} s ({where}; take interval {take_s:.2f} s)")
    assert longest["kcl-mp joins"] <= take_s, longest


def longest_gap(lives: dict[str, list[tuple[float, float]]], start: float, end: float) -> tuple[float, str]:
    """The longest stretch of [start, end] during which a shard had no processor alive
    (a processor lives from its initialize to the last line it wrote before leaseLost), and
    the shard."""
    worst, where = 0.0, "none"
    for shard, spans in sorted(lives.items()):
        at = start
        for first, last in sorted(spans) + [(end, end)]:
            if min(first, end) - at > worst:
                worst, where = min(first, end) - at, shard
            at = max(at, last)
            if at >= end:
                break
    return worst, where

"""What a dead or paused host costs its shards, in the default mode (an unset
clientVersionConfig: KCL 3.x, a leader assigns): three kcl-mp hosts, a 12-shard stream, a
producer throughout, failoverTimeMillis 5000 (so leaseAssignmentIntervalMillis 10000).

One after another: the leader SIGKILLed for good (its shards measured), then restarted with
its worker id (a pod coming back); a follower SIGKILLed for good, then a new host; the leader
SIGSTOPped for 15 s. Each fault's shards must be delivering again within failover + one
assignment interval + 10 s of the fault (``BOUND_S``), measured from what the processors
recorded (failover_run.py). Before each fault the returned and the new host have their
share, so the host faulted holds a third of the shards. At the end every live host is
delivering, every record has been delivered, no shard was delivered by two
hosts at once for longer than failover, no host logged an ERROR line, and every host exits 0
on SIGTERM.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from pytest_check import check

from ..support.failover_run import Fleet, deliveries, overlaps
from ..support.harness import recorded, records_only, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timing]

FAILOVER_S = 5.0
BOUND_S = FAILOVER_S + 2 * FAILOVER_S + 10.0  # failover + one assignment interval (2 x failover) + 10 s


def _errors(log: str) -> list[str]:
    out = []
    for line in log.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("level") == "ERROR":
            out.append(entry.get("msg", line))
    return out


def test_a_dead_or_paused_host_costs_seconds_in_the_default_mode(tmp_path: Path, moto_url, unique_name):
    fleet = Fleet(tmp_path, moto_url, unique_name, 12, failoverTimeMillis=int(FAILOVER_S * 1000),
                  clientVersionConfig=None)  # unset: the Java daemon's default, KCL 3.x
    figures: dict[str, dict] = {}
    try:
        fleet.producer.start()
        for host in ("host-a", "host-b", "host-c"):
            fleet.start(host)
        wait_until(lambda: fleet.delivering({"host-a", "host-b", "host-c"}), 120, "every host delivering")

        leader = fleet.leader()
        assert leader in fleet.hosts, leader
        at = fleet.kill(leader)
        figures["leader killed"] = fleet.wait_recovered(leader, at, BOUND_S + 30)
        new_leader = fleet.leader()
        assert new_leader in fleet.hosts, new_leader

        fleet.start(leader)  # the same worker id comes back
        wait_until(lambda: fleet.delivering({leader}), 90, f"{leader} back with its share")

        follower = sorted(h for h in fleet.hosts if h not in (fleet.leader(), leader))[0]
        wait_until(lambda: fleet.delivering({follower}), 60, f"{follower} delivering before its kill")
        at = fleet.kill(follower)
        figures["follower killed"] = fleet.wait_recovered(follower, at, BOUND_S + 30)

        fleet.start("host-d")  # a new worker id
        wait_until(lambda: fleet.delivering({"host-d"}), 90, "host-d delivering")

        paused = fleet.leader()
        assert paused in fleet.hosts, paused
        wait_until(lambda: fleet.delivering({paused}), 60, f"{paused} delivering before its pause")
        at = fleet.pause(paused, 15.0)
        figures["leader paused 15 s"] = fleet.wait_recovered(paused, at, BOUND_S + 30)
        wait_until(lambda: fleet.delivering(set(fleet.hosts)), 90,
                   "every live host delivering after the pause, the returned and the new one included")

        fleet.producer.finish()
        wanted = {p.data for p in fleet.producer.puts}
        wait_until(lambda: wanted <= {e["data"] for e in records_only(recorded(fleet.out))}, 120,
                   f"all {len(wanted)} records delivered", interval=1.0)
        time.sleep(1.0)
        for daemon in fleet.hosts.values():
            daemon.signal()
        for name, daemon in list(fleet.hosts.items()):
            assert daemon.wait(60) == 0, f"{name}: {daemon.output()[-3000:]}"
        fleet.hosts.clear()
    finally:
        fleet.close()

    print(f"\nrecovery per fault (s from the fault to the shard's next delivery; bound {BOUND_S:.0f} s):")
    for fault, shards in figures.items():
        print(f"  {fault}: max {max(shards.values())} s over {len(shards)} shards: {shards}")
    overlap = overlaps(deliveries(fleet.out))
    print(f"longest two-host overlap per shard: max {max(overlap.values())} s")
    for fault, shards in figures.items():  # each finding reported, not only the first (pytest-check)
        with check:
            assert shards and max(shards.values()) <= BOUND_S, (fault, shards)
    with check:
        assert max(overlap.values()) <= FAILOVER_S, overlap
    logs = {path.stem: path.read_text(errors="replace") for path in tmp_path.glob("host-*.log")}
    errors = {host: _errors(log) for host, log in logs.items()}
    with check:
        assert not any(errors.values()), errors  # every fault here is one kcl-mp recovers from by itself

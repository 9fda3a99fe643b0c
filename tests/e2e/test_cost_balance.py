"""kclmp.leaseAssignmentStrategy=COST_BASED on three real kcl-mp hosts in 3.x mode (issue 33).

Six shards get the same records per second; the processor burns 20x the CPU per record on
three of them (``RECORDER_BURN_MS``: 5 ms against 0.25 ms). host-a starts alone, leads, and
holds all six; its hosts measure each lease's CPU and write it on the renewals
(``kclmpCpuPercent``: the heavy leases about 20x the light ones). host-b and host-c join:
the leader hands heavy leases to them, and only heavy ones (a light one would lower
host-a's CPU by less than kclmp.costMinGainPercent), one to each, until the hosts' CPU is
even: max/mean of what the hosts measured (the sum of their leases' figures) below 1.35,
where host-a alone was at 3.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict

import pytest

from kcl_mp.embedded import ensure_stream
from kcl_mp.leases.cost import measured
from kcl_mp.logs import LeaseEvent

from ..support.harness import (
    RECORDER,
    BackgroundProducer,
    Daemon,
    TableMonitor,
    base_properties,
    log_lines,
    stop_all,
    wait_until,
    write_properties,
)

pytestmark = [pytest.mark.integration, pytest.mark.timing]

SHARDS = 6
HEAVY = {f"shardId-{i:012d}" for i in (0, 2, 4)}
PER_PUT = 20  # records per shard every 0.5 s: 40/s, 200 ms of CPU a second on a heavy shard


def _put_evenly(kinesis, stream: str, starts: list[str], n: int) -> list[dict]:
    """``PER_PUT`` records to every shard (ExplicitHashKey: its first hash key), the same bytes each."""
    records = [{"Data": f'{{"n": {n}, "i": {i}}}'.encode(), "PartitionKey": "k", "ExplicitHashKey": start}
               for start in starts for i in range(PER_PUT)]
    return kinesis.put_records(StreamName=stream, Records=records)["Records"]


def _costs(monitor: TableMonitor) -> dict[str, tuple[str | None, float | None]]:
    with monitor.lock:
        return {key: (lease.owner, measured(lease.extra)) for key, lease in monitor.latest.items()}


def _by_host(costs: dict[str, tuple[str | None, float | None]], hosts: list[str]) -> dict[str, float]:
    out = {host: 0.0 for host in hosts}
    for owner, cost in costs.values():
        if owner in out:
            out[owner] += cost or 0.0
    return out


def _max_over_mean(values: dict[str, float]) -> float:
    mean = sum(values.values()) / len(values)
    return max(values.values()) / mean if mean else float("inf")


def _measured_on_a(monitor: TableMonitor) -> bool:
    costs = _costs(monitor)
    if len(costs) != SHARDS or any(owner != "host-a" or cost is None for owner, cost in costs.values()):
        return False
    light = max(cost or 0.0 for key, (_, cost) in costs.items() if key not in HEAVY)
    return min(cost or 0.0 for key, (_, cost) in costs.items() if key in HEAVY) > 4 * max(light, 0.5)


def test_cost_based_leader_evens_the_hosts_measured_cpu(tmp_path, kinesis, dynamodb, moto_url, unique_name):
    stream, app = unique_name, unique_name + "-app"
    ensure_stream(kinesis, stream, SHARDS)
    starts = [s["HashKeyRange"]["StartingHashKey"] for s in kinesis.list_shards(StreamName=stream)["Shards"]]
    out = tmp_path / "out"
    out.mkdir()
    props = write_properties(tmp_path / "app.properties", **base_properties(
        moto_url, stream, app, f"{sys.executable} {RECORDER}", failoverTimeMillis=6000,
        clientVersionConfig="CLIENT_VERSION_CONFIG_3X", gracefulLeaseHandoffTimeoutMillis=10000,
        **{"kclmp.leaseAssignmentStrategy": "COST_BASED", "kclmp.costBandPercent": 3, "kclmp.workerMetric": "DEFAULT",
           "kclmp.workerProcesses": 1}))
    env = {"RECORDER_DIR": str(out), "RECORDER_CHECKPOINT_EVERY": "50",
           "RECORDER_BURN_MS": ",".join(f"{key}=5" for key in sorted(HEAVY)) + ",*=0.25"}
    producer = BackgroundProducer(lambda n: _put_evenly(kinesis, stream, starts, n), 0.5)
    monitor = TableMonitor(dynamodb, app)
    hosts: dict[str, Daemon] = {}
    started = time.monotonic()
    producer.start()
    monitor.start()
    try:
        hosts["host-a"] = Daemon(props, tmp_path / "host-a.log", "--log-format", "json", "--set", "workerId=host-a",
                                 env=env)
        wait_until(lambda: _measured_on_a(monitor), 60, "host-a to hold the six leases and measure them")
        alone = _costs(monitor)
        print("host-a alone, kclmpCpuPercent:", {k[-2:]: c for k, (_, c) in sorted(alone.items())})
        for name in ("host-b", "host-c"):
            hosts[name] = Daemon(props, tmp_path / f"{name}.log", "--log-format", "json", "--set", f"workerId={name}",
                                 env=env)
        names = sorted(hosts)
        wait_until(lambda: monitor.settled(SHARDS) and set(monitor.owners()) == set(names), 60,
                   "the leader to hand leases to host-b and host-c", interval=0.25)
        with monitor.lock:
            counters = {key: lease.counter for key, lease in monitor.latest.items()}

        def measured_again() -> bool:  # six renewals by the new owners: three usage samples smoothed in
            with monitor.lock:
                latest = dict(monitor.latest)
            return (not any(lease.checkpoint_owner for lease in latest.values())
                    and all(k in latest and latest[k].counter >= c + 6 for k, c in counters.items()))

        wait_until(measured_again, 30, "six more renewals of every lease", interval=0.25)
        after = _costs(monitor)
        by_host = _by_host(after, names)
        moves = [(entry["lease"], entry.get("from"), entry.get("to")) for _, entry in
                 log_lines(hosts["host-a"].output()) if entry.get("event") == LeaseEvent.HANDOFF_STARTED.value]
        print(f"settled {time.monotonic() - started:.1f} s after the start; leader's handoffs {moves}")
        print("hosts' measured CPU (sum of kclmpCpuPercent):", {h: round(v, 1) for h, v in by_host.items()},
              f"max/mean {_max_over_mean(by_host):.2f} (host-a alone: 3.00)")
        assert moves and {key for key, _, _ in moves} <= HEAVY, moves  # light leases are never worth a move
        assert len(moves) == len({key for key, _, _ in moves}) or len(moves) <= 4, moves
        per_owner = defaultdict(set)
        for key, (owner, _) in after.items():
            per_owner[owner].add(key)
        assert all(per_owner[name] & HEAVY for name in names), dict(per_owner)  # one heavy lease each
        assert _max_over_mean(by_host) < 1.35, by_host
        stop_all(hosts)
    finally:
        producer.finish()
        monitor.stop.set()
        for daemon in hosts.values():
            daemon.kill()
    monitor.join(5)

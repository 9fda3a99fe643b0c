"""kcl-mp in a KCL 3.x fleet (fleet/role.py), real kcl-mp hosts on a moto server.

1. A kcl-mp-only fleet with no clientVersionConfig (Java's default, CLIENT_VERSION_CONFIG_3X,
   said so in the log): the first host creates Migration3.0 as CLIENT_VERSION_3X; one host wins the lock; the leader assigns
   the 8 leases over the three hosts (spread <= 1, no host takes on its own); the leader
   SIGKILLed, another host takes the lock once its lease duration (shortened with
   kclmp.leaderLockLeaseDurationMillis: Java has no key for it) has passed and assigns the
   dead host's leases to the survivors. On the way: host-c publishes its CPU
   (kclmp.workerMetric=CPU) beside two default-metric hosts and gets its share; the
   followers find their leases through the lease-owner index; the leader deletes a worker
   item older than staleWorkerMetricsEntryCleanupDuration and keeps a younger dead one.
2. A 2.x-compatible fleet (CLIENT_VERSION_CONFIG_COMPATIBLE_WITH_2X): the hosts take by the
   2.x rules and publish worker metrics; Migration3.0 flipped to CLIENT_VERSION_3X_WITH_ROLLBACK
   as the Java leader writes it: every host becomes a 3.x worker within a scan and one leads;
   rolled back to CLIENT_VERSION_2X: every host returns to the 2.x taker and the lock is released.
"""

from __future__ import annotations

import logging
import random
import sys
import time
from collections import Counter

import boto3
import pytest

from kcl_mp.config import load_config
from kcl_mp.embedded import ensure_stream
from kcl_mp.fleet.state_store import CoordinatorStateStore, StateTables, ensure_table
from kcl_mp.leases.lease import Lease
from kcl_mp.leases.table import LeaseTable
from kcl_mp.logs import ShardLog
from kcl_mp.sequence import ExtendedSequenceNumber
from kcl_mp.supervisor.coordinator import LeaseCoordinator

from ..support.harness import RECORDER, Daemon, TableMonitor, base_properties, wait_until, write_properties

pytestmark = [pytest.mark.integration, pytest.mark.timing]

SHARDS = 8
FAILOVER_MS = 3000
LOCK_MS = 6000


def _props(tmp_path, moto_url, stream, app, config: str | None):
    """``config`` None: no clientVersionConfig at all (the key base_properties pins is dropped)."""
    keys = base_properties(
        moto_url, stream, app, f"{sys.executable} {RECORDER}", failoverTimeMillis=FAILOVER_MS,
        clientVersionConfig=config, workerMetricsReporterFreqInMillis=5000, idleTimeBetweenReadsInMillis=500,
        gracefulLeaseHandoffTimeoutMillis=10000, **{"kclmp.leaderLockLeaseDurationMillis": LOCK_MS})
    return write_properties(tmp_path / "app.properties", **{k: v for k, v in keys.items() if v is not None})


def _lock_owner(dynamodb, app: str) -> str | None:
    item = dynamodb.get_item(TableName=f"{app}-CoordinatorState", Key={"key": {"S": "Leader"}},
                             ConsistentRead=True).get("Item")
    return item["ownerName"]["S"] if item else None


def _balanced(monitor: TableMonitor, hosts: set[str]) -> bool:
    with monitor.lock:
        leases = list(monitor.latest.values())
    counts = Counter(lease.owner for lease in leases)
    return (len(leases) == SHARDS and set(counts) == hosts and max(counts.values()) - min(counts.values()) <= 1
            and all(lease.checkpoint_owner is None for lease in leases))


def _metrics(dynamodb, table: str) -> dict[str, dict]:
    return {item["wid"]["S"]: item for item in dynamodb.scan(TableName=table, ConsistentRead=True)["Items"]}


def test_kcl_mp_fleet_in_3x_mode_elects_assigns_and_fails_over(tmp_path, kinesis, dynamodb, moto_url, unique_name):
    stream, app = unique_name, unique_name + "-app"
    ensure_stream(kinesis, stream, SHARDS)
    out = tmp_path / "out"
    out.mkdir()
    props = _props(tmp_path, moto_url, stream, app, None)
    env = {"RECORDER_DIR": str(out), "RECORDER_CHECKPOINT_EVERY": "50"}
    monitor = TableMonitor(dynamodb, app)
    monitor.start()
    hosts: dict[str, Daemon] = {}
    metrics_table = f"{app}-WorkerMetricStats"
    ensure_table(dynamodb, metrics_table, "wid")
    for wid, age_s in (("gone-2-days", 2 * 86400), ("gone-1-hour", 3600)):
        dynamodb.put_item(TableName=metrics_table, Item={"wid": {"S": wid}, "lut": {"N": str(int(time.time()) - age_s)},
                                                         "sts": {"M": {}}, "opr": {"M": {}}})
    try:
        for name in ("host-a", "host-b", "host-c"):
            metric = "CPU" if name == "host-c" else "DEFAULT"  # explicit: AUTO would follow the machine running this
            hosts[name] = Daemon(props, tmp_path / f"{name}.log", "--set", f"workerId={name}",
                                 "--set", f"kclmp.workerMetric={metric}", env=env)
            time.sleep(1.0)
        started = time.monotonic()
        wait_until(lambda: _balanced(monitor, set(hosts)), 60, "the leader to assign the 8 leases over 3 hosts")
        print(f"balanced {dict(monitor.owners())} {time.monotonic() - started:.1f} s after the third host started")
        leader = _lock_owner(dynamodb, app)
        assert leader in hosts
        state = CoordinatorStateStore(dynamodb, StateTables.separate(app), "test").client_version()
        assert state is not None and state.value == "CLIENT_VERSION_3X" and state.modified_by == "host-a"
        for name, daemon in hosts.items():
            log = daemon.output()
            assert "clientVersionConfig unset: CLIENT_VERSION_CONFIG_3X, as the Java daemon; " in log
            assert "a 3.x worker, follower unless it leads" in log
            assert "taker:" not in log and "took lease" not in log  # no 2.x take
            assert " to hand lease " not in log  # nor steal
            assert ("is now the fleet's leader" in log) == (name == leader), name
        assert "leader: assigned lease" in hosts[leader].output()
        for name in set(hosts) - {leader}:
            assert "finding this worker's leases through LeaseOwnerToLeaseKeyIndex" in hosts[name].output(), name
        wait_until(lambda: "gone-2-days" not in _metrics(dynamodb, metrics_table), 30, "the stale item deleted")
        items = _metrics(dynamodb, metrics_table)
        assert "gone-1-hour" in items and set(hosts) <= set(items)  # dead for less than P1D: kept
        assert items["host-c"]["opr"] == {"M": {"C": {"L": [{"N": "100"}]}}} and items["host-c"]["sts"]["M"]["C"]["L"]
        assert items["host-a"]["sts"] == {"M": {}}  # the default worker metric

        killed_at = time.monotonic()
        hosts[leader].kill()
        survivors = set(hosts) - {leader}
        wait_until(lambda: _lock_owner(dynamodb, app) in survivors and _balanced(monitor, survivors), 60,
                   "a survivor to lead and hold every lease with the other", interval=0.2)
        took = time.monotonic() - killed_at
        heir = _lock_owner(dynamodb, app)
        print(f"leader {leader} killed: {heir} leads and the survivors hold {dict(monitor.owners())} in {took:.1f} s "
              f"(lock lease {LOCK_MS / 1000:.0f} s)")
        assert took <= LOCK_MS / 1000 + 3 * 2 * FAILOVER_MS / 1000, took
        assert "leader: assigned lease" in hosts[heir].output()
        for name in survivors:
            hosts[name].signal()
        for name in survivors:
            assert hosts[name].wait(60) == 0, hosts[name].output()[-3000:]
        assert _lock_owner(dynamodb, app) is None  # the leader deleted the lock on its way out
    finally:
        monitor.stop.set()
        for daemon in hosts.values():
            daemon.kill()
    monitor.join(5)


def test_2x_compatible_fleet_follows_a_flip_and_a_rollback(tmp_path, kinesis, dynamodb, moto_url, unique_name):
    stream, app = unique_name, unique_name + "-app"
    ensure_stream(kinesis, stream, SHARDS)
    out = tmp_path / "out"
    out.mkdir()
    props = _props(tmp_path, moto_url, stream, app, "CLIENT_VERSION_CONFIG_COMPATIBLE_WITH_2X")
    env = {"RECORDER_DIR": str(out), "RECORDER_CHECKPOINT_EVERY": "50"}
    monitor = TableMonitor(dynamodb, app)
    monitor.start()
    store = CoordinatorStateStore(dynamodb, StateTables.separate(app), "java-leader")
    hosts: dict[str, Daemon] = {}
    try:
        for name in ("host-a", "host-b"):
            hosts[name] = Daemon(props, tmp_path / f"{name}.log", "--set", f"workerId={name}", env=env)
        wait_until(lambda: _balanced(monitor, set(hosts)), 60, "the 2.x takers to share the leases")
        state = store.client_version()
        assert state is not None and state.value == "CLIENT_VERSION_UPGRADE_FROM_2X"
        # what a Java 2.x leader's flip monitor reads (each host's first report comes 2 s after it
        # joined; the takers may have shared the leases before that)
        wait_until(lambda: {item["wid"]["S"] for item in dynamodb.scan(
            TableName=f"{app}-WorkerMetricStats", ConsistentRead=True)["Items"]} == set(hosts), 15,
            "both hosts' worker-metrics items")
        for daemon in hosts.values():
            assert "a 2.x taker, publishing worker metrics" in daemon.output()

        flipped = store.set_client_version(state, "CLIENT_VERSION_3X_WITH_ROLLBACK")
        assert flipped is not None
        flipped_at = time.monotonic()
        wait_until(lambda: all("flip: CLIENT_VERSION_UPGRADE_FROM_2X -> CLIENT_VERSION_3X_WITH_ROLLBACK"
                               in d.output() for d in hosts.values()), 30, "every host to follow the flip",
                   interval=0.2)
        print(f"flip followed by both hosts in {time.monotonic() - flipped_at:.1f} s "
              f"(a scan: {(FAILOVER_MS + 25) / 1000:.2f} s)")
        assert time.monotonic() - flipped_at <= 2 * (FAILOVER_MS + 25) / 1000 + 2.0
        wait_until(lambda: _lock_owner(dynamodb, app) in hosts, 30, "one host to lead")
        time.sleep(2 * FAILOVER_MS / 1000)
        assert _balanced(monitor, set(hosts)), dict(monitor.owners())

        back = store.set_client_version(store.client_version(), "CLIENT_VERSION_2X")
        assert back is not None
        rolled_at = time.monotonic()
        wait_until(lambda: all("rollback: CLIENT_VERSION_3X_WITH_ROLLBACK -> CLIENT_VERSION_2X" in d.output()
                               for d in hosts.values()), 30, "every host to follow the rollback", interval=0.2)
        assert time.monotonic() - rolled_at <= 2 * (FAILOVER_MS + 25) / 1000 + 2.0
        wait_until(lambda: _lock_owner(dynamodb, app) is None, 10, "the leader to release the lock")
        for daemon in hosts.values():
            assert "now a 2.x taker" in daemon.output()

        hosts["host-b"].kill()  # the 2.x taker again: host-a takes host-b's expired leases itself
        wait_until(lambda: monitor.owners() == Counter({"host-a": SHARDS}), 30, "host-a to take every lease")
        assert "took lease" in hosts["host-a"].output()
        hosts["host-a"].signal()
        assert hosts["host-a"].wait(60) == 0, hosts["host-a"].output()[-3000:]
    finally:
        monitor.stop.set()
        for daemon in hosts.values():
            daemon.kill()
    monitor.join(5)


def _in_process(tmp_path, moto_url, app: str, worker: str, clock) -> tuple[LeaseCoordinator, list[tuple[str, str]]]:
    """A 3.x coordinator in this process, with its own client and a record of its DynamoDB calls."""
    props = write_properties(tmp_path / f"{worker}.properties", **base_properties(
        moto_url, "unused", app, "true", failoverTimeMillis=FAILOVER_MS, workerId=worker,
        clientVersionConfig="CLIENT_VERSION_CONFIG_3X", **{"kclmp.leaderLockLeaseDurationMillis": LOCK_MS}))
    client = boto3.client("dynamodb", endpoint_url=moto_url, region_name="us-east-1")
    calls: list[tuple[str, str]] = []
    client.meta.events.register("before-parameter-build.dynamodb", lambda model, params, **kw: calls.append(
        (model.name, params.get("TableName", ""))))
    table = LeaseTable(client, app)
    table.ensure_table()
    coordinator = LeaseCoordinator(load_config(props), table, None, ShardLog(logging.getLogger("test"), worker),
                                   clock, random.Random(1))
    coordinator.join_fleet()
    return coordinator, calls


def test_followers_use_the_owner_index_and_only_the_leader_syncs_shards(tmp_path, moto_url, unique_name):
    """In process, on one moto table of 60 leases (20 assigned to w2, a child of w3's open lease
    among them): w1 leads, w2 follows. w2's scans read no lease-table Scan: the index Query,
    and a GetItem per new lease (and its parent) once; it waits for the parent, sees a handoff
    through its renewals, and does not run the shard sync; the leader does. w1 released: w2
    takes the lock, scans the whole table again and syncs shards."""
    app = unique_name
    now = [1000.0]
    w1, _ = _in_process(tmp_path, moto_url, app, "w1", lambda: now[0])
    w2, calls = _in_process(tmp_path, moto_url, app, "w2", lambda: now[0])
    table = w1.table
    for i in range(60):
        key = f"shardId-{i:012d}"
        parents = ("shardId-000000000059",) if i == 0 else ()
        table.create_if_absent(Lease(key, checkpoint=ExtendedSequenceNumber("TRIM_HORIZON"), parent_shard_ids=parents))
        table.take(table.get(key), "w2" if i < 20 else "w3")
    w1.renew()
    w2.renew()
    assert w1.fleet.is_leader() and not w2.fleet.is_leader()

    calls.clear()
    w2.scan()
    lease_table = Counter(op for op, name in calls if name == app)
    assert lease_table["Scan"] == 0 and lease_table["Query"] == 1, lease_table
    assert lease_table["GetItem"] == 21, lease_table  # 20 new leases and the parent of one
    assert len(w2.held) == 20 and not w2.handoffs.incoming and not w2.scanned_all
    assert w2.waiting_for("shardId-000000000000") == ["shardId-000000000059"]  # w3's open parent
    calls.clear()
    w2.scan()
    assert Counter(op for op, name in calls if name == app) == Counter({"Query": 1})  # nothing new: one Query
    print(f"follower scan, 60 leases: first {sum(lease_table.values())} lease-table calls, then 1 Query")

    w1.renew()  # its lock heartbeat (the election reads the coordinator's clock: this test's, which stands still)
    w1.scan()
    assert w1.scanned_all and w1.runs_shard_sync() and not w2.runs_shard_sync()
    key = "shardId-000000000001"
    assert w1.table.handoff_start(w1.table.get(key), "w1") is not None  # the leader balancing
    assert key in w2.renew().handoffs  # seen by the renewal: no scan needed

    w1.release_all()
    now[0] += LOCK_MS / 1000.0  # w2's next election check
    w2.renew()
    assert w2.fleet.is_leader() and not w2.runs_shard_sync()  # not before a scan of the whole table
    w2.scan()
    assert w2.scanned_all and w2.runs_shard_sync()

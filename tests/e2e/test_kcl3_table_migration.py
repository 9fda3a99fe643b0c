"""KCL 3.5's table migration (fleet/table_migrator.py, wired in fleet/role.py) on a real moto server.

1. kcl-mp leads a fleet in phase 2 (migrateAllEntitiesToLeaseTable = true, stored DEPLOYED):
   its metrics go to the lease table; the leader moves Migration3.0 from the own table
   (transactions fenced on its lock), writes PENDING; a worker writing to the own table
   again rolls it back to DEPLOYED; PENDING held past the bake: COMPLETE in both tables, a
   phase-1 follower sees it at its next refresh and reads the lease table only.
2. Java 3.5 completes the migration of a fleet a real kcl-mp host (key unset) is part of:
   the host moves its reads, its metrics and its lock contention to the lease table within
   a scan, and leaves Java's rows alone.
"""

from __future__ import annotations

import sys
import time

import pytest

from kcl_mp.embedded import ensure_stream
from kcl_mp.errors import DependencyError
from kcl_mp.fleet import table_migration as tm
from kcl_mp.fleet.state_store import ensure_table
from kcl_mp.fleet.table_migrator import TableMigrator, moved
from kcl_mp.fleet.worker_metrics import WorkerMetricsReporter
from kcl_mp.leases.table import LeaseTable

from ..support.harness import RECORDER, Daemon, base_properties, wait_until, write_properties

pytestmark = [pytest.mark.integration, pytest.mark.timing]  # COMPLETE followed within two scans

HOUR_MS = 3600 * 1000
MIGRATION = {"key": {"S": "Migration3.0"}, "cv": {"S": "CLIENT_VERSION_3X"}, "mb": {"S": "java-worker-1"},
             "mts": {"N": "1795343451578"},
             "h": {"L": [{"M": {"cv": {"S": "CLIENT_VERSION_INIT"}, "mb": {"S": "java-worker-1"},
                                "mts": {"N": "1795343451576"}}}]}}


def _own_tables(dynamodb, app: str, status: str, mts_ms: int, lock_owner: str, lock_ms: int = 120000) -> None:
    """A 3.x fleet's own tables in the middle of phase 1: Migration3.0 (3.1.3's shape), the
    lock, TableMigration3.5 as Java's leader writes it."""
    ensure_table(dynamodb, f"{app}-CoordinatorState", "key")
    ensure_table(dynamodb, f"{app}-WorkerMetricStats", "wid")
    dynamodb.put_item(TableName=f"{app}-CoordinatorState", Item=MIGRATION)
    dynamodb.put_item(TableName=f"{app}-CoordinatorState", Item={
        "key": {"S": "Leader"}, "ownerName": {"S": lock_owner}, "leaseDuration": {"S": str(lock_ms)},
        "recordVersionNumber": {"S": "rvn-1"}, "entityType": {"S": "LEADER"}})
    state = tm.set_status(tm.set_status(None, tm.INIT, "java-worker-1", mts_ms - HOUR_MS), status, "java-worker-1", mts_ms)
    dynamodb.put_item(TableName=f"{app}-CoordinatorState", Item={
        "key": {"S": "TableMigration3.5"}, "entityType": {"S": "TABLE_MIGRATION"}, **state.attributes("tm")})


def _keys(dynamodb, table: str, key: str) -> set[str]:
    return {item[key]["S"] for item in dynamodb.scan(TableName=table, ConsistentRead=True)["Items"]}


def _get(dynamodb, table: str, key: str, value: str) -> dict | None:
    return dynamodb.get_item(TableName=table, Key={key: {"S": value}}, ConsistentRead=True).get("Item")


def test_kcl_mp_leader_moves_the_rows_rolls_back_and_completes(dynamodb, unique_name):
    app = lease_table = unique_name
    LeaseTable(dynamodb, lease_table).ensure_table()
    own = f"{app}-CoordinatorState"
    now_ms = int(time.time() * 1000)
    _own_tables(dynamodb, app, tm.DEPLOYED, now_ms - 2 * HOUR_MS, lock_owner="kclmp-1")
    with pytest.raises(DependencyError, match="phase 1"):  # phase 2 before phase 1: refused, as Java
        _phase2_refused(dynamodb, app)

    leader = TableMigrator(dynamodb, app, lease_table, "kclmp-1", migrate_all=True)
    assert leader.start() == tm.InitialStatus(tm.PENDING)
    assert leader.writes == leader.lease and leader.lock == leader.own and leader.reads == (leader.own, leader.lease)
    follower = TableMigrator(dynamodb, app, lease_table, "kclmp-2", migrate_all=False)
    assert follower.start() == tm.InitialStatus(tm.DEPLOYED) and follower.writes == follower.own
    for worker, migrator in (("kclmp-1", leader), ("kclmp-2", follower)):
        WorkerMetricsReporter(dynamodb, migrator.writes, worker).publish({})
    assert _get(dynamodb, lease_table, "leaseKey", "kclmp-1")["entityType"] == {"S": "WORKER_METRIC_STATS"}
    assert _get(dynamodb, f"{app}-WorkerMetricStats", "wid", "kclmp-2")["sup"] == {"N": "1"}

    owners = {"kclmp-1", "kclmp-2"}
    leader.worker_metrics()
    assert leader.lead(owners, owners, time.time(), 30.0) == tm.NONE  # kclmp-2 still writes to the own table
    dynamodb.delete_item(TableName=f"{app}-WorkerMetricStats", Key={"wid": {"S": "kclmp-2"}})
    WorkerMetricsReporter(dynamodb, leader.lease, "kclmp-2").publish({})  # kclmp-2 redeployed with the key true
    assert {m.worker_id for m in leader.worker_metrics()} == owners
    step = leader.lead(owners, owners, time.time(), 30.0)
    assert (step.kind, step.status) == ("move", tm.PENDING)
    assert _keys(dynamodb, own, "key") == {"Leader", "TableMigration3.5"}
    assert _get(dynamodb, lease_table, "leaseKey", "Migration3.0") == moved(MIGRATION)
    pending = _get(dynamodb, own, "key", "TableMigration3.5")
    assert pending["tm"] == {"S": tm.PENDING} and pending["h"]["L"][0]["M"]["tm"] == {"S": tm.DEPLOYED}

    # a worker writes to the own table again (rolled back to phase 1): DEPLOYED
    WorkerMetricsReporter(dynamodb, follower.own, "kclmp-3").publish({})
    leader.worker_metrics()
    assert leader.lead(owners, owners, time.time(), 30.0).status == tm.DEPLOYED
    dynamodb.delete_item(TableName=f"{app}-WorkerMetricStats", Key={"wid": {"S": "kclmp-3"}})
    leader.worker_metrics()
    assert leader.lead(owners, owners, time.time(), 30.0).kind == "move"  # nothing left to move: PENDING again
    assert leader.lead(owners, owners, time.time(), 30.0) == tm.NONE  # baking
    assert follower.refresh() is False

    # the bake passed (the PENDING row's mts set back, as if a day had gone)
    dynamodb.update_item(TableName=own, Key={"key": {"S": "TableMigration3.5"}}, UpdateExpression="SET mts = :m",
                         ExpressionAttributeValues={":m": {"N": str(now_ms - 25 * HOUR_MS)}})
    leader.worker_metrics()
    assert leader.lead(owners, owners, time.time(), 30.0).kind == "complete"
    assert leader.complete and leader.lock == leader.lease and leader.reads == (leader.lease,)
    in_lease = _get(dynamodb, lease_table, "leaseKey", "TableMigration3.5")
    in_own = _get(dynamodb, own, "key", "TableMigration3.5")
    assert in_lease["tm"] == in_own["tm"] == {"S": tm.COMPLETE}
    assert in_lease["entityType"] == in_own["entityType"] == {"S": "TABLE_MIGRATION"}
    assert {k: v for k, v in in_lease.items() if k != "leaseKey"} == {k: v for k, v in in_own.items() if k != "key"}
    assert follower.refresh() is True and follower.reads == (follower.lease,) and follower.writes == follower.lease
    assert TableMigrator(dynamodb, app, lease_table, "kclmp-4", migrate_all=False).start() == tm.InitialStatus(tm.COMPLETE)


def _phase2_refused(dynamodb, app: str) -> None:
    own = f"{app}-nostate-CoordinatorState"
    ensure_table(dynamodb, own, "key")
    TableMigrator(dynamodb, app, app, "w", migrate_all=True, coordinator_table=own).start()


def test_a_kcl_mp_host_follows_java_35_completing_the_migration(tmp_path, kinesis, dynamodb, moto_url, unique_name):
    stream, app = unique_name, unique_name + "-app"
    ensure_stream(kinesis, stream, 2)
    LeaseTable(dynamodb, app).ensure_table()
    own = f"{app}-CoordinatorState"
    now_ms = int(time.time() * 1000)
    _own_tables(dynamodb, app, tm.DEPLOYED, now_ms - 2 * HOUR_MS, lock_owner="java-worker-1")
    props = write_properties(tmp_path / "app.properties", **base_properties(
        moto_url, stream, app, f"{sys.executable} {RECORDER}", failoverTimeMillis=3000,
        clientVersionConfig="CLIENT_VERSION_CONFIG_3X", workerMetricsReporterFreqInMillis=2000))
    out = tmp_path / "out"
    out.mkdir()
    host = Daemon(props, tmp_path / "host.log", "--set", "workerId=kclmp-1", env={"RECORDER_DIR": str(out)})
    try:
        wait_until(lambda: _get(dynamodb, f"{app}-WorkerMetricStats", "wid", "kclmp-1") is not None, 30,
                   "the host's metrics in the own table (phase 1)")
        assert f"table migration {tm.DEPLOYED}" in host.output()
        # Java 3.5's leader (phase 2) moves Migration3.0, bakes, completes and releases its own-table lock
        dynamodb.transact_write_items(TransactItems=[
            {"Put": {"TableName": app, "Item": moved(MIGRATION)}},
            {"Delete": {"TableName": own, "Key": {"key": {"S": "Migration3.0"}}}}])
        stored = tm.set_status(tm.set_status(tm.set_status(None, tm.INIT, "java-worker-1", now_ms - 3 * HOUR_MS), tm.DEPLOYED,
                                       "java-worker-1", now_ms - 2 * HOUR_MS), tm.PENDING, "java-worker-1", now_ms)
        complete = {"entityType": {"S": "TABLE_MIGRATION"},
                    **tm.set_status(stored, tm.COMPLETE, "java-worker-1", now_ms + 1).attributes("tm")}
        java_lock = {"leaseKey": {"S": "Leader"}, "ownerName": {"S": "java-worker-1"},
                     "leaseDuration": {"S": "120000"}, "recordVersionNumber": {"S": "rvn-2"},
                     "entityType": {"S": "LEADER"}}
        dynamodb.transact_write_items(TransactItems=[
            {"Put": {"TableName": app, "Item": {"leaseKey": {"S": "TableMigration3.5"}, **complete}}},
            {"Put": {"TableName": own, "Item": {"key": {"S": "TableMigration3.5"}, **complete}}}])
        dynamodb.delete_item(TableName=own, Key={"key": {"S": "Leader"}})
        dynamodb.put_item(TableName=app, Item=java_lock)
        completed_at = time.monotonic()
        # read on a scan, or (the own table's lock free once Java released it) as that lock's
        # holder for a moment: "completed by another leader"
        wait_until(lambda: "table migration COMPLETE (" in host.output(), 20, "the host to follow COMPLETE",
                   interval=0.2)
        print(f"COMPLETE followed in {time.monotonic() - completed_at:.1f} s (a scan: 3.03 s)")
        assert time.monotonic() - completed_at <= 2 * 3.025 + 2.0
        wait_until(lambda: (_get(dynamodb, app, "leaseKey", "kclmp-1") or {}).get("entityType")
                   == {"S": "WORKER_METRIC_STATS"}, 20, "the host's metrics in the lease table")
        assert _get(dynamodb, app, "leaseKey", "Leader") == java_lock  # Java's live lock left alone
        assert _get(dynamodb, own, "key", "Leader") is None  # and no lock taken in the own table
        assert "reading the fleet's client version failed" not in host.output()
        host.stop_gracefully(60)
    finally:
        host.kill()

"""KCL 3.5's table migration (fleet/table_migrator.py, wired in fleet/role.py) on a real moto server.

1. kcl-mp leads a fleet in phase 2 (migrateAllEntitiesToLeaseTable = true, stored DEPLOYED):
   its metrics go to the lease table; the leader moves Migration3.0 from the own table
   (transactions fenced on its lock), writes PENDING; a worker writing to the own table
   again rolls it back to DEPLOYED; PENDING held past the bake: COMPLETE in both tables, a
   phase-1 follower sees it at its next refresh and reads the lease table only.
2. Java 3.5 completes the migration of a fleet a real kcl-mp host (key unset) is part of:
   Java's writes played by the test; the host moves its reads, its metrics and its lock
   contention to the lease table within a scan, and leaves Java's rows alone.
3. The same with the real Java leader: the Java daemon on the 3.5.1 core and two kcl-mp hosts,
   all in phase 2, 8 shards and a producer (tests/support/kcl35_migration.py, in a loopback-only
   namespace, ~1.5 min): Java moves Migration3.0 and writes PENDING, counts the kcl-mp hosts as
   phase-2 workers, writes COMPLETE once the PENDING item's mts is set an hour back (the only
   simulated thing: the bake's time); the kcl-mp hosts follow, contend for the lock in the lease
   table only, lead from it once Java stops, and every record is delivered.
"""

from __future__ import annotations

import sys
import time

import pytest
from pytest_check import check

from kcl_mp.embedded import ensure_stream
from kcl_mp.errors import DependencyError
from kcl_mp.fleet import table_migration as tm
from kcl_mp.fleet.state_store import ensure_table
from kcl_mp.fleet.table_migrator import TableMigrator, moved
from kcl_mp.fleet.worker_metrics import REPORT_PERIOD_S, WorkerMetricsReporter
from kcl_mp.leases.rows import MIGRATION_KEY, TABLE_MIGRATION_KEY
from kcl_mp.leases.table import LeaseTable
from kcl_mp.logs import TABLE_MIGRATION_COMPLETE

from ..support import kcl35_migration
from ..support.fleet_findings import delivered_by, java_logged, processing_overlap, resumes, self_acquired
from ..support.harness import RECORDER, Daemon, base_properties, log_lines, wait_until, write_properties
from ..support.kcl3_fleet import APP, COORDINATOR_TABLE, JAVA, KCLMP, METRICS_TABLE
from ..support.kcl35_migration import HOUR_MS, MIGRATION, counted, java_summaries, own_tables

pytestmark = pytest.mark.integration


def _keys(dynamodb, table: str, key: str) -> set[str]:
    return {item[key]["S"] for item in dynamodb.scan(TableName=table, ConsistentRead=True)["Items"]}


def _get(dynamodb, table: str, key: str, value: str) -> dict | None:
    return dynamodb.get_item(TableName=table, Key={key: {"S": value}}, ConsistentRead=True).get("Item")


@pytest.mark.timing  # the whole module was, before the Java run joined it
def test_kcl_mp_leader_moves_the_rows_rolls_back_and_completes(dynamodb, unique_name):
    app = lease_table = unique_name
    LeaseTable(dynamodb, lease_table).ensure_table()
    own = f"{app}-CoordinatorState"
    now_ms = int(time.time() * 1000)
    own_tables(dynamodb, app, tm.DEPLOYED, now_ms - 2 * HOUR_MS, lock_owner="kclmp-1")
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


@pytest.mark.timing  # COMPLETE followed within two scans
def test_a_kcl_mp_host_follows_java_35_completing_the_migration(tmp_path, kinesis, dynamodb, moto_url, unique_name):
    stream, app = unique_name, unique_name + "-app"
    ensure_stream(kinesis, stream, 2)
    LeaseTable(dynamodb, app).ensure_table()
    own = f"{app}-CoordinatorState"
    now_ms = int(time.time() * 1000)
    own_tables(dynamodb, app, tm.DEPLOYED, now_ms - 2 * HOUR_MS, lock_owner="java-worker-1")
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


@pytest.mark.java
@pytest.mark.timeout(330)  # past the scenario's own bounds (300 s), so a stuck phase is reported by name
def test_java_35_leader_migrates_a_fleet_with_kcl_mp_hosts_in_it(tmp_path):
    f = kcl35_migration.run(tmp_path / "migration", timeout=300)
    phases, notes = f.phases, f.result["notes"]
    start = phases["start"]
    print("phases (s from the start):", {name: round(at - start, 1) for name, at in phases.items()})
    print("own-table lock:", [(round(at - start, 1), owner) for at, owner in f.leaders()],
          "lease-table lock:", [(round(at - start, 1), owner) for at, owner in notes["lease_lock"]])
    assert f.failure is None, f"{f.failure}\n{f.tails()}"
    java_log, shots = f.log(f"{JAVA}.1.log"), f.result["snapshots"]
    assert "kcl-core 3.5.1 from" in java_log and "migrateAllEntitiesToLeaseTable=true" in java_log, java_log[:2000]

    # Java leads from the own table; PENDING: Migration3.0 moved (as kcl-mp's moved() writes it)
    with check:
        assert {owner for _, owner in f.leaders()} <= {None, JAVA}, f.leaders()  # no kcl-mp host took it, ever
    statuses = [status for _, status, _ in notes["status"]]
    statuses = statuses[statuses.index(tm.DEPLOYED):] if tm.DEPLOYED in statuses else statuses  # from the seed on
    with check:
        assert [s for i, s in enumerate(statuses) if i == 0 or s != statuses[i - 1]] == [
            tm.DEPLOYED, tm.PENDING, tm.COMPLETE], notes["status"]  # never gone, no rollback on the way
    pending = shots["pending"]
    with check:
        assert set(pending[COORDINATOR_TABLE]) == {"Leader", TABLE_MIGRATION_KEY}, sorted(pending[COORDINATOR_TABLE])
    with check:
        assert pending[APP][MIGRATION_KEY] == moved(MIGRATION), pending[APP][MIGRATION_KEY]
    state = pending[COORDINATOR_TABLE][TABLE_MIGRATION_KEY]
    with check:
        assert state["tm"] == {"S": tm.PENDING} and state["mb"] == {"S": JAVA}, state
    with check:
        assert state["h"]["L"][0]["M"]["tm"] == {"S": tm.DEPLOYED}, state

    # the check that completed counted both kcl-mp hosts as lease owners reporting in the lease table
    completed_at = java_logged(java_log, "PENDING -> COMPLETE: bake time elapsed", start, phases["end"])
    assert completed_at, java_log[-4000:]
    last = [(ok, summary) for at, ok, summary in java_summaries(java_log) if at <= completed_at[0]][-1]
    with check:
        assert last[0] and counted(last[1]), last

    # COMPLETE in both tables, the same item but for its mts (Java's finalizeMigrationComplete
    # updates a copy for each table, each with its own clock reading: a CI run saw them 1 ms
    # apart); from then on nothing new in the own tables
    done = shots["complete"]
    in_lease, in_own = done[APP][TABLE_MIGRATION_KEY], done[COORDINATOR_TABLE][TABLE_MIGRATION_KEY]
    with check:
        assert in_lease["tm"] == {"S": tm.COMPLETE} and in_lease["mb"] == {"S": JAVA}, in_lease
    with check:
        assert ({k: v for k, v in in_lease.items() if k not in ("leaseKey", "mts")}
                == {k: v for k, v in in_own.items() if k not in ("key", "mts")})
    with check:
        assert abs(int(in_lease["mts"]["N"]) - int(in_own["mts"]["N"])) <= 1000, (in_lease["mts"], in_own["mts"])
    complete_s = int(in_lease["mts"]["N"]) / 1000
    for name in [name for name in shots if phases[name] >= phases["followed"]]:
        with check:
            assert shots[name][COORDINATOR_TABLE] == {TABLE_MIGRATION_KEY: in_own}, (name, shots[name][COORDINATOR_TABLE])
        with check:  # Java's rows in the lease table, left alone
            assert (shots[name][APP][TABLE_MIGRATION_KEY], shots[name][APP][MIGRATION_KEY]) == (
                in_lease, pending[APP][MIGRATION_KEY]), name
    for name, shot in shots.items():
        with check:
            assert shot[METRICS_TABLE] == {}, (name, shot[METRICS_TABLE])  # every worker reports to the lease table

    # the kcl-mp hosts follow; their metrics keep coming to the lease table; the lock there only
    followed = {}
    for host in KCLMP:
        log = f.log(f"{host}.1.log")
        events = [(at, entry) for at, entry in log_lines(log) if entry.get("event") == TABLE_MIGRATION_COMPLETE]
        with check:  # any other why: the host led from the own table after COMPLETE, on the lock Java released
            assert len(events) == 1 and events[0][1]["why"] == "read", (host, events)
        followed[host] = round(events[0][0] - complete_s, 1) if events else None
        with check:
            assert not [line for line in log.splitlines() if '"level":"ERROR"' in line or "Traceback" in line]
        with check:
            assert self_acquired(log, start, phases["java_stopped"]) == [], host  # assigned by Java, never taken
        metrics = [shots[name][APP].get(host) for name in ("complete", "end")]
        with check:
            assert all(m and m["entityType"] == {"S": "WORKER_METRIC_STATS"} and m["sup"] == {"N": "1"}
                       for m in metrics), metrics
        # still coming: at the end as fresh as Java's leader needs to count the host alive (two
        # report periods, 30 s each by default), no older than at COMPLETE. (That it moved between
        # the two shots held only when they were more than a report period apart: a loaded run
        # had them 26.4 s apart, a report at either side.)
        with check:
            assert int(metrics[0]["lut"]["N"]) <= int(metrics[1]["lut"]["N"]) and \
                phases["end"] - int(metrics[1]["lut"]["N"]) <= 2 * REPORT_PERIOD_S, (phases["end"], metrics)
    scan_s = 6.025  # kcl-mp's watch interval at failoverTimeMillis 6000: the status read at most this often
    with check:
        assert all(s is not None and 0 <= s <= 2 * scan_s + 2 for s in followed.values()), followed
    lease_owners = [owner for at, owner in notes["lease_lock"] if owner]
    first_lease_lock = next(at for at, owner in notes["lease_lock"] if owner)
    with check:
        assert set(lease_owners) <= {JAVA, *KCLMP} and first_lease_lock >= complete_s, notes["lease_lock"]
    with check:
        assert lease_owners[-1] in KCLMP, notes["lease_lock"]  # a kcl-mp host leads from the lease table

    # throughout: every record delivered, no shard processed twice at once beyond a failover
    with check:
        assert f.undelivered() == 0, f"{f.undelivered()} records never delivered"
    overlap, shard = processing_overlap(f.entries)
    with check:
        assert overlap <= f.result["settings"]["failover_s"], (overlap, shard)
    handed = resumes(f.entries, f.result["puts"])
    with check:
        assert all(r.ok for r in handed), [r for r in handed if not r.ok]
    with check:
        assert f.result["backwards"] == [], f.result["backwards"]
    with check:
        assert f.result["exits"] == {f"{JAVA}.1": 143, **{f"{host}.1": 0 for host in KCLMP}}, f.result["exits"]
    pending_s = next(at for at, status, _ in notes["status"] if status == tm.PENDING) - phases["seeded"]
    complete_after_s = complete_s - notes["aged"][0]
    print(f"PENDING {pending_s:.1f} s after the Java daemon started; COMPLETE {complete_after_s:.1f} s after the "
          f"bake's hour passed; followed by the kcl-mp hosts in {followed} s; lease-table lock: "
          f"{[(round(at - complete_s, 1), owner) for at, owner in notes['lease_lock'] if owner]} (s after COMPLETE); "
          f"{len(f.result['puts'])} records, per host {delivered_by(f.entries)}; longest overlap {overlap:.1f} s "
          f"({shard})")

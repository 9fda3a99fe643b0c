"""KCL 3.5's table migration driven by a real Java leader: the Java MultiLangDaemon on the 3.5.1
core (``java_daemon.command(properties, version="3.5.1")``) and two kcl-mp hosts, all with
``migrateAllEntitiesToLeaseTable = true`` (phase 2) and ``tableMigrationCompleteBakeTimeSeconds``
3600 (Java's minimum), on kcl3_fleet's fleet (8 shards, failover 6 s, an assignment round every
4 s, a producer throughout, the recorder everywhere), inside a loopback-only network namespace.

    python -m tests.support.kcl35_migration OUT_DIR

The fleet's own tables are seeded at the end of phase 1 (``own_tables``: ``Migration3.0``
CLIENT_VERSION_3X, ``TableMigration3.5`` DEPLOYED two hours ago, no lock, no worker metrics):
before that lie phase 1's hour of baking and the redeploy with the key true. Then:

    1. the Java daemon starts alone and takes the leader lock in the own CoordinatorState table;
    2. the kcl-mp hosts start; Java's leader moves ``Migration3.0`` into the lease table and writes
       PENDING (its ``mts`` starts the bake): nobody writes metrics to the own table, and every
       lease owner reports (with no lease owned yet, at once: usually before the kcl-mp hosts do);
    3. every host holds leases Java assigned, and a check of Java's counts all three as lease
       owners reporting in the lease table (its summary lags a LAM run);
    4. the bake's hour passes: the PENDING item's ``mts`` is set two hours back (conditioned on
       PENDING; the one write this runner makes after the seed: the passage of time is the only
       thing simulated). Java's next leader check writes COMPLETE in both tables and releases its
       own-table lock; the kcl-mp hosts follow: their reads, metrics and lock contention move to
       the lease table;
    5. three rounds watched; Java stopped (SIGTERM): a kcl-mp host leads from the lease table
       and the kcl-mp hosts hold every lease; the producer stopped, every record delivered.

Observers: kcl3_fleet's (the leases every 0.25 s; the own table's lock, here ``Fleet.lock``),
the lease table's lock (``lease_lock``), every item of the lease table and both own tables at
each phase boundary (raw: the lease table's state rows in it), and the TableMigration3.5 item
of the own table every 0.25 s (``status``: its tm and mts at each change). Writes
OUT_DIR/result.json (kcl3_fleet's, with those in ``notes``); tests/e2e/test_kcl3_table_migration.py
judges it.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

from kcl_mp.devtools import java_daemon
from kcl_mp.fleet import table_migration as tm
from kcl_mp.fleet.state_store import StateTables, ensure_table
from kcl_mp.leases.rows import MIGRATION_KEY, TABLE_MIGRATION_KEY
from kcl_mp.logs import TABLE_MIGRATION_COMPLETE

from .fleet_findings import JAVA_LINE, Findings, findings
from .harness import log_events, run_support_module, wait_until
from .kcl3_fleet import APP, ASSIGNMENT_MS, JAVA, KCLMP, SHARDS, Fleet, LockMonitor

VERSION = "3.5.1"
OWN = StateTables.separate(APP)
LEASE = StateTables.in_lease_table(APP)
HOUR_MS = 3600 * 1000
BAKE_S = 3600  # tableMigrationCompleteBakeTimeSeconds: Java's minimum
KEYS = {"migrateAllEntitiesToLeaseTable": "true", "tableMigrationCompleteBakeTimeSeconds": BAKE_S}
# TableMigrationStateMachineImpl.isLegacyWorkerMetricsEmpty's line: its verdict and the summary it judged
JAVA_SUMMARY = re.compile(r"isLegacyWorkerMetricsEmpty=(true|false), migrationSummary=TableMigrationSummary\((.*?)\)")

# Migration3.0 as a 3.1.3 leader wrote it (the client version of a 3.x fleet before 3.5)
MIGRATION = {"key": {"S": MIGRATION_KEY}, "cv": {"S": "CLIENT_VERSION_3X"}, "mb": {"S": "java-worker-1"},
             "mts": {"N": "1795343451578"},
             "h": {"L": [{"M": {"cv": {"S": "CLIENT_VERSION_INIT"}, "mb": {"S": "java-worker-1"},
                                "mts": {"N": "1795343451576"}}}]}}


def own_tables(dynamodb, app: str, status: str, mts_ms: int, lock_owner: str | None,
               lock_ms: int = 120000) -> None:
    """A 3.x fleet's own tables in the middle of the table migration: Migration3.0 (3.1.3's
    shape), TableMigration3.5 at ``status`` since ``mts_ms`` (INIT an hour before) as Java's
    leader writes it, the lock of ``lock_owner`` (None: no lock), an empty worker-metrics table."""
    ensure_table(dynamodb, f"{app}-CoordinatorState", "key")
    ensure_table(dynamodb, f"{app}-WorkerMetricStats", "wid")
    dynamodb.put_item(TableName=f"{app}-CoordinatorState", Item=MIGRATION)
    if lock_owner is not None:
        dynamodb.put_item(TableName=f"{app}-CoordinatorState", Item={
            "key": {"S": "Leader"}, "ownerName": {"S": lock_owner}, "leaseDuration": {"S": str(lock_ms)},
            "recordVersionNumber": {"S": "rvn-1"}, "entityType": {"S": "LEADER"}})
    state = tm.set_status(tm.set_status(None, tm.INIT, "java-worker-1", mts_ms - HOUR_MS), status, "java-worker-1",
                          mts_ms)
    dynamodb.put_item(TableName=f"{app}-CoordinatorState", Item={
        "key": {"S": TABLE_MIGRATION_KEY}, "entityType": {"S": "TABLE_MIGRATION"}, **state.attributes("tm")})


class StatusMonitor(threading.Thread):
    """The own table's TableMigration3.5 over time: ``changes`` = [time, tm, mts] at each change."""

    def __init__(self, dynamodb):
        super().__init__(daemon=True)
        self.dynamodb = dynamodb
        self.stop = threading.Event()
        self.changes: list[list] = []

    def run(self) -> None:
        for _ in range(100_000):  # bounded
            if self.stop.wait(0.25):
                return
            try:
                item = self.dynamodb.get_item(TableName=OWN.coordinator_table,
                                              Key={"key": {"S": TABLE_MIGRATION_KEY}}, ConsistentRead=True).get("Item")
            except Exception:  # noqa: BLE001, S112 (read again at the next poll)
                continue
            seen = [item["tm"]["S"], int(item["mts"]["N"])] if item else [None, None]
            if not self.changes or self.changes[-1][1:] != seen:
                self.changes.append([time.time(), *seen])

    def status(self) -> str | None:
        return self.changes[-1][1] if self.changes else None


class MigrationFleet(Fleet):
    """kcl3_fleet's fleet on the 3.5.1 core with the phase-2 keys, watching both lock places
    and the migration status."""

    def __init__(self, out: Path):
        super().__init__(out, VERSION, OWN, **KEYS)
        self.lease_lock = LockMonitor(self.dynamodb, LEASE)
        self.status = StatusMonitor(self.dynamodb)
        self.lease_lock.start()
        self.status.start()

    def close(self, failure: str | None) -> None:
        self.lease_lock.stop.set()
        self.status.stop.set()
        self.lease_lock.join(5)
        self.status.join(5)
        self.notes.update(lease_lock=self.lease_lock.changes, status=self.status.changes, keys=KEYS)
        super().close(failure)

    def log_of(self, name: str) -> str:
        """The log of ``name``'s latest run so far."""
        path = self.out / f"{name}.{self.runs[name]}.log"
        return path.read_text(errors="replace") if path.exists() else ""


def java_summaries(log: str) -> list[tuple[float, bool, dict[str, int]]]:
    """Each migration check of a Java 3.5 leader: (time, isLegacyWorkerMetricsEmpty, the counts
    of the TableMigrationSummary it judged, from its last LAM run)."""
    found = []
    for stamp, line in JAVA_LINE.findall(log):
        if match := JAVA_SUMMARY.search(line):
            counts = {name: int(value) for name, value in re.findall(r"(\w+)=(\d+)", match.group(2))}
            found.append((datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp(), match.group(1) == "true",
                          counts))
    return found


def counted(summary: dict[str, int]) -> bool:
    """Java's summary counts all three hosts as lease owners reporting metrics, none in the own table."""
    return (summary.get("workersWithUnexpiredLeases") == summary.get("leaseOwnersWithActiveMetrics") == 3
            and summary.get("activeWorkersWithMetricsInLegacyTable") == 0)


def migration(fleet: MigrationFleet) -> None:
    """The phases of the module docstring."""
    own_tables(fleet.dynamodb, APP, tm.DEPLOYED, int(time.time() * 1000) - 2 * HOUR_MS, lock_owner=None)
    fleet.phase("seeded")
    fleet.start_java()
    wait_until(lambda: fleet.lock.owner() == JAVA, 90, "the Java daemon holding the lock in the own table", 0.25)
    fleet.phase("java_leads")
    for name in KCLMP:
        fleet.start_kclmp(name)
    wait_until(lambda: fleet.status.status() == tm.PENDING, 60,
               "the Java leader writing PENDING (the rows moved to the lease table)", 0.25)
    fleet.phase("pending")
    wait_until(lambda: all(fleet.holds(w) for w in (JAVA, *KCLMP)) and fleet.leases.settled(SHARDS), 120,
               "the leases shared by Java and both kcl-mp hosts (assigned by Java)", 0.5)
    fleet.phase("shared")
    # the check that lets PENDING become COMPLETE is to count the kcl-mp hosts (its summary lags a LAM run)
    wait_until(lambda: any(ok and counted(summary) for _, ok, summary in java_summaries(fleet.log_of(JAVA))), 60,
               "the Java leader counting the kcl-mp hosts as lease owners reporting in the lease table", 0.5)
    fleet.phase("counted")
    aged = int(time.time() * 1000) - 2 * HOUR_MS
    fleet.dynamodb.update_item(  # the bake's hour passed: nothing but the PENDING item's mts changes
        TableName=OWN.coordinator_table, Key={"key": {"S": TABLE_MIGRATION_KEY}}, UpdateExpression="SET mts = :m",
        ConditionExpression="tm = :pending",
        ExpressionAttributeValues={":m": {"N": str(aged)}, ":pending": {"S": tm.PENDING}})
    fleet.notes["aged"] = [time.time(), aged]
    fleet.phase("aged")
    wait_until(lambda: fleet.status.status() == tm.COMPLETE, 30, "the Java leader writing COMPLETE", 0.25)
    fleet.phase("complete")
    wait_until(lambda: all(log_events(fleet.log_of(name), TABLE_MIGRATION_COMPLETE) for name in KCLMP), 30,
               "both kcl-mp hosts following COMPLETE", 0.25)
    fleet.phase("followed")
    wait_until(lambda: fleet.lease_lock.owner() is not None, 30, "a leader lock in the lease table", 0.25)
    fleet.phase("lease_lock")
    time.sleep(3 * ASSIGNMENT_MS / 1000)  # three assignment rounds with everything in the lease table
    fleet.delivered_so_far(60)
    fleet.phase("watched")
    fleet.stop(JAVA)
    fleet.phase("java_stopped")
    wait_until(lambda: fleet.lease_lock.owner() in KCLMP, 30, "a kcl-mp host leading from the lease table", 0.25)
    wait_until(lambda: fleet.spread(KCLMP), 60, "the kcl-mp hosts holding all 8 leases", 0.5)
    fleet.phase("kclmp_leads")
    fleet.deliver_all(90)
    fleet.phase("delivered")


def main(out: Path) -> int:
    fleet = MigrationFleet(out)
    failure = None
    try:
        migration(fleet)
    except AssertionError as exc:
        failure = str(exc)
    finally:
        fleet.close(failure)
    return 0


def run(out: Path, timeout: float) -> Findings:
    """Run the scenario in a loopback-only namespace and read what it left."""
    run_support_module("kcl35_migration", out, timeout=timeout)
    return findings(out)


if __name__ == "__main__":
    if not java_daemon.inside_namespace():
        sys.exit(java_daemon.in_loopback_namespace([sys.executable, "-m", "tests.support.kcl35_migration",
                                                    *sys.argv[1:]]))
    sys.exit(main(Path(sys.argv[1])))

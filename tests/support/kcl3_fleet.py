"""A KCL 3.x fleet: the Java MultiLangDaemon 3.1.3 (or KCL_VERSION's: java_daemon.KCL_VERSIONS) in its DEFAULT mode (no
clientVersionConfig: CLIENT_VERSION_3X) and up to two kcl-mp hosts on one application, run
inside a network namespace with only loopback up (the Java daemon calls the EC2 metadata
address at start; moto is served over h2c for it).

    python -m tests.support.kcl3_fleet SCENARIO OUT_DIR [KCL_VERSION]

8 shards (their leases created before any host starts), failoverTimeMillis 6000, leaseAssignmentIntervalMillis 4000 (an assignment round
every 4 s), a producer throughout, the amazon_kclpy recorder as every host's processor.
Observers: the lease table (tests/support/harness.TableMonitor, every 0.25 s), the lock
item's owner (every 0.5 s), and every item of the lease, ``<app>-CoordinatorState`` and
``<app>-WorkerMetricStats`` tables at each phase boundary (``Fleet.phase``). A KCL 3.5 daemon
starting on a lease table without those two tables keeps its state in the lease table itself
(``state_tables``): its snapshots then show those rows under the two tables' names, split by
their ``entityType``, so one judge reads both layouts. The scenario
``full`` is issue 20's first acceptance scenario with issue 26's fault (Java alone first; two
kcl-mp hosts join; Java SIGKILLed while it leads: the kcl-mp hosts rescue its leases; Java
restarted; a kcl-mp host takes the lock once Java's 120 s have run out; six assignment rounds
watched; every record delivered).

A scenario stops at the first wait that times out (``failure`` says which). Writes
OUT_DIR/result.json beside the recorders' files and the hosts' logs;
tests/support/fleet_findings.py reads them, ``run_scenario`` does both.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3

from kcl_mp.devtools import java_daemon
from kcl_mp.devtools.producer import produce
from kcl_mp.embedded import EMBEDDED_ENV, ensure_stream, start_emulator
from kcl_mp.fleet.state_store import StateTables
from kcl_mp.leases.lease import ENTITY_TYPE, Lease
from kcl_mp.leases.rows import WORKER_METRIC_STATS
from kcl_mp.leases.table import LeaseTable
from kcl_mp.sequence import TRIM_HORIZON, ExtendedSequenceNumber

from .fleet_findings import Findings, findings
from .harness import (
    ROOT,
    BackgroundProducer,
    TableMonitor,
    recorded,
    records_only,
    wait_until,
)
from .mixed_fleet import Host, properties

APP = "kcl3-fleet"
COORDINATOR_TABLE = f"{APP}-CoordinatorState"
METRICS_TABLE = f"{APP}-WorkerMetricStats"
TABLES = {APP: "leaseKey", COORDINATOR_TABLE: "key", METRICS_TABLE: "wid"}
SHARDS = 8
FAILOVER_MS = 6000
ASSIGNMENT_MS = 4000
JAVA = "java-1"
KCLMP = ("kclmp-a", "kclmp-b")
LOCK_LEASE_S = 120.0  # the Java lock client's default; the daemon has no key for it
ROUNDS_WATCHED = 6


def fleet_properties(out: Path, url: str, worker: str, **keys: object) -> Path:
    """mixed_fleet's keys in the default 3.x mode: no clientVersionConfig (``keys``: more, the same for every host)."""
    return properties(out, url, worker, streamName=APP, applicationName=APP,
                      clientVersionConfig=None,
                      leaseAssignmentIntervalMillis=ASSIGNMENT_MS, **keys)


def state_tables(version: str) -> StateTables:
    """Where the fleet keeps its coordinator state and worker metrics: 3.1.3 in their own
    tables; a 3.5 daemon that starts on a lease table without them (``create_leases`` makes
    none) lands the fleet in the single table, its table migration complete."""
    return StateTables.separate(APP) if version == "3.1.3" else StateTables.in_lease_table(APP)


def create_leases(kinesis, dynamodb, app: str = APP) -> None:
    """The lease table of ``app`` (reading the stream of that name) with one lease per shard,
    as a shard sync leaves it: a Java worker that finds the table empty waits up to 30 s (at
    random) before its own shard sync."""
    table = LeaseTable(dynamodb, app)
    table.ensure_table()
    for shard in kinesis.list_shards(StreamName=app)["Shards"]:
        hashes = shard["HashKeyRange"]
        table.create_if_absent(Lease(key=shard["ShardId"], checkpoint=ExtendedSequenceNumber(TRIM_HORIZON),
                                     hash_range=(int(hashes["StartingHashKey"]), int(hashes["EndingHashKey"]))))


class LockMonitor(threading.Thread):
    """The lock item's owner over time: ``changes`` = [time, owner or None] at each change."""

    def __init__(self, dynamodb, tables: StateTables):
        super().__init__(daemon=True)
        self.dynamodb, self.tables = dynamodb, tables
        self.stop = threading.Event()
        self.changes: list[list] = []

    def run(self) -> None:
        for _ in range(100_000):  # bounded
            if self.stop.wait(0.5):
                return
            try:
                item = self.dynamodb.get_item(TableName=self.tables.coordinator_table,
                                              Key={self.tables.coordinator_key: {"S": "Leader"}},
                                              ConsistentRead=True).get("Item")
            except Exception:  # noqa: BLE001, S112 (the table may not exist yet)
                continue
            owner = item["ownerName"]["S"] if item else None
            if not self.changes or self.changes[-1][1] != owner:
                self.changes.append([time.time(), owner])

    def owner(self) -> str | None:
        return self.changes[-1][1] if self.changes else None


class Fleet:
    """The emulator, the producer, the observers and the hosts of one run. ``tables``: where the
    lock monitor looks and how snapshots read (default ``state_tables(version)``); ``keys``: more
    properties keys for every host."""

    def __init__(self, out: Path, version: str = java_daemon.DEFAULT_VERSION, tables: StateTables | None = None,
                 **keys: object):
        self.out = out
        self.version = version
        self.tables = tables or state_tables(version)
        self.keys = keys
        (out / "records").mkdir(parents=True, exist_ok=True)
        os.environ.update(EMBEDDED_ENV)
        self.emulator = start_emulator(http2=True, log_path=str(out / "moto.log"))
        self.url = self.emulator.url
        kinesis = boto3.client("kinesis", endpoint_url=self.url, region_name="us-east-1")
        self.dynamodb = boto3.client("dynamodb", endpoint_url=self.url, region_name="us-east-1")
        ensure_stream(kinesis, APP, SHARDS)
        create_leases(kinesis, self.dynamodb)
        self.producer = BackgroundProducer(
            lambda n: produce(kinesis, APP, 40, first_id=n * 40, keys=256, seed=n), 0.25)
        self.leases = TableMonitor(self.dynamodb, APP)
        self.lock = LockMonitor(self.dynamodb, self.tables)
        self.hosts: dict[str, Host] = {}
        self.runs: dict[str, int] = {}
        self.exits: dict[str, int] = {}
        self.phases: dict[str, float] = {"start": time.time()}
        self.snapshots: dict[str, dict] = {}
        self.notes: dict[str, Any] = {}
        self.producer.start()
        self.leases.start()
        self.lock.start()

    def start_java(self) -> None:
        self._start(JAVA, java_daemon.command(fleet_properties(self.out, self.url, JAVA, **self.keys), self.version))

    def start_kclmp(self, name: str) -> None:
        self._start(name, [sys.executable, "-m", "kcl_mp", "--log-format", "json", "--properties",
                           str(fleet_properties(self.out, self.url, name, **self.keys))])

    def _start(self, name: str, argv: list[str]) -> None:
        self.runs[name] = self.runs.get(name, 0) + 1
        self.hosts[name] = Host(name, argv, self.out, run=self.runs[name])

    def stop(self, name: str) -> None:
        self.exits[f"{name}.{self.runs[name]}"] = self.hosts.pop(name).stop()

    def kill(self, name: str) -> None:
        self.exits[f"{name}.{self.runs[name]}"] = self.hosts.pop(name).kill()

    def phase(self, name: str) -> None:
        """A phase boundary: its time and every item of the three tables."""
        self.phases[name] = time.time()
        self.snapshots[name] = self.snapshot()

    def snapshot(self) -> dict[str, dict | None]:
        shot: dict[str, dict | None] = {}
        for table, key in TABLES.items():
            try:
                pages = self.dynamodb.get_paginator("scan").paginate(TableName=table, ConsistentRead=True)
                shot[table] = {item[key]["S"]: item for page in pages for item in page["Items"]}
            except self.dynamodb.exceptions.ResourceNotFoundException:
                shot[table] = None
        if self.tables.shared and shot[APP] is not None:  # the single table: its state rows apart
            rows, shot[APP], shot[COORDINATOR_TABLE], shot[METRICS_TABLE] = shot[APP], {}, {}, {}
            for key, item in rows.items():
                kind = item.get(ENTITY_TYPE, {}).get("S", "LEASE")
                shot[APP if kind == "LEASE" else METRICS_TABLE if kind == WORKER_METRIC_STATS
                     else COORDINATOR_TABLE][key] = item  # type: ignore[index]
        return shot

    def holds(self, worker: str) -> int:
        return self.leases.owners().get(worker, 0)

    def spread(self, workers: tuple[str, ...]) -> bool:
        """All leases held by ``workers``, no two apart by more than one, no handoff under way."""
        counts = [self.holds(w) for w in workers]
        return sum(counts) == SHARDS and max(counts) - min(counts) <= 1 and self.leases.settled(SHARDS)

    def metrics_items(self) -> set[str]:
        return set(self.snapshot()[METRICS_TABLE] or {})

    def delivered_so_far(self, timeout: float, what: str = "every record put so far delivered") -> None:
        expected = {(p.shard_id, p.sequence_number, p.sub_sequence_number) for p in list(self.producer.puts)}
        wait_until(lambda: expected <= {(e["_shard"], e["seq"], e["sub"])
                                        for e in records_only(recorded(self.out / "records"))},
                   timeout, what, 1.0)

    def deliver_all(self, timeout: float) -> None:
        """Stop the producer; every record it put delivered."""
        self.producer.finish()
        self.delivered_so_far(timeout, "every record delivered")

    def close(self, failure: str | None) -> None:
        self.producer.stop.set()
        with ThreadPoolExecutor(max(1, len(self.hosts))) as pool:  # the hosts' shutdowns overlap
            list(pool.map(self.stop, list(self.hosts)))
        self.phase("end")
        self.leases.stop.set()
        self.lock.stop.set()
        self.leases.join(5)
        self.lock.join(5)
        self.emulator.stop()
        result = {
            "failure": failure, "phases": self.phases, "exits": self.exits, "notes": self.notes,
            "puts": [[p.id, p.shard_id, p.sequence_number, p.sub_sequence_number] for p in self.producer.puts],
            "history": self.leases.history, "backwards": self.leases.backwards, "leaders": self.lock.changes,
            "snapshots": self.snapshots,
            "settings": {"shards": SHARDS, "failover_s": FAILOVER_MS / 1000, "round_s": ASSIGNMENT_MS / 1000,
                         "java": JAVA, "kclmp": list(KCLMP), "app": APP, "java_version": self.version},
        }
        (self.out / "result.json").write_text(json.dumps(result))


def full(fleet: Fleet) -> None:
    """Issue 20's first acceptance scenario, phase by phase (tests/e2e/test_kcl3_acceptance.py
    judges it)."""
    everyone = (JAVA, *KCLMP)
    fleet.start_java()
    wait_until(lambda: fleet.holds(JAVA) == SHARDS and fleet.lock.owner() == JAVA and fleet.leases.settled(SHARDS)
               and JAVA in fleet.metrics_items(), 90,
               "the Java daemon alone leading, holding all 8 leases and reporting its worker metrics", 0.5)
    fleet.notes["lease_indexes"] = [index["IndexName"] for index in fleet.dynamodb.describe_table(
        TableName=APP)["Table"].get("GlobalSecondaryIndexes", [])]
    fleet.phase("java_alone")
    for name in KCLMP:
        fleet.start_kclmp(name)
    # Java's LAM balances by throughput, not count: any share for each host will do here
    wait_until(lambda: all(fleet.holds(w) for w in everyone) and sum(fleet.holds(w) for w in everyone) == SHARDS
               and fleet.leases.settled(SHARDS), 120, "the leases shared by Java and both kcl-mp hosts", 0.5)
    fleet.phase("shared")
    time.sleep(2 * ASSIGNMENT_MS / 1000)  # the kcl-mp hosts process what Java assigned them
    fleet.phase("java_killing")
    fleet.kill(JAVA)  # it leads: its lock stays, good for 120 s
    fleet.phase("java_killed")
    wait_until(lambda: fleet.spread(KCLMP), 60, "the kcl-mp hosts holding all 8 leases", 0.5)
    fleet.phase("taken_over")
    fleet.start_java()
    fleet.phase("java_restarted")
    wait_until(lambda: fleet.lock.owner() in KCLMP, LOCK_LEASE_S + 30,
               "a kcl-mp host taking the leader lock", 0.5)
    fleet.phase("kclmp_leads")
    wait_until(lambda: fleet.spread(everyone), 120, "the restarted Java daemon getting its share", 0.5)
    fleet.phase("rejoined")
    time.sleep(ROUNDS_WATCHED * ASSIGNMENT_MS / 1000 + 1)
    fleet.phase("watched")
    fleet.deliver_all(90)
    fleet.phase("delivered")


SCENARIOS: dict[str, Callable[[Fleet], None]] = {"full": full}


def main(scenario: str, out: Path, version: str = java_daemon.DEFAULT_VERSION) -> int:
    fleet = Fleet(out, version)
    failure = None
    try:
        SCENARIOS[scenario](fleet)
    except AssertionError as exc:
        failure = str(exc)
    finally:
        fleet.close(failure)
    return 0


def run_scenario(scenario: str, out: Path, timeout: float, version: str = java_daemon.DEFAULT_VERSION) -> Findings:
    """Run ``scenario`` with the Java daemon on KCL ``version`` in a loopback-only namespace and
    read what it left."""
    run = subprocess.run([sys.executable, "-m", "tests.support.kcl3_fleet", scenario, str(out), version], cwd=ROOT,
                         capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False)
    assert run.returncode == 0 and (out / "result.json").exists(), run.stdout[-3000:] + run.stderr[-3000:]
    return findings(out)


if __name__ == "__main__":
    if not java_daemon.inside_namespace():
        sys.exit(java_daemon.in_loopback_namespace([sys.executable, "-m", "tests.support.kcl3_fleet",
                                                    *sys.argv[1:]]))
    sys.exit(main(sys.argv[1], Path(sys.argv[2]), *sys.argv[3:4]))

"""The leader lock shared with the real Java daemon (KCL 3.1.3, default 3.x mode), run by
tests/e2e/test_java_leader.py inside a loopback-only network namespace.

    python -m tests.support.java_leader OUT_DIR

A kcl-mp elector ``kclmp-a`` takes the lock first (leaseDuration 8 s, a heartbeat every
second), then the Java daemon ``java-1`` starts (lease table pre-created with its one
lease, so Java goes straight to its 3.x components):

    1. Java checks the lock twice (its decider re-reads at most every 30 s when it does not
       lead; each read logs "Worker : kclmp-a is the current leader.") while kclmp-a
       heartbeats: Java must not take it;
    2. kclmp-a stops heartbeating (it "dies"); Java's next check finds the version it saw
       unchanged for longer than 8 s and takes the lock;
    3. kclmp-a, back as a contender checking every second, must not take the lock Java
       heartbeats; Java is stopped (SIGTERM): it deletes the lock and kclmp-a takes it.

A monitor polls the lock item every 0.25 s. Writes OUT_DIR/result.json: the lock's owner
changes, the times (monotonic s) of kclmp-a's last heartbeat and of Java's takeover, any
sample where kclmp-a believed it led while Java's owner name was in the item, and Java's
exit; Java's log beside it.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import boto3

from kcl_mp.devtools import java_daemon
from kcl_mp.embedded import EMBEDDED_ENV, ensure_stream, start_emulator
from kcl_mp.fleet.leader import LeaderElection, LockTable
from kcl_mp.fleet.state_store import StateTables, ensure_table
from kcl_mp.leases.lease import Lease
from kcl_mp.leases.table import LeaseTable
from kcl_mp.sequence import TRIM_HORIZON, ExtendedSequenceNumber

from .harness import RECORDER, wait_until, write_properties
from .mixed_fleet import Host

APP = "java-leader"
JAVA = "java-1"
OURS = "kclmp-a"
LEASE_DURATION_MS = 8000


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    (out / "records").mkdir(exist_ok=True)
    os.environ.update(EMBEDDED_ENV)
    emulator = start_emulator(http2=True, log_path=str(out / "moto.log"))
    kinesis = boto3.client("kinesis", endpoint_url=emulator.url, region_name="us-east-1")
    dynamodb = boto3.client("dynamodb", endpoint_url=emulator.url, region_name="us-east-1")
    ensure_stream(kinesis, APP, 1)
    shard = kinesis.list_shards(StreamName=APP)["Shards"][0]
    leases = LeaseTable(dynamodb, APP)
    leases.ensure_table()
    leases.create_if_absent(Lease(key=shard["ShardId"], checkpoint=ExtendedSequenceNumber(TRIM_HORIZON),
                                  hash_range=(0, 2 ** 128 - 1)))
    tables = StateTables.separate(APP)
    ensure_table(dynamodb, tables.coordinator_table, tables.coordinator_key)
    ours = LeaderElection(LockTable(dynamodb, tables, OURS, lease_duration_ms=LEASE_DURATION_MS))
    assert ours.check(), "kclmp-a could not take the free lock"

    owners: list[list] = []  # [monotonic s, owner or None]
    overlaps: list[float] = []
    stop = threading.Event()

    def monitor() -> None:
        while not stop.is_set():
            item = dynamodb.get_item(TableName=tables.coordinator_table, Key={"key": {"S": "Leader"}},
                                     ConsistentRead=True).get("Item")
            owner = item["ownerName"]["S"] if item else None
            now = time.monotonic()
            if not owners or owners[-1][1] != owner:
                owners.append([now, owner])
            if owner == JAVA and ours.is_leader():
                overlaps.append(now)
            stop.wait(0.25)

    watcher = threading.Thread(target=monitor, daemon=True)
    watcher.start()
    properties = write_properties(out / f"{JAVA}.properties", **{
        "executableName": f"{sys.executable} {RECORDER}", "streamName": APP, "applicationName": APP,
        "workerId": JAVA, "AwsCredentialsProvider": "EnvironmentVariableCredentialsProvider",
        "regionName": "us-east-1", "kinesisEndpoint": emulator.url, "dynamoDBEndpoint": emulator.url,
        "initialPositionInStream": "TRIM_HORIZON", "failoverTimeMillis": 6000, "shardSyncIntervalMillis": 5000,
        "idleTimeBetweenReadsInMillis": 500, "shutdownGraceMillis": 10000, "metricsLevel": "NONE"})
    java = Host(JAVA, java_daemon.command(properties), out)
    log_path = out / f"{JAVA}.1.log"
    result: dict = {"failure": None}

    def java_checks() -> int:
        return log_path.read_text(errors="replace").count(f"Worker : {OURS} is the current leader.")

    def heartbeat_until(condition, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting for {what}"
            assert ours.check(), "kclmp-a lost the lock while heartbeating"
            time.sleep(1.0)

    try:
        heartbeat_until(lambda: java_checks() >= 2, 75, "Java reading kclmp-a's lock twice")
        result["java_checks_while_alive"] = java_checks()
        result["last_heartbeat"] = ours.held.at
        # kclmp-a is dead from here: no check until Java holds the lock
        wait_until(lambda: owners[-1][1] == JAVA, 60, "Java taking the expired lock", 0.25)
        result["java_took"] = next(t for t, owner in owners if owner == JAVA)
        for _ in range(3):  # back as a contender: Java heartbeats (every 30 s, lease 120 s)
            assert not ours.check(), "kclmp-a took the lock Java holds"
            time.sleep(1.0)
        result["java_exit"] = java.stop()
        result["lock_after_java"] = LockTable(dynamodb, tables, OURS).read() is not None
        assert ours.check(), "kclmp-a did not take the lock Java released"
        result["ours_took_back"] = time.monotonic()
    except AssertionError as exc:
        result["failure"] = str(exc)
    finally:
        if "java_exit" not in result:
            result["java_exit"] = java.stop()
        time.sleep(0.5)
        stop.set()
        watcher.join(5)
        emulator.stop()
    result.update({"owners": owners, "overlaps": overlaps, "lease_duration_s": LEASE_DURATION_MS / 1000,
                   "java_log": log_path.name})
    (out / "result.json").write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    if not java_daemon.inside_namespace():
        sys.exit(java_daemon.in_loopback_namespace([sys.executable, "-m", "tests.support.java_leader",
                                                    *sys.argv[1:]]))
    sys.exit(main(Path(sys.argv[1])))

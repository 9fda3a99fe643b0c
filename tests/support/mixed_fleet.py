"""The mixed-fleet scenario, run by tests/e2e/test_mixed_fleet.py inside a network
namespace with only loopback up (the Java daemon calls the EC2 metadata address at start).

    python -m tests.support.mixed_fleet OUT_DIR [KCL_VERSION]

One Java MultiLangDaemon (KCL 3.1.3 or KCL_VERSION: java_daemon.KCL_VERSIONS;
clientVersionConfig COMPATIBLE_WITH_2X) and two
kcl-mp hosts share one lease table on moto (served over h2c for Java), 8 shards, a
producer running throughout, the same amazon_kclpy recorder as processor everywhere:

    1. the Java daemon starts alone and takes all 8; then the kcl-mp hosts start and steal
       their share from it; wait until the spread is 3/3/2
    2. SIGTERM the Java daemon; wait until the kcl-mp hosts hold all 8
    3. start the Java daemon again; wait until it holds at least 2 again
    4. stop the producer; wait until every record was delivered; stop everything

Writes OUT_DIR/result.json (the puts, the lease table's history as a monitor polled it,
checkpoints seen going backwards, the phase times) beside the recorders' files and the
three daemons' logs; the test judges them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import boto3

from kcl_mp.devtools import java_daemon
from kcl_mp.devtools.producer import produce
from kcl_mp.embedded import EMBEDDED_ENV, ensure_stream, start_emulator

from .harness import RECORDER, BackgroundProducer, TableMonitor, recorded, records_only, wait_until, write_properties

SHARDS = 8
FAILOVER_MS = 6000
APP = "mixed-fleet"
KCLMP_HOSTS = ("kclmp-a", "kclmp-b")
JAVA_HOST = "java-1"


def properties(out: Path, url: str, worker: str, **overrides: object) -> Path:
    """One file per worker, the same keys otherwise: both daemons read it as it is.
    ``overrides`` replace keys (None leaves a key out: Java's default then applies)."""
    keys = {
        "executableName": f"{sys.executable} {RECORDER}",
        "streamName": APP,
        "applicationName": APP,
        "workerId": worker,
        "AwsCredentialsProvider": "EnvironmentVariableCredentialsProvider",
        "regionName": "us-east-1",
        "kinesisEndpoint": url,
        "dynamoDBEndpoint": url,
        "initialPositionInStream": "TRIM_HORIZON",
        "clientVersionConfig": "CLIENT_VERSION_CONFIG_COMPATIBLE_WITH_2X",
        "failoverTimeMillis": FAILOVER_MS,
        "maxRecords": 1000,
        "idleTimeBetweenReadsInMillis": 500,
        "shardSyncIntervalMillis": 10000,
        "shutdownGraceMillis": 10000,
        "metricsLevel": "NONE",
    }
    keys.update(overrides)
    return write_properties(out / f"{worker}.properties", **{k: v for k, v in keys.items() if v is not None})


class Host:
    def __init__(self, name: str, argv: list[str], out: Path, run: int = 1):
        self.name = name
        self.log = open(out / f"{name}.{run}.log", "wb")
        env = {**os.environ, "RECORDER_DIR": str(out / "records"), "RECORDER_HOST": name,
               "RECORDER_CHECKPOINT_EVERY": "50"}
        self.process = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        env=env, cwd=str(out), start_new_session=True)

    def stop(self, timeout: float = 60.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            return self.process.wait(10)
        finally:
            self.log.close()

    def kill(self) -> int:
        """SIGKILL the host and its processors (its process group): a host that dies."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        try:
            return self.process.wait(10)
        finally:
            self.log.close()


def main(out: Path, version: str = java_daemon.DEFAULT_VERSION) -> int:
    out.mkdir(parents=True, exist_ok=True)
    (out / "records").mkdir(exist_ok=True)
    os.environ.update(EMBEDDED_ENV)
    emulator = start_emulator(http2=True, log_path=str(out / "moto.log"))
    kinesis = boto3.client("kinesis", endpoint_url=emulator.url, region_name="us-east-1")
    dynamodb = boto3.client("dynamodb", endpoint_url=emulator.url, region_name="us-east-1")
    ensure_stream(kinesis, APP, SHARDS)
    producer = BackgroundProducer(lambda n: produce(kinesis, APP, 60, first_id=n * 60, keys=256, seed=n), 0.25)
    monitor = TableMonitor(dynamodb, APP)
    hosts: dict[str, Host] = {}
    phases: dict[str, float] = {"start": time.time()}
    items: dict[str, list] = {}  # the raw lease items (DynamoDB JSON) when spread, and at the end
    failure = None
    try:
        producer.start()
        monitor.start()
        hosts[JAVA_HOST] = Host(JAVA_HOST, java_daemon.command(properties(out, emulator.url, JAVA_HOST), version), out)

        def holds(worker: str) -> int:
            return monitor.owners().get(worker, 0)

        wait_until(lambda: holds(JAVA_HOST) == SHARDS, 300, "the Java daemon alone taking all 8 leases", 0.5)
        phases["java_alone"] = time.time()
        for name in KCLMP_HOSTS:
            hosts[name] = Host(name, [sys.executable, "-m", "kcl_mp", "--properties",
                                      str(properties(out, emulator.url, name))], out)

        def spread() -> bool:
            counts = sorted(holds(w) for w in (JAVA_HOST, *KCLMP_HOSTS))
            return counts == [2, 3, 3] and monitor.settled(SHARDS)

        wait_until(spread, 300, "the leases spread over the Java daemon and both kcl-mp hosts (3/3/2)", 1.0)
        phases["spread"] = time.time()
        phases["spread_owners"] = dict(monitor.owners())  # type: ignore[assignment]
        items["spread"] = dynamodb.scan(TableName=APP, ConsistentRead=True)["Items"]
        time.sleep(8)
        phases["java_stop"] = time.time()
        phases["java_exit"] = hosts[JAVA_HOST].stop()
        wait_until(lambda: sum(holds(w) for w in KCLMP_HOSTS) == SHARDS, 90, "kcl-mp holding all 8 leases", 0.5)
        phases["taken_over"] = time.time()
        time.sleep(8)
        hosts[JAVA_HOST] = Host(JAVA_HOST, java_daemon.command(out / f"{JAVA_HOST}.properties", version), out,
                               run=2)
        phases["java_restart"] = time.time()
        wait_until(lambda: holds(JAVA_HOST) >= 2, 300, "the restarted Java daemon taking leases back", 1.0)
        phases["taken_back"] = time.time()
        phases["back_owners"] = dict(monitor.owners())  # type: ignore[assignment]
        time.sleep(8)
        producer.finish()
        expected = {(p.shard_id, p.sequence_number, p.sub_sequence_number) for p in producer.puts}
        wait_until(lambda: expected <= {(e["_shard"], e["seq"], e["sub"]) for e in records_only(recorded(out / "records"))},
                   120, "every record delivered", 1.0)
        phases["delivered"] = time.time()
    except AssertionError as exc:
        failure = str(exc)
    finally:
        producer.stop.set()
        exits = {name: host.stop() for name, host in hosts.items()}
        items["end"] = dynamodb.scan(TableName=APP, ConsistentRead=True)["Items"]
        monitor.stop.set()
        monitor.join(5)
        emulator.stop()
    result = {
        "failure": failure,
        "phases": phases,
        "exits": exits,
        "puts": [[p.id, p.shard_id, p.sequence_number, p.sub_sequence_number] for p in producer.puts],
        "history": monitor.history,
        "backwards": monitor.backwards,
        "failover_s": FAILOVER_MS / 1000,
        "java_version": version,
        "items": items,
    }
    (out / "result.json").write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    if not java_daemon.inside_namespace():
        sys.exit(java_daemon.in_loopback_namespace([sys.executable, "-m", "tests.support.mixed_fleet",
                                                    *sys.argv[1:]]))
    sys.exit(main(Path(sys.argv[1]), *sys.argv[2:3]))

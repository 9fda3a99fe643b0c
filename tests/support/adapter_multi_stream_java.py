"""A Java DynamoDB Streams Kinesis Adapter 2.x multi-stream consumer and kcl-mp multi-stream
hosts on one lease table, one after the other, run by
tests/e2e/test_dynamodb_multi_stream_java.py inside a network namespace with only loopback up
(KCL 3.x calls the EC2 metadata address at start).

    python -m tests.support.adapter_multi_stream_java OUT_DIR [PHASES]

(PHASES: run only the first so many, 1 for the Java worker alone.)

Three tables with streams on the embedded emulator: ``a`` (2 shards) and ``b`` (1) that every
host consumes, and ``c`` (1) that kcl-mp meets first. The Java worker is the adapter 2.0.1 on
KCL 3.1.1 with the adapter's multi-stream tracker (tests/java/adapter-consumer, ``streamArns``),
kcl-mp is given the same ARNs in ``streamArns``; both in the 2.x-compatible mode (the lease
taker: no leader lock to wait for, no lease assignment round; both kinds' default 3.x mode
passes too, its handovers 2 and 5 s slower), failoverTimeMillis 4000, the recorder as
processor (tests/processors/recorder.py for kcl-mp, its Java twin in tests/java/adapter-consumer):

    1. Java (``java-1``, tables a and b) finds the table empty, creates their leases (after the
       1-30 s at random Java waits on an empty table) and delivers what was written; SIGTERM:
       its processors checkpoint (Java keeps its leases: they expire)
    2. more written to every table; kcl-mp (``kclmp-1``, a, b and c) takes the leases once they
       expire, creates c's and delivers from where Java checkpointed; SIGTERM: its processors
       checkpoint, it releases its leases
    3. more written; Java (``java-2``, a, b and c) takes the leases and delivers from where
       kcl-mp checkpointed (Java creates a new stream's leases at start only on an empty table:
       so kcl-mp, not Java, meets the third stream first)

Each phase waits for every change written so far to be delivered. Each change is an INSERT of
an item whose ``pk`` is a number unique over the tables. Writes OUT_DIR/result.json (the
streams' ARNs and the adapter's identifiers of them, the writes, every item of the lease table
at the end of each phase, the phase times, the exits) beside the recorders' files and the
hosts' logs; the test judges them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import boto3

from kcl_mp.config.values import adapter_stream_name
from kcl_mp.devtools import java_daemon
from kcl_mp.embedded import EMBEDDED_ENV, start_emulator
from kcl_mp.leases.multi_stream import ADAPTER_EPOCH

from .dynamodb_streams import admin, make_table, shards
from .handover import Handover
from .harness import RECORDER, changes_delivered
from .mixed_fleet import properties

APP = "adapter-multi-stream"
TABLES = {f"{APP}-a": 2, f"{APP}-b": 1, f"{APP}-c": 1}
KCLMP_FIRST = f"{APP}-c"  # not in Java's first list: kcl-mp creates its leases
PER_PHASE = 40  # changes written to each table before each phase
FAILOVER_MS = 4000
CHECKPOINT_EVERY = 15
PHASES = (("java-1", "java"), ("kclmp-1", "kcl-mp"), ("java-2", "java"))
MODE = "CLIENT_VERSION_CONFIG_COMPATIBLE_WITH_2X"


def main(out: Path, phases_run: int = len(PHASES)) -> int:
    (out / "records").mkdir(parents=True, exist_ok=True)
    os.environ.update(EMBEDDED_ENV)
    emulator = start_emulator(log_path=str(out / "moto.log"))
    dynamodb = boto3.client("dynamodb", endpoint_url=emulator.url, region_name="us-east-1")
    streams_client = boto3.client("dynamodbstreams", endpoint_url=emulator.url, region_name="us-east-1")
    streams: dict[str, dict] = {}
    for table, count in TABLES.items():
        admin(emulator.url, action="configure", shards=count)  # a stream starts with the shards set when first seen
        arn = make_table(dynamodb, table)
        streams[table] = {"arn": arn, "identifier": identifier(arn),
                          "shards": [s["ShardId"] for s in shards(streams_client, arn)]}
    writes: list[list] = []  # [pk, table]
    run = Handover()
    try:
        for number, (worker, kind) in enumerate(PHASES[:phases_run]):
            listed = [table for table in TABLES if number > 0 or table != KCLMP_FIRST]
            for i, table in enumerate(TABLES):
                first = (number * len(TABLES) + i) * PER_PHASE
                for pk in range(first, first + PER_PHASE):
                    dynamodb.put_item(TableName=table, Item={"pk": {"S": str(pk)}, "v": {"N": "0"}})
                    writes.append([str(pk), table])
            arns = [streams[table]["arn"] for table in listed]
            argv = java(out, emulator.url, worker, arns) if kind == "java" else kclmp(out, emulator.url, worker, arns)
            run.phase(worker, argv, out, {pk for pk, table in writes if table in listed}, lambda: delivered(out),
                      "change written", dynamodb, APP)
    except AssertionError as exc:
        run.failure = str(exc)
    finally:
        emulator.stop()
    run.write(out, streams=streams, kclmp_first=KCLMP_FIRST, writes=writes)
    return 0


def identifier(arn: str) -> str:
    """The adapter's multi-stream identifier of a DynamoDB stream (``account:region$account$table$label:1``)."""
    return f"{arn.split(':')[4]}:{adapter_stream_name(arn)}:{ADAPTER_EPOCH}"


def delivered(out: Path) -> set[str]:
    return {d["key"] for d in changes_delivered(out / "records")}


def kclmp(out: Path, url: str, worker: str, arns: list[str]) -> list[str]:
    props = properties(out, url, worker, streamName=None, streamArns=",".join(arns), applicationName=APP,
                       executableName=f"{sys.executable} {RECORDER}", failoverTimeMillis=FAILOVER_MS,
                       clientVersionConfig=MODE)
    return [sys.executable, "-m", "kcl_mp", "--log-format", "json", "--properties", str(props)]


def java(out: Path, url: str, worker: str, arns: list[str]) -> list[str]:
    return java_daemon.peer_command(
        "adapter-consumer", "kclmp.peers.AdapterConsumer", f"endpoint={url}", f"streamArns={','.join(arns)}",
        f"application={APP}", f"worker={worker}", f"failoverMillis={FAILOVER_MS}", "assignmentMillis=4000",
        "reportMillis=5000", "idleMillis=500", f"checkpointEvery={CHECKPOINT_EVERY}", f"out={out / 'records'}",
        f"clientVersionConfig={MODE}")


if __name__ == "__main__":
    if not java_daemon.inside_namespace():
        sys.exit(java_daemon.in_loopback_namespace([sys.executable, "-m", "tests.support.adapter_multi_stream_java",
                                                    *sys.argv[1:]]))
    sys.exit(main(Path(sys.argv[1]), *map(int, sys.argv[2:3])))

"""A Java KCL 3.5 multi-stream consumer and kcl-mp multi-stream hosts on one lease table, one
after the other, run by tests/e2e/test_multi_stream_java.py inside a network namespace with
only loopback up (the Java KCL calls the EC2 metadata address at start).

    python -m tests.support.multi_stream_java OUT_DIR

Three streams on moto (served over h2c for Java): ``a`` (2 shards) and ``b`` (1) that every
host consumes, and ``c`` (1) that kcl-mp meets first. Both kinds in the 2.x-compatible mode
(the lease taker: no leader lock to wait for), failoverTimeMillis 4000, the recorder as
processor (tests/processors/recorder.py for kcl-mp, its Java twin in
tests/java/multistream-consumer):

    1. Java (``java-1``, streams a and b) finds the table empty, creates their leases (after
       the 1-30 s at random Java waits on an empty table) and delivers what was put; SIGTERM:
       its processors checkpoint (Java keeps its leases: they expire)
    2. more put to every stream; kcl-mp (``kclmp-1``, a, b and c) takes the leases once they
       expire, creates c's and delivers from where Java checkpointed; SIGTERM: its processors
       checkpoint, it releases its leases
    3. more put; Java (``java-2``, a, b and c) takes the leases and delivers from where kcl-mp
       checkpointed (Java creates a new stream's leases at start only on an empty table; later
       its leader looks every 60 s: so kcl-mp, not Java, meets the third stream first)

Each phase waits for every record put so far to be delivered. Writes OUT_DIR/result.json (the
streams' identifiers, the puts, every item of the lease table at the end of each phase, the
phase times, the exits) beside the recorders' files and the hosts' logs; the test judges them.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import boto3

from kcl_mp.devtools import java_daemon
from kcl_mp.devtools.producer import produce
from kcl_mp.embedded import EMBEDDED_ENV, ensure_stream, start_emulator

from .handover import Handover
from .harness import RECORDER, recorded, records_only
from .mixed_fleet import properties

APP = "multi-stream-java"
STREAMS = {f"{APP}-a": 2, f"{APP}-b": 1, f"{APP}-c": 1}
KCLMP_FIRST = f"{APP}-c"  # not in Java's first list: kcl-mp creates its leases
PER_PHASE = 40  # records put to each stream before each phase
FAILOVER_MS = 4000
CHECKPOINT_EVERY = 15
PHASES = (("java-1", "java"), ("kclmp-1", "kcl-mp"), ("java-2", "java"))


def main(out: Path) -> int:
    (out / "records").mkdir(parents=True, exist_ok=True)
    os.environ.update(EMBEDDED_ENV)
    emulator = start_emulator(http2=True, log_path=str(out / "moto.log"))
    kinesis = boto3.client("kinesis", endpoint_url=emulator.url, region_name="us-east-1")
    dynamodb = boto3.client("dynamodb", endpoint_url=emulator.url, region_name="us-east-1")
    streams: dict[str, dict] = {}
    for name, shards in STREAMS.items():
        ensure_stream(kinesis, name, shards)
        summary = kinesis.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]
        streams[name] = {"arn": summary["StreamARN"],
                         "epoch": int(summary["StreamCreationTimestamp"].timestamp() * 1000)}
    puts: list[list] = []
    run = Handover()
    try:
        for number, (worker, kind) in enumerate(PHASES):
            listed = [name for name in STREAMS if number > 0 or name != KCLMP_FIRST]
            for i, name in enumerate(STREAMS):
                first = (number * len(STREAMS) + i) * PER_PHASE
                puts.extend([p.id, name, p.shard_id, p.sequence_number, p.sub_sequence_number]
                            for p in produce(kinesis, name, PER_PHASE, first_id=first, seed=first))
            argv = (java(out, emulator.url, worker, {name: streams[name] for name in listed}) if kind == "java"
                    else kclmp(out, emulator.url, worker, [streams[name]["arn"] for name in listed]))
            run.phase(worker, argv, out, {p[0] for p in puts if p[1] in listed}, lambda: delivered(out),
                      "record put", dynamodb, APP)
    except AssertionError as exc:
        run.failure = str(exc)
    finally:
        emulator.stop()
    run.write(out, streams=streams, kclmp_first=KCLMP_FIRST, puts=puts)
    return 0


def delivered(out: Path) -> set[int]:
    return {json.loads(e["data"])["id"] for e in records_only(recorded(out / "records"))}


def kclmp(out: Path, url: str, worker: str, arns: list[str]) -> list[str]:
    props = properties(out, url, worker, streamName=None, streamArns=",".join(arns), applicationName=APP,
                       executableName=f"{sys.executable} {RECORDER}", failoverTimeMillis=FAILOVER_MS)
    return [sys.executable, "-m", "kcl_mp", "--log-format", "json", "--properties", str(props)]


def java(out: Path, url: str, worker: str, streams: dict[str, dict]) -> list[str]:
    listed = ",".join(f"{s['arn']}@{s['epoch']}" for s in streams.values())
    return java_daemon.peer_command(
        "multistream-consumer", "kclmp.peers.MultiStreamConsumer", f"endpoint={url}", f"application={APP}",
        f"worker={worker}", f"streams={listed}", f"failoverMillis={FAILOVER_MS}", "idleMillis=500",
        f"checkpointEvery={CHECKPOINT_EVERY}", f"out={out / 'records'}", java_options=java_daemon.JAVA_OPTIONS)


if __name__ == "__main__":
    if not java_daemon.inside_namespace():
        sys.exit(java_daemon.in_loopback_namespace([sys.executable, "-m", "tests.support.multi_stream_java",
                                                    *sys.argv[1:]]))
    sys.exit(main(Path(sys.argv[1])))

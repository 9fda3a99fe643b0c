"""The ``kclmp_landing`` source's two figures (issue 28, L3 and L4).

    .venv/bin/python bench/spark_landing.py listing [--files 100000] [--shards 100] [--threads 16]
                                                    [--triggers 3] [--quiet-load 1.0 --quiet-wait 7200]
    .venv/bin/python bench/spark_landing.py latency [--seconds 60] [--rate 20] [--python PATH]

listing   lands ``--files`` small files over ``--shards`` shards into moto's S3 (a thread pool of
          PutObjects; the time is quoted), then plans an idle trigger from offsets at each
          shard's last file, as a query that has caught up holds them: ListObjectsV2 and GetObject
          calls (counted with a botocore event hook), planning time and the planner's own CPU, for
          the planning process's first trigger (it reads the footer of each shard's newest file)
          and ``--triggers`` next ones, and what one such LIST costs the embedded emulator
          (kcl_mp.embedded.s3_listing: a page of the prefix after StartAfter, as S3 reads it; on
          the emulator the wall time is mostly the emulator's). The machine's load average is
          printed with each trigger; ``--quiet-load`` waits (at most ``--quiet-wait`` s, the
          files staying landed) until the 1-minute load average is at most that before planning.
latency   kcl-mp with the sink rolling at 5 s on moto's Kinesis, the job with a 5 s trigger into
          a Parquet table; a producer puts ``--rate`` records/s for ``--seconds``. Put-to-visible
          is from the put to the moment the file sink's log committed the batch holding the
          record (the ``_spark_metadata/<batch>`` file's mtime): p50 and p99.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

import boto3
import pyarrow.parquet as pq

from kcl_mp.devtools.spark_local import job_env, local_spark_env
from kcl_mp.embedded import EMBEDDED_ENV, ensure_stream, start_emulator
from kcl_mp.spark.layout import floor_key
from kcl_mp.spark.sink import landing_file
from kcl_mp.spark.source import Options, Planner
from kcl_mp.spark.storage import Storage

ROOT = Path(__file__).resolve().parents[1]
STREAM = "bench"
SPARK_ENV = local_spark_env()


def listing(args: argparse.Namespace) -> None:
    os.environ.update(EMBEDDED_ENV)
    emulator = start_emulator()
    try:
        s3 = boto3.client("s3", endpoint_url=emulator.url)
        s3.create_bucket(Bucket="landing")
        url = "s3://landing/area"
        storage = Storage(url, emulator.url)
        per_shard = args.files // args.shards
        written = datetime.now(timezone.utc)

        def shard_files(s: int) -> None:
            shard = f"shardId-{s:012d}"
            after = (0, 0)
            for n in range(per_shard):
                seq = 10**20 + n * 10
                rows = [(str(seq + k), 0, "k", 0, b"x" * 16) for k in range(3)]
                relative, table = landing_file(STREAM, shard, rows, after, after, False, written, "w", n + 1)
                storage.commit(relative, table)
                after = (seq + 2, 0)

        began = time.monotonic()
        with ThreadPoolExecutor(args.threads) as pool:
            list(pool.map(shard_files, range(args.shards)))
        land_s = time.monotonic() - began
        print(f"landed {per_shard * args.shards} files over {args.shards} shards in {land_s:.1f} s "
              f"({args.threads} threads, moto S3)")
        last = 10**20 + (per_shard - 1) * 10 + 2
        caught_up = {f"{STREAM}/shardId-{s:012d}": {"seq": str(last), "sub": 0, "key": floor_key((last - 10, 0)),
                                                    "ended": False, "takes": []} for s in range(args.shards)}
        planner = Planner(Options.parse({"path": url, "s3Endpoint": emulator.url}))
        calls: Counter = Counter()
        planner.storage.s3.meta.events.register("before-call.s3.*", lambda model, **_: calls.update([model.name]))
        if args.quiet_load is not None:
            waited = wait_for_quiet(args.quiet_load, args.quiet_wait)
            print(f"waited {waited:.0f} s for a 1-minute load average <= {args.quiet_load}")
        for trigger in ["first idle trigger", *["next idle trigger"] * args.triggers]:
            calls.clear()
            began, cpu = time.monotonic(), time.process_time()
            end = planner.plan(caught_up, None, None)
            took, cpu = time.monotonic() - began, time.process_time() - cpu
            assert end == caught_up, "an idle trigger moved"
            print(f"{trigger}: {calls['ListObjectsV2']} LIST, {calls['GetObject']} GET, planned in {took:.2f} s "
                  f"({cpu:.2f} s of the planner's CPU; load average {os.getloadavg()[0]:.1f})")
        prefix = f"area/{STREAM}/shardId-{0:012d}/"
        began = time.monotonic()
        s3.list_objects_v2(Bucket="landing", Prefix=prefix, StartAfter=prefix + floor_key((last - 10, 0)))
        print(f"one ListObjectsV2 of one new file takes the emulator {time.monotonic() - began:.3f} s with "
              f"{per_shard * args.shards} keys in the bucket")
    finally:
        emulator.stop()


def wait_for_quiet(load: float, at_most_s: float) -> float:
    """Seconds waited, bounded, until the machine's 1-minute load average is at most ``load``."""
    began = time.monotonic()
    while os.getloadavg()[0] > load and time.monotonic() - began < at_most_s:
        time.sleep(5)
    return time.monotonic() - began


def committed_at(table: Path) -> dict[str, float]:
    """Each output file the file sink committed -> when its batch's log entry was written."""
    found: dict[str, float] = {}
    log = table / "_spark_metadata"
    entries = [e for e in log.iterdir() if e.name.split(".")[0].isdigit()] if log.exists() else []
    for entry in sorted(entries, key=lambda e: int(e.name.split(".")[0])):  # "<n>" and every 10th "<n>.compact"
        stamp = entry.stat().st_mtime
        for line in entry.read_text().splitlines()[1:]:
            found.setdefault(json.loads(line)["path"].removeprefix("file://"), stamp)
    return found


def latency(args: argparse.Namespace) -> None:
    os.environ.update(EMBEDDED_ENV)
    work = Path(tempfile.mkdtemp(prefix="kclmp-spark-latency-"))
    emulator = start_emulator(log_path=str(work / "moto.log"))
    landing, table, checkpoint = work / "landing", work / "table", work / "checkpoint"
    processes: list[subprocess.Popen] = []
    try:
        kinesis = boto3.client("kinesis", endpoint_url=emulator.url)
        ensure_stream(kinesis, STREAM, 2)
        (work / "app.properties").write_text("".join(f"{k} = {v}\n" for k, v in {
            "executableName": f"{sys.executable} -m kcl_mp.spark.sink --landing {landing} --stream {STREAM} "
                              "--batch-seconds 5",
            "streamName": STREAM, "applicationName": "bench-latency", "regionName": "us-east-1",
            "AwsCredentialsProvider": "EnvironmentVariableCredentialsProvider", "kinesisEndpoint": emulator.url,
            "dynamoDBEndpoint": emulator.url, "initialPositionInStream": "TRIM_HORIZON", "metricsLevel": "NONE",
            "idleTimeBetweenReadsInMillis": 200, "callProcessRecordsEvenForEmptyRecordList": "true"}.items()))
        env = {**os.environ, **SPARK_ENV}
        job = job_env(args.python)  # the job (and its workers) on --python: e.g. a venv of the wheel
        processes.append(subprocess.Popen([sys.executable, "-m", "kcl_mp", "--properties", str(work / "app.properties")],
                                          cwd=ROOT, env=env, stdout=open(work / "kcl-mp.log", "wb"),
                                          stderr=subprocess.STDOUT, start_new_session=True))
        processes.append(subprocess.Popen([args.python, "-m", "kcl_mp.spark.job", "--landing", str(landing),
                                           "--output", str(table), "--checkpoint", str(checkpoint),
                                           "--processing-time", "5 seconds"],
                                          cwd=ROOT if args.python == sys.executable else work, env=job,
                                          stdout=open(work / "job.log", "wb"), stderr=subprocess.STDOUT,
                                          start_new_session=True))
        time.sleep(20)  # the JVM and the first leases
        put_at: dict[int, float] = {}
        stop = threading.Event()

        def produce() -> None:
            n = 0
            while not stop.is_set():
                kinesis.put_record(StreamName=STREAM, PartitionKey=str(n), Data=json.dumps({"id": n}).encode())
                put_at[n] = time.time()
                n += 1
                stop.wait(1 / args.rate)

        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        time.sleep(args.seconds)
        stop.set()
        producer.join()
        visible: dict[int, float] = {}
        deadline = time.monotonic() + 60
        while len(visible) < len(put_at) and time.monotonic() < deadline:
            for path, stamp in committed_at(table).items():
                for data in pq.read_table(path, columns=["data"]).column("data").to_pylist():
                    visible.setdefault(json.loads(data)["id"], stamp)
            time.sleep(1)
        delays = sorted(visible[i] - put_at[i] for i in visible if i in put_at)
        p50 = statistics.median(delays)
        p99 = delays[min(len(delays) - 1, int(len(delays) * 0.99))]
        print(f"{len(delays)}/{len(put_at)} records visible; put-to-visible p50 {p50:.1f} s, p99 {p99:.1f} s "
              f"(sink rolling at 5 s, trigger 5 s, {args.rate} records/s for {args.seconds} s); work dir {work}")
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, 9)
            process.wait(30)
        emulator.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    one = sub.add_parser("listing")
    one.add_argument("--files", type=int, default=100_000)
    one.add_argument("--shards", type=int, default=100)
    one.add_argument("--threads", type=int, default=16)
    one.add_argument("--triggers", type=int, default=3, help="idle triggers measured after the first")
    one.add_argument("--quiet-load", type=float, help="plan once the 1-minute load average is at most this")
    one.add_argument("--quiet-wait", type=float, default=7200, help="s to wait for that at most")
    two = sub.add_parser("latency")
    two.add_argument("--seconds", type=float, default=60)
    two.add_argument("--rate", type=float, default=20)
    two.add_argument("--python", default=os.environ.get("KCLMP_SPARK_PYTHON", sys.executable),
                     help="the job's interpreter (default $KCLMP_SPARK_PYTHON, else this one): a venv with the "
                          "wheel on a cluster's PySpark")
    args = p.parse_args()
    listing(args) if args.what == "listing" else latency(args)


if __name__ == "__main__":
    main()

"""The ``kclmp_kinesis`` source's performance acceptance (issue 34): throughput, latency, planning.

    make bench-spark-kinesis    (= .venv/bin/python bench/spark_kinesis.py all)
    .venv/bin/python bench/spark_kinesis.py throughput [--shards 16] [--records-per-shard 33600]
                                            [--record-bytes 1024] [--masters 1,2] [--shards-per-task 4]
    .venv/bin/python bench/spark_kinesis.py profile [--shards 4] [--records-per-shard 33600] [--top 20]
    .venv/bin/python bench/spark_kinesis.py latency [--shards 8] [--rate 1000] [--seconds 60] [--trigger-s 1]
    .venv/bin/python bench/spark_kinesis.py planning [--shards 1000] [--delay-ms 20] [--triggers 3]
                                            [--probe-threads N]

throughput  (bar: >= 50,000 records/s per executor core at 1 KB.) ``kcl_mp.devtools.fast_kinesis``
            serves ``--shards`` bounded shards of ``--records-per-shard`` records of
            ``--record-bytes``, in pages as large as Kinesis allows (10,000 records or 10 MB);
            for each ``--masters`` N, a fresh Spark local[N] (its own process and JVM) reads
            them all, back-to-back micro-batches (no trigger) into Spark's ``noop`` sink,
            ``--shards-per-task`` shards a task. A batch read of the same stream first starts
            and warms the Python workers (it reads nothing: fast_kinesis stamps records with
            the time it serves them, after the read's end), so what is counted is reading.
            Figures: records/s over the batches (Spark's progress: triggerExecution, each
            batch's planning included), that / N (per executor core),
            and the CPU seconds, from psutil, of the JVM, of Spark's Python workers (the
            executors' ``read``), of the planner's Python process and of fast_kinesis (as it
            prints it at SIGTERM: its whole life, mostly serving); records per CPU second of
            the Python workers.
profile     In this process, on fast_kinesis (``--shards`` of the same records as above): one
            task's read as Spark runs it (the stream reader's ``read`` of one partition of
            every shard): wall time, CPU, records/s; then ``kinesis_read.read_take`` shard
            after shard under cProfile (cProfile sees one thread): the time asleep between a
            shard's GetRecords (Kinesis allows 5 a second a shard) and the functions by their
            own time.
latency     (bar: put-to-visible p50 <= 3 s, p99 <= 8 s.) moto (``kcl_mp.embedded``; kinesis-mock
            put 4x slower here) serves a stream of ``--shards``; Spark local[2] reads it from
            TRIM_HORIZON with a ``--trigger-s`` processing-time trigger into a Parquet table
            (Spark's file sink). Once the query has started and found the stream empty, two
            producers put ``--rate`` records/s for ``--seconds`` (every 1/10 s a PutRecords
            each, on their own shards), each record holding its id and the time its put was
            due. Visible: the moment the file sink's log committed the batch holding the
            record (the ``_spark_metadata/<batch>`` file's mtime), as bench/spark_landing.py
            measures it.
planning    (bars: <= 1.5 s, <= 2 Kinesis calls per idle shard, 0 manifest writes per idle
            trigger.) fast_kinesis serves ``--shards`` shards of 10 records each, every answer
            held ``--delay-ms``; the stream reader's methods are called from Python as Spark's
            driver calls them (no Spark): ``initialOffset``, ``latestOffset`` (the backlog),
            the batch read by executors (``read`` on every partition, 64 at a time), then
            ``latestOffset`` from the batch's end: once (it reads the manifests) and
            ``--triggers`` more times, back to back as Spark calls it for an idle query (all
            idle: iterators reused). Per call: seconds, the planner's CPU, Kinesis calls by
            operation (a botocore hook), the shards probed, manifest reads, and files created
            or changed under metadataPath; at the end, the longest an idle shard went between
            two probes (what a shard that wakes waits for at most, before its batch).

Every figure printed is measured in the run. Timing runs want a quiet host: the machine's
load average is printed beside them.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from common import start_fast_kinesis, stop
from throughput import page_records

from kcl_mp.devtools.bench_figures import percentile
from kcl_mp.devtools.spark_local import job_env
from kcl_mp.embedded import EMBEDDED_ENV, free_port

STREAM = "bench"
URL = "http://127.0.0.1:{}"


def load() -> str:
    return f"load average {os.getloadavg()[0]:.1f}"


def source_cpu(log: Path) -> float | None:
    """fast_kinesis' own CPU seconds, from the line it prints when stopped."""
    found = re.search(r"own CPU ([0-9.]+) s", log.read_text()) if log.exists() else None
    return float(found.group(1)) if found else None


def options(url: str, metadata: str | Path, **more: Any) -> dict[str, str]:
    return {"streamName": STREAM, "endpointUrl": url, "region": "us-east-1", "initialPosition": "trim_horizon",
            "metadataPath": str(metadata), **{k: str(v) for k, v in more.items()}}


# -- the Spark job (a child process: one JVM per run) ------------------------------------------


class TreeCpu:
    """CPU seconds (user + system, psutil) of this process's descendants by role: the JVM,
    Spark's Python workers (``pyspark.daemon`` and the workers it forks), other Python
    processes of the JVM (the streaming source's planner). Sampled on a thread: a process
    that ends between samples keeps its last reading."""

    def __init__(self) -> None:
        import psutil

        self.me = psutil.Process()
        self.procs: dict[int, Any] = {}
        self.roles: dict[int, str] = {}
        self.seen: dict[int, float] = {}
        self.base: dict[int, float] = {}
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _role(self, process: Any) -> str:
        try:
            name = process.name()
            line = " ".join(process.cmdline())
        except Exception:  # gone already
            return "other"
        if name == "java":
            return "jvm"
        if "pyspark.daemon" in line:
            return "workers"
        module = re.search(r"-m (\S+)", line)
        if not name.startswith("python") or module is None:
            return "other"  # the JVM's chmod and readlink
        return "planner" if module.group(1).endswith("python_streaming_source_runner") else module.group(1)

    def sample(self) -> None:
        import psutil

        with self.lock:
            for child in self.me.children(recursive=True):
                if child.pid not in self.procs:
                    self.procs[child.pid] = child
                    self.roles[child.pid] = self._role(child)
            for pid, process in self.procs.items():
                try:
                    times = process.cpu_times()
                except psutil.Error:
                    continue
                self.seen[pid] = times.user + times.system

    def _run(self) -> None:
        while not self.done.wait(0.25):
            self.sample()

    def start(self) -> None:
        self.sample()
        self.base = dict(self.seen)
        self.thread.start()

    def finish(self) -> dict[str, float]:
        self.done.set()
        self.thread.join()
        self.sample()
        out: Counter[str] = Counter()
        for pid, seconds in self.seen.items():
            out[self.roles[pid]] += seconds - self.base.get(pid, 0.0)
        return dict(out)


def spark_session(master: int) -> Any:
    from pyspark.sql import SparkSession

    import kcl_mp.spark

    spark = SparkSession.builder.appName(f"kclmp_kinesis bench local[{master}]").getOrCreate()
    kcl_mp.spark.register(spark)
    return spark


def job_throughput(spec: dict[str, Any]) -> dict[str, Any]:
    spark = spark_session(spec["master"])
    work = Path(spec["work"])
    opts = options(spec["url"], work / "meta", shardsPerTask=spec["shards_per_task"])
    warm = spark.read.format("kclmp_kinesis").options(**opts).load().count()  # starts the Python workers
    code = spark.sparkContext.parallelize([0], 1).map(lambda _: __import__("kcl_mp").__file__).collect()[0]
    cpu = TreeCpu()
    cpu.start()
    began = time.monotonic()
    query = (spark.readStream.format("kclmp_kinesis").options(**opts).load().writeStream.format("noop")
             .option("checkpointLocation", str(work / "checkpoint")).start())
    expected = spec["records"]
    deadline = began + spec["timeout_s"]
    rows = 0
    while rows < expected and time.monotonic() < deadline and query.isActive:
        time.sleep(0.2)
        rows = sum(p["numInputRows"] for p in query.recentProgress)
    took = time.monotonic() - began
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    query.stop()
    used = cpu.finish()
    spark.stop()
    return {"warm_rows": warm, "code": code, "rows": rows, "wall_s": took, "cpu": used,
            "batches": [{"rows": p["numInputRows"], "ms": p["durationMs"]} for p in progress]}


def job_latency(spec: dict[str, Any]) -> dict[str, Any]:
    spark = spark_session(2)
    work = Path(spec["work"])
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    query = (spark.readStream.format("kclmp_kinesis").options(**options(spec["url"], work / "meta")).load()
             .writeStream.format("parquet").option("path", str(work / "table"))
             .option("checkpointLocation", str(work / "checkpoint"))
             .trigger(processingTime=f"{spec['trigger_s']} seconds").start())
    deadline = time.monotonic() + 120
    while not query.recentProgress and query.status["message"] != "Waiting for data to arrive" and \
            time.monotonic() < deadline:
        time.sleep(0.2)
    print("ready", flush=True)
    stopping.wait()
    progress = list(query.recentProgress)
    query.stop()
    spark.stop()
    return {"batches": [{"rows": p["numInputRows"], "ms": p["durationMs"]} for p in progress if p["numInputRows"]]}


def run_job(kind: str, master: int, spec: dict[str, Any], log: Path) -> subprocess.Popen:
    env = job_env()
    env["PYSPARK_SUBMIT_ARGS"] = env["PYSPARK_SUBMIT_ARGS"].replace("local[2]", f"local[{master}]")
    return subprocess.Popen([sys.executable, __file__, "_job", kind, json.dumps({**spec, "master": master})],
                            env={**env, **EMBEDDED_ENV, "PYTHONPATH": os.pathsep.join(
                                p for p in (str(Path(__file__).resolve().parents[1]),
                                            os.environ.get("PYTHONPATH")) if p)},
                            stdout=subprocess.PIPE, stderr=open(log, "wb"), text=True, start_new_session=True)


def answer(process: subprocess.Popen, log: Path) -> dict[str, Any]:
    out, _ = process.communicate(timeout=600)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if process.returncode != 0 or not lines:
        raise RuntimeError(f"the Spark job exited with {process.returncode}; see {log}")
    return dict(json.loads(lines[-1]))


# -- throughput ------------------------------------------------------------------------------------


def throughput(args: argparse.Namespace, work: Path) -> None:
    page = page_records(args.record_bytes, 0)
    records = args.shards * args.records_per_shard
    print(f"throughput: {args.shards} shards x {args.records_per_shard:,} records of {args.record_bytes} B "
          f"({records:,} records), pages of {page:,}, shardsPerTask {args.shards_per_task}, Spark's noop sink")
    for master in (int(m) for m in args.masters.split(",")):
        port = free_port()
        log = work / f"fast-{master}.log"
        source = start_fast_kinesis(port, STREAM, args.shards, log, record_bytes=args.record_bytes,
                                    page_records=page, records_per_shard=args.records_per_shard)
        try:
            job_log = work / f"job-{master}.log"
            print(f"  local[{master}]: starting ({load()})", flush=True)
            got = answer(run_job("throughput", master, {
                "url": URL.format(port), "work": str(work / f"tp-{master}"), "records": records,
                "shards_per_task": args.shards_per_task, "timeout_s": 300}, job_log), job_log)
        finally:
            stop(source)
        cpu = got["cpu"]
        batch_ms = sum(b["ms"]["triggerExecution"] for b in got["batches"])
        add_ms = sum(b["ms"].get("addBatch", 0) for b in got["batches"])
        rate = got["rows"] / (batch_ms / 1000) if batch_ms else 0.0
        workers = cpu.get("workers", 0.0)
        others = {k: v for k, v in cpu.items() if k not in ("jvm", "workers") and v >= 0.005}
        print(f"  local[{master}]: {got['rows']:,}/{records:,} rows in {len(got['batches'])} batch(es) of "
              f"{batch_ms / 1000:.2f} s (addBatch {add_ms / 1000:.2f} s; {got['wall_s']:.1f} s from the query's start)")
        print(f"    {rate:,.0f} records/s, {rate / master:,.0f} per executor core (bar >= 50,000): "
              f"{'meets' if rate / master >= 50_000 else 'BELOW'}")
        print(f"    CPU s: Python workers {workers:.2f} ({got['rows'] / workers if workers else 0:,.0f} records per "
              f"CPU s), JVM {cpu.get('jvm', 0.0):.2f}, "
              + ", ".join(f"{k} {v:.2f}" for k, v in sorted(others.items()))
              + f"; fast_kinesis {source_cpu(log) or float('nan'):.2f} (its life); "
              f"warm-up read {got['warm_rows']} rows; {load()}", flush=True)
        print(f"    the workers' kcl_mp: {got['code']}")


# -- profile ---------------------------------------------------------------------------------------


def profile(args: argparse.Namespace, work: Path) -> None:
    from kcl_mp.spark.kinesis_options import Options
    from kcl_mp.spark.kinesis_read import ReadLimits, ShardTake, read_take
    from kcl_mp.spark.kinesis_rows import rows
    from kcl_mp.spark.kinesis_source import FULL_RANGE, KinesisStreamReader, TaskRead

    os.environ.update(EMBEDDED_ENV)
    page = page_records(args.record_bytes, 0)
    port = free_port()
    log = work / "fast-profile.log"
    source = start_fast_kinesis(port, STREAM, args.shards, log, record_bytes=args.record_bytes,
                                page_records=page, records_per_shard=args.records_per_shard)
    try:
        reader = KinesisStreamReader(Options.parse(options(URL.format(port), work / "profile-meta")))
        kinesis, storage = reader.planner.kinesis, reader.planner._storage()

        def takes(epoch: int) -> list[ShardTake]:
            return [ShardTake(STREAM, f"shardId-{i:012d}", FULL_RANGE, {"at": "TRIM_HORIZON"}, epoch)
                    for i in range(args.shards)]

        kinesis.list_shards(StreamName=STREAM)  # the client's first call and the imports rows() makes, unmeasured
        list(rows(takes(1)[0], [{"SequenceNumber": "1", "Data": "YQ==", "PartitionKey": "k",
                                 "ApproximateArrivalTimestamp": 1.0}]))
        began, cpu = time.monotonic(), time.process_time()
        count = sum(batch.num_rows for batch in reader.read(TaskRead(tuple(takes(1)))))
        wall, cpu = time.monotonic() - began, time.process_time() - cpu
        print(f"profile: {args.shards} shards x {args.records_per_shard:,} records of {args.record_bytes} B as one "
              f"task reads them (the stream reader's read()): {count:,} rows in {wall:.2f} s "
              f"({count / wall:,.0f} records/s), CPU {cpu:.2f} s ({count / cpu:,.0f} records per CPU s); {load()}")
        profiler = cProfile.Profile()
        count = 0
        began, cpu = time.monotonic(), time.process_time()
        profiler.enable()
        for take in takes(2):
            for batch in read_take(kinesis, storage, take, ReadLimits()):
                count += batch.num_rows
        profiler.disable()
        wall, cpu = time.monotonic() - began, time.process_time() - cpu
    finally:
        stop(source)
    stats = pstats.Stats(profiler)
    slept = sum(v[3] for k, v in stats.stats.items() if k[2] == "<built-in method time.sleep>")  # type: ignore[attr-defined]
    print(f"  under cProfile, read_take shard after shard: {count:,} rows in {wall:.2f} s, CPU {cpu:.2f} s, "
          f"asleep between GetRecords {slept:.2f} s; fast_kinesis {source_cpu(log) or float('nan'):.2f} CPU s "
          f"(both reads); {load()}")
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(args.top)
    print("\n".join(line for line in text.getvalue().splitlines() if line.strip())[:6000])


# -- latency ---------------------------------------------------------------------------------------


PRODUCERS = 2  # moto takes ~0.2 ms a record on one connection: one producer keeps up with ~800 a second here


def produce(args: argparse.Namespace, url: str) -> tuple[dict[int, float], list[float], float]:
    """``--rate`` records a second for ``--seconds``: every 1/10 s, a PutRecords per producer,
    each producer a thread with its own client and its own shards (moto's put is not safe for
    concurrency on one shard), records spread evenly over the shards (ExplicitHashKey). Each
    record holds its id and the time its PutRecords was due (the tick's: a producer that
    falls behind counts against the latency). Returns each id's put time, each PutRecords'
    duration, and when the last one returned."""
    import boto3
    import orjson

    kinesis = boto3.client("kinesis", endpoint_url=url)
    starts = sorted(int(s["HashKeyRange"]["StartingHashKey"]) for s in kinesis.list_shards(StreamName=STREAM)["Shards"])
    pools = [ThreadPoolExecutor(1) for _ in range(PRODUCERS)]
    clients = [boto3.client("kinesis", endpoint_url=url) for _ in range(PRODUCERS)]
    put_at: dict[int, float] = {}
    put_s: list[float] = []

    def put(producer: int, records: list[dict[str, Any]]) -> None:
        called = time.monotonic()
        failed = clients[producer].put_records(StreamName=STREAM, Records=records)["FailedRecordCount"]
        put_s.append(time.monotonic() - called)
        assert failed == 0, "moto refused records"

    began = time.time()
    n = 0
    futures = []
    for tick in range(int(args.seconds * 10)):
        time.sleep(max(0.0, began + tick / 10 - time.time()))
        count = int(args.rate * (tick + 1) / 10) - n
        due = began + tick / 10
        share: list[list[dict[str, Any]]] = [[] for _ in range(PRODUCERS)]
        for i in range(n, n + count):
            shard = i % len(starts)
            share[shard % PRODUCERS].append({"Data": orjson.dumps({"id": i, "put": due}), "PartitionKey": str(i),
                                             "ExplicitHashKey": str(starts[shard] + i // len(starts))})
            put_at[i] = due
        futures += [pools[j].submit(put, j, records) for j, records in enumerate(share) if records]
        n += count
    for future in futures:
        future.result()
    for pool in pools:
        pool.shutdown()
    return put_at, put_s, time.time()


def latency(args: argparse.Namespace, work: Path) -> None:
    import boto3
    import orjson
    import pyarrow.parquet as pq
    from spark_landing import committed_at

    from kcl_mp.embedded import ensure_stream, start_emulator

    os.environ.update(EMBEDDED_ENV)
    emulator = start_emulator(log_path=str(work / "moto.log"))
    job = None
    try:
        kinesis = boto3.client("kinesis", endpoint_url=emulator.url)
        ensure_stream(kinesis, STREAM, args.shards)
        job_log = work / "job-latency.log"
        job = run_job("latency", 2, {"url": emulator.url, "work": str(work / "lat"), "trigger_s": args.trigger_s},
                      job_log)
        assert job.stdout is not None
        if job.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the Spark job did not start; see {job_log}")
        put_at, put_s, done = produce(args, emulator.url)
        produced_s = done - put_at[0]
        visible: dict[int, float] = {}
        table = work / "lat" / "table"
        read: set[str] = set()
        deadline = time.monotonic() + 60
        while len(visible) < len(put_at) and time.monotonic() < deadline:
            for path, stamp in committed_at(table).items():
                if path not in read:
                    read.add(path)
                    for data in pq.read_table(path, columns=["data"]).column("data").to_pylist():
                        visible.setdefault(orjson.loads(data)["id"], stamp)
            time.sleep(1)
        job.send_signal(signal.SIGTERM)
        got = answer(job, job_log)
    finally:
        if job is not None and job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(30)
        emulator.stop()
    delays = [visible[i] - put_at[i] for i in visible if i in put_at]
    p50, p99 = percentile(delays, 50), percentile(delays, 99)
    batch_s = sorted(b["ms"]["triggerExecution"] / 1000 for b in got["batches"])
    print(f"latency: moto, {args.shards} shards, {len(put_at):,} records put over {produced_s:.1f} s "
          f"({len(put_at) / produced_s:,.0f}/s; PutRecords p50 {(percentile(put_s, 50) or 0) * 1000:.0f} ms, "
          f"max {max(put_s, default=0) * 1000:.0f} ms), trigger {args.trigger_s} s, Parquet file sink, local[2]; "
          f"{load()}")
    print(f"  {len(delays):,}/{len(put_at):,} visible; put-to-visible p50 {p50 or float('nan'):.2f} s (bar <= 3), "
          f"p99 {p99 or float('nan'):.2f} s (bar <= 8), max {max(delays, default=float('nan')):.2f} s; "
          f"{len(batch_s)} batches with rows, batch time p50 {percentile(batch_s, 50) or 0:.2f} s, "
          f"max {max(batch_s, default=0):.2f} s")


# -- planning --------------------------------------------------------------------------------------


def files(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()} \
        if root.exists() else {}


def planning(args: argparse.Namespace, work: Path) -> None:
    from kcl_mp.spark import kinesis_source
    from kcl_mp.spark.kinesis_options import Options
    from kcl_mp.spark.kinesis_source import KinesisStreamReader

    os.environ.update(EMBEDDED_ENV)
    if args.probe_threads:
        kinesis_source.PROBE_THREADS = args.probe_threads  # read when the planner makes its pool
    port = free_port()
    log = work / "fast-planning.log"
    source = start_fast_kinesis(port, STREAM, args.shards, log, records_per_shard=10, delay_ms=args.delay_ms)
    meta = work / "planning-meta"
    print(f"planning: {args.shards} shards of 10 records each, every answer held {args.delay_ms:g} ms, "
          f"{kinesis_source.PROBE_THREADS} probe threads; {load()}")
    try:
        reader = KinesisStreamReader(Options.parse(options(URL.format(port), meta)))
        calls: Counter[str] = Counter()
        reader.planner.kinesis.meta.events.register("before-call.kinesis.*",
                                                    lambda model, **_: calls.update([model.name]))
        storage = reader.planner._storage()
        reads = Counter[str]()
        for name in ("read_if_there", "create_bytes", "commit_bytes", "remove"):
            method = getattr(storage, name)
            setattr(storage, name, lambda *a, _m=method, _n=name, **k: (reads.update([_n]), _m(*a, **k))[1])

        probes: dict[str, list[float]] = {}  # shard -> when each of its probes started

        def timed(what: str, call: Any) -> Any:
            calls.clear()
            reads.clear()
            before, probed = files(meta), dict(reader.planner.probed)
            began, cpu = time.monotonic(), time.process_time()
            out = call()
            took, cpu = time.monotonic() - began, time.process_time() - cpu
            after = files(meta)
            written = sum(1 for k, v in after.items() if before.get(k) != v)
            per_shard = sum(calls.values()) / args.shards
            now_probed = [k for k, at in reader.planner.probed.items() if probed.get(k) != at]
            for key in now_probed:
                probes.setdefault(key, []).append(reader.planner.probed[key])
            print(f"  {what}: {took:.2f} s ({cpu:.2f} s of the planner's CPU); Kinesis calls "
                  f"{dict(sorted(calls.items()))} = {per_shard:.3f} per shard; {len(now_probed)} shards probed; "
                  f"manifest reads {reads['read_if_there']}, files written {written}; {load()}", flush=True)
            return out, took, per_shard, written

        first, *_ = timed("initialOffset", reader.initialOffset)
        end, *_ = timed("latestOffset, the backlog (every shard moves)", lambda: reader.latestOffset(first, None))
        parts = reader.partitions(first, end)
        calls.clear()
        began = time.monotonic()
        with ThreadPoolExecutor(64) as pool:
            rows = sum(pool.map(lambda p: sum(b.num_rows for b in reader.read(p)), parts))
        print(f"  the batch's read ({len(parts)} partitions, 64 at a time): {rows:,} rows in "
              f"{time.monotonic() - began:.2f} s, {sum(calls.values()):,} Kinesis calls, "
              f"{len(files(meta)):,} manifests")
        idle, *_ = timed("latestOffset after the batch (reads its manifests)", lambda: reader.latestOffset(end, None))
        assert idle == end, "an idle trigger moved"
        figures = []
        probes.clear()
        idle_from = time.monotonic()
        for n in range(args.triggers):
            again, took, per_shard, written = timed(f"latestOffset, idle trigger {n + 1}",
                                                    lambda: reader.latestOffset(end, None))
            assert again == end, "an idle trigger moved"
            figures.append((took, per_shard, written))
        if figures:
            worst = max(f[0] for f in figures)
            print(f"  idle triggers: at most {worst:.2f} s (bar <= 1.5), {max(f[1] for f in figures):.3f} Kinesis "
                  f"calls per idle shard (bar <= 2), {max(f[2] for f in figures)} manifest writes (bar 0)")
            gaps = [b - a for times in probes.values() for a, b in zip([idle_from, *times], times)]
            unprobed = args.shards - len(probes)
            print(f"  the longest an idle shard went between probes: {max(gaps, default=0):.2f} s over "
                  f"{time.monotonic() - idle_from:.1f} s of idle triggers ({unprobed} shards never probed in them)")
    finally:
        stop(source)
    print(f"  fast_kinesis: {(log.read_text().strip().splitlines() or ['(no line)'])[-1]}")


def main() -> int:
    if sys.argv[1:2] == ["_job"]:
        kind, spec = sys.argv[2], json.loads(sys.argv[3])
        print(json.dumps(job_throughput(spec) if kind == "throughput" else job_latency(spec)), flush=True)
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    for name in ("throughput", "profile", "all"):
        one = sub.add_parser(name)
        one.add_argument("--shards", type=int, default=16 if name != "profile" else 4)
        one.add_argument("--records-per-shard", type=int, default=33_600)
        one.add_argument("--record-bytes", type=int, default=1024)
        one.add_argument("--masters", default="1,2", help="Spark local[N] for each N")
        one.add_argument("--shards-per-task", type=int, default=4)
        one.add_argument("--top", type=int, default=20, help="functions of the profile shown")
        if name == "all":
            one.add_argument("--latency-shards", type=int, default=8)
            one.add_argument("--planning-shards", type=int, default=1000)
    lat = sub.add_parser("latency")
    lat.add_argument("--shards", type=int, default=8)
    for one in (lat, sub.choices["all"]):
        one.add_argument("--rate", type=float, default=1000)
        one.add_argument("--seconds", type=float, default=60)
        one.add_argument("--trigger-s", type=float, default=1)
    plan = sub.add_parser("planning")
    plan.add_argument("--shards", type=int, default=1000)
    for one in (plan, sub.choices["all"]):
        one.add_argument("--delay-ms", type=float, default=20)
        one.add_argument("--triggers", type=int, default=3)
        one.add_argument("--probe-threads", type=int, default=0, help="the planner's threads (default: the source's)")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kclmp-spark-kinesis-"))
    if args.what == "all":
        throughput(args, work)
        profile(argparse.Namespace(**{**vars(args), "shards": 4}), work)
        latency(argparse.Namespace(**{**vars(args), "shards": args.latency_shards}), work)
        planning(argparse.Namespace(**{**vars(args), "shards": args.planning_shards}), work)
    else:
        {"throughput": throughput, "profile": profile, "latency": latency, "planning": planning}[args.what](args, work)
    print(f"work dir: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

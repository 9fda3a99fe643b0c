"""The ``kclmp_kinesis`` source's acceptance (issue 34, D2 and D3) on kinesis-mock, which splits
and merges for real, through ``python -m kcl_mp.spark.job --stream``.

D2, exactly once: 100,000 unique ids (40,000 in `make test`, below) on 8 shards, a tenth of the puts KPL aggregates, some of
which hold a user record of another shard (the KPL with a stale shard map; the producer puts
that record again alone, as the KPL's retrier does, and a reader drops the aggregated copy),
are read by one job into the Parquet file sink and a Delta table (delta-rs in foreachBatch)
while they are put. Meanwhile: the driver's process group is SIGKILLed 5 times (3) at random
points, each run's first read of a partition of some epochs raises after emitting rows (3
times; Spark retries the task), one task is slowed while a twin reads the same partition at
once (what a speculative copy does; ``spark.speculation`` is on, but Spark launches no copy in
local mode, see tests/support/spark_kinesis_faults.py), one shard is split and two merged while
the job runs and another split while it is stopped. Each table must hold every id once, the
children's rows must come in batches after their parents' last, no DynamoDB request may leave
the job (its DynamoDB endpoint is a loopback listener that counts), and a restart with nothing
new must write nothing.

D3, AvailableNow (Spark >= 4.2): with maxRecordsPerTrigger 10,000 a 100,000-record backlog (4,000
and 40,000 in `make test`) is read in at least 10 batches and the run stops holding exactly what arrived before it started,
while a producer keeps putting; a later run takes the rest, and one with nothing new is a no-op.

Why a tenth of the puts carry 50 user records each (85 % of the ids come aggregated):
kinesis-mock's PutRecords costs grow with the records a stream holds (it hashes each shard's
records on every put): 100,000 plain records took it 275 s of CPU here, 100,000 ids in 17,500
records 30 s.

Scale: `make test` runs both at 40,000 ids and D2 with 3 kills, which still make every fault
above happen (the split and the merge while running, the split while stopped, the injected
failures, the twin); ``KCLMP_TEST_SCALE=acceptance`` runs issue 34's figures (100,000 ids, 5
kills: about twice the CPU, which CI's 2 cores cannot spare).
"""

from __future__ import annotations

import json
import os
import random
import re
import time
from collections import Counter
from pathlib import Path
from urllib.parse import unquote, urlparse

import boto3
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from pytest_check import check

from kcl_mp.devtools.producer import Put, produce
from kcl_mp.spark.source import NATIVE_AVAILABLE_NOW

from ..support.harness import ROOT, BackgroundProducer, wait_until
from ..support.kinesis_mock import create_streams, split_in_half
from ..support.loopback_http import LoopbackServer
from ..support.spark_kinesis_faults import FAULTS, RUN, Plan
from ..support.spark_support import SPARK_ENV, Job, committed_batches, offsets

pytestmark = [pytest.mark.integration, pytest.mark.spark]

SCALES = {"ci": (40_000, 3), "acceptance": (100_000, 5)}  # ids, kills
SCALE = os.environ.get("KCLMP_TEST_SCALE", "ci")
if SCALE not in SCALES:
    raise ValueError(f"KCLMP_TEST_SCALE={SCALE!r}: one of {', '.join(SCALES)}")
SHARDS = 8
IDS, KILLS = SCALES[SCALE]
CAP = IDS // 10  # D3's maxRecordsPerTrigger: at least 10 batches
CHUNK = 2_000  # ids a producer round puts
AGGREGATED = 0.1  # of the puts
PER_AGGREGATE = 50
MISPLACED = 0.2  # of the aggregates: one user record of another shard
FAULT_PLAN = Plan(fail_from=(1, 2, 3), slow_from=2, slow_s=3.0)  # epochs: a run has 5 or more
FAULTS_WRAPPER = "tests.support.spark_kinesis_faults"


class CountingEndpoint:
    """A loopback HTTP endpoint that counts the requests it gets and refuses each as DynamoDB
    would an unknown client: the job's ``AWS_ENDPOINT_URL_DYNAMODB``."""

    def __init__(self) -> None:
        self.requests: list[str] = []

        def relay(handler) -> None:
            handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
            self.requests.append(handler.headers.get("X-Amz-Target") or handler.path)
            body = b'{"__type":"UnrecognizedClientException","message":"counted, refused"}'
            handler.send_response(400)
            handler.send_header("Content-Type", "application/x-amz-json-1.0")
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)

        self.server = LoopbackServer(relay, get=True)
        self.url = self.server.url

    def close(self) -> None:
        self.server.close()


def submit_args(*confs: str) -> str:
    """The tests' PYSPARK_SUBMIT_ARGS with a task tried up to 4 times (``local[2,4]``: plain
    ``local[2]`` fails the job at a task's first failure) and ``confs``."""
    base = SPARK_ENV["PYSPARK_SUBMIT_ARGS"]
    assert "--master local[2] " in base and base.endswith(" pyspark-shell"), base
    extra = " ".join(f"--conf {conf}" for conf in confs)
    return base.replace("--master local[2] ", "--master local[2,4] ").removesuffix(" pyspark-shell") + \
        f" {extra} pyspark-shell"


def job_env(dynamodb: CountingEndpoint, faults: Path | None, *confs: str) -> dict[str, str]:
    env = {"PYSPARK_SUBMIT_ARGS": submit_args(*confs), "AWS_ENDPOINT_URL_DYNAMODB": dynamodb.url,
           # Spark's Python workers import the faulty source by name
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    if faults is not None:
        env[FAULTS] = str(faults)
    return env


def sink_log(table: Path) -> dict[int, list[dict]]:
    """The Parquet file sink's log (``_spark_metadata``): each committed batch's entries (a
    compacted batch's hold every earlier batch's too). A killed batch's files are not in it."""
    found: dict[int, list[dict]] = {}
    folder = table / "_spark_metadata"
    if not folder.exists():
        return found
    for path in folder.iterdir():
        name = path.name.removesuffix(".compact")
        if name.isdigit():
            found[int(name)] = [json.loads(line) for line in path.read_text().splitlines()[1:] if line.strip()]
    return found


def sink_rows(table: Path) -> list[dict]:
    """Every row of the file sink's committed files (``data``'s id, shard, sequence numbers)."""
    paths = {unquote(urlparse(entry["path"]).path) for entries in sink_log(table).values()
             for entry in entries if entry["action"] == "add"}
    rows = []
    for path in sorted(paths):
        table_ = pq.read_table(path, columns=["data", "shardId", "sequenceNumber", "subSequenceNumber"])
        rows += [{"id": json.loads(d)["id"], "shard": s, "seq": q, "sub": n} for d, s, q, n in zip(
            *(table_.column(c).to_pylist() for c in ("data", "shardId", "sequenceNumber", "subSequenceNumber")))]
    return rows


def delta_ids(table: Path) -> list[int]:
    if not (table / "_delta_log").exists():
        return []
    return [json.loads(d)["id"] for d in DeltaTable(str(table)).to_pyarrow_table(columns=["data"]).column("data").to_pylist()]


def delta_version(table: Path) -> int | None:
    return DeltaTable(str(table)).version() if (table / "_delta_log").exists() else None


def planned(checkpoint: Path) -> set[int]:
    folder = checkpoint / "offsets"
    return {int(p.name) for p in folder.iterdir() if p.name.isdigit()} if folder.exists() else set()


def progress(checkpoint: Path) -> int:
    """Batches planned and committed so far: grows with each step a running query takes."""
    return len(planned(checkpoint)) + len(committed_batches(checkpoint))


def at_rest(checkpoint: Path) -> bool:
    return bool(planned(checkpoint)) and planned(checkpoint) == committed_batches(checkpoint)


def exactly_once(name: str, ids: list[int], expected: set[int]) -> None:
    counts = Counter(ids)
    with check:
        assert set(counts) == expected, \
            f"{name}: missing {sorted(expected - set(counts))[:10]}, extra {sorted(set(counts) - expected)[:10]}"
    with check:
        assert len(ids) == len(counts), f"{name}: twice {[i for i, n in counts.items() if n > 1][:10]}"


def job_said(log: Path) -> dict[str, tuple[int, int]]:
    """What each query of a finished job read: ``{query: (micro-batches, rows)}``."""
    return {q: (int(b), int(r)) for q, b, r in
            re.findall(r"^(\w+): (\d+) micro-batches, (\d+) rows$", log.read_text(errors="replace"), re.M)}


def lineage(log: dict[int, dict], shards: list[dict], stream: str) -> list[str]:
    """Children read before a parent's last batch: for each child, its first batch against its
    parents' last (the offsets' ``active``)."""
    read: dict[str, list[int]] = {}
    for batch, end in log.items():
        for key in end.get("active", []):
            read.setdefault(key, []).append(batch)
    wrong = []
    for shard in shards:
        child = f"{stream}/{shard['ShardId']}"
        parents = [f"{stream}/{p}" for p in (shard.get("ParentShardId"), shard.get("AdjacentParentShardId")) if p]
        if child in read:
            for parent in parents:
                if parent in read and min(read[child]) <= max(read[parent]):
                    wrong.append(f"{child} first read in batch {min(read[child])}, {parent} last in {max(read[parent])}")
    return wrong


def delete_stream(kinesis, stream: str) -> None:
    """kinesis-mock's puts cost more with every record it holds, in any stream: drop what a test put."""
    try:
        kinesis.delete_stream(StreamName=stream, EnforceConsumerDeletion=True)
    except Exception:  # noqa: BLE001 (the emulator may be gone already)
        pass


@pytest.mark.heavy
@pytest.mark.timeout(900)  # seven JVM starts; a loaded 2-core box took 20-30 s for each
def test_every_id_once_through_kills_task_failures_a_twin_and_reshards(kinesis_mock_url, unique_name, tmp_path):
    began = time.monotonic()
    seed = int(os.environ.get("KCLMP_TEST_SEED") or random.randrange(1_000_000))
    rng = random.Random(seed)
    kinesis = boto3.client("kinesis", endpoint_url=kinesis_mock_url, region_name="us-east-1")
    stream = unique_name
    create_streams(kinesis, {stream: SHARDS})
    faults = tmp_path / "faults"
    FAULT_PLAN.write(faults)
    dynamodb = CountingEndpoint()
    tables, delta, checkpoints = tmp_path / "table", tmp_path / "delta", tmp_path / "checkpoints"
    args = ["--stream", stream, "--endpoint-url", kinesis_mock_url, "--region", "us-east-1",
            "--initial-position", "trim_horizon", "--metadata", str(tmp_path / "metadata"),
            "--output", f"parquet={tables}", "--output", f"delta={delta}", "--checkpoint", str(checkpoints),
            "--source-option", "maxFetchDuration=2s",
            # a Python worker that misses Spark's fixed 10 s to connect back on a loaded box fails
            # the query: the job starts it again from its checkpoint
            "--restarts", "12", "--restart-pause", "2"]
    env = job_env(dynamodb, faults, "spark.speculation=true", "spark.speculation.interval=200ms",
                  "spark.speculation.multiplier=1.5", "spark.speculation.quantile=0.5",
                  "spark.speculation.minTaskRuntime=1s")
    rounds = IDS // CHUNK
    released = [0]  # the rounds the producer may put by now: a share more as each run starts

    def put(n: int) -> list[Put]:
        """Round ``n`` once released (every run of the job gets records put while it runs)."""
        for _ in range(6000):  # bounded: 10 minutes
            if n < released[0] or producer.stop.is_set():
                break
            time.sleep(0.1)
        if n >= min(released[0], rounds):
            return []
        return produce(kinesis, stream, CHUNK, first_id=n * CHUNK, seed=n, aggregated_share=AGGREGATED,
                       per_aggregate=PER_AGGREGATE, misplaced_share=MISPLACED)

    producer = BackgroundProducer(put, 0.5)
    checkpoint = checkpoints / "parquet"  # the kills are timed on the Parquet query
    jobs: list[Job] = []
    kills: list[str] = []

    def start() -> Job:
        released[0] = rounds * (len(jobs) + 1) // (KILLS + 1)
        jobs.append(Job(tmp_path / f"job-{len(jobs)}.log", *args, "--processing-time", "1 second",
                        env={**env, RUN: str(len(jobs))}, module=FAULTS_WRAPPER))
        return jobs[-1]

    def running(job: Job, since: int) -> bool:
        assert job.process.poll() is None, job.log.read_text(errors="replace")[-4000:]
        return progress(checkpoint) > since

    resharded: dict[str, list[str]] = {}
    try:
        producer.start()
        for n in range(KILLS):
            since = progress(checkpoint)
            job = start()
            wait_until(lambda job=job, since=since: running(job, since), 240, f"run {n} to plan or commit a batch", 0.1)
            open_shards = [s for s in kinesis.list_shards(StreamName=stream)["Shards"]
                           if "EndingSequenceNumber" not in s["SequenceNumberRange"]]
            if n == 0:  # a split while the job runs
                split_in_half(kinesis, stream, open_shards[0])
                resharded["split while running"] = [open_shards[0]["ShardId"]]
            elif n == 1:  # a merge while it runs: the two last shards, adjacent in the hash key space
                low, high = sorted(open_shards, key=lambda s: int(s["HashKeyRange"]["StartingHashKey"]))[-2:]
                kinesis.merge_shards(StreamName=stream, ShardToMerge=low["ShardId"],
                                     AdjacentShardToMerge=high["ShardId"])
                wait_until(lambda: kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]
                           ["StreamStatus"] == "ACTIVE", 60, "the merge")
                resharded["merge while running"] = [low["ShardId"], high["ShardId"]]
            time.sleep(rng.uniform(0.0, 3.0))
            in_flight = sorted(planned(checkpoint) - committed_batches(checkpoint))
            job.kill()
            kills.append(f"{time.monotonic() - began:.0f}s: batch {in_flight} in flight" if in_flight
                         else f"{time.monotonic() - began:.0f}s: between batches")
            if n == 2:  # a split while the job is stopped
                shard = [s for s in kinesis.list_shards(StreamName=stream)["Shards"]
                         if "EndingSequenceNumber" not in s["SequenceNumberRange"]][2]
                split_in_half(kinesis, stream, shard)
                resharded["split while stopped"] = [shard["ShardId"]]
        kill_phase_s = time.monotonic() - began
        last = start()
        wait_until(lambda: producer.rounds >= rounds or bool(producer.errors), 300, "the producer's last round", 0.5)
        producer.finish()
        produced_s = time.monotonic() - began
        puts: list[Put] = producer.puts
        expected = {put.id for put in puts if not put.dropped}
        assert expected == set(range(IDS))

        def caught_up() -> bool:
            assert last.process.poll() is None, last.log.read_text(errors="replace")[-4000:]
            return (all(at_rest(checkpoints / fmt) for fmt in ("parquet", "delta"))  # cheap checks first
                    and set(delta_ids(delta)) >= expected and {r["id"] for r in sink_rows(tables)} >= expected)

        wait_until(caught_up, 300, "both tables to hold every id, each query at rest", 2.0)
        caught_up_s = time.monotonic() - began
        last.kill()  # at rest: nothing in flight (not one of the kills at random points)
    finally:
        producer.stop.set()
        for job in jobs:
            job.kill()
        dynamodb.close()

    # what the restart must leave as it is
    before = {"delta version": delta_version(delta), "sink batches": sorted(sink_log(tables)),
              "batches": {fmt: sorted(planned(checkpoints / fmt)) for fmt in ("parquet", "delta")}}
    restart_began = time.monotonic()
    restart = Job(tmp_path / "job-restart.log", *args, "--available-now", env={**env, RUN: "restart"},
                  module=FAULTS_WRAPPER)
    try:
        restart.wait(300)
    finally:
        restart.kill()
    restart_s = time.monotonic() - restart_began
    after = {"delta version": delta_version(delta), "sink batches": sorted(sink_log(tables)),
             "batches": {fmt: sorted(planned(checkpoints / fmt)) for fmt in ("parquet", "delta")}}
    shards = kinesis.list_shards(StreamName=stream)["Shards"]
    delete_stream(kinesis, stream)

    rows = sink_rows(tables)
    exactly_once("parquet", [r["id"] for r in rows], expected)
    exactly_once("delta", delta_ids(delta), expected)
    with check:
        assert after == before, "a restart with nothing new wrote something"
    with check:
        assert {q: rows for q, (_, rows) in job_said(restart.log).items()} == \
            {"kclmp_kinesis_parquet": 0, "kclmp_kinesis_delta": 0}, restart.log.read_text(errors="replace")[-2000:]
    with check:
        assert dynamodb.requests == [], f"DynamoDB calls: {Counter(dynamodb.requests)}"

    # the reshards happened, and each child was read only after its parents' last batch
    closed = [s["ShardId"] for s in shards if "EndingSequenceNumber" in s["SequenceNumberRange"]]
    children = {s["ShardId"] for s in shards if s.get("ParentShardId")}
    with check:
        assert len(closed) == 4 and len(children) == 5, (closed, children)
    log = offsets(checkpoint)
    with check:
        assert not lineage(log, shards, stream)
    with check:
        assert {r["shard"] for r in rows} >= children, "every child's records were read"

    # the aggregated copies the reader dropped: some on a child, outside its hash range
    dropped = [put for put in puts if put.dropped]
    with check:
        assert any(put.shard_id in children for put in dropped), "no misplaced user record on a child"

    # the injected failures: each a partition's first read, which raised after emitting rows;
    # the partition was read again (a retried task: attempt >= 1; or a replay after a kill)
    reads = [json.loads(line) for line in (faults / "reads.jsonl").read_text().splitlines()]
    failed = [r for r in reads if r["failed"] is not None]
    with check:
        assert sorted(r["failed"] for r in failed) == [0, 1, 2], failed
    with check:
        assert all(r["rows"] > 0 for r in failed), failed
    again = {(r["query"], r["partition"]): r["attempt"] for r in reads if r["failed"] is None}
    with check:
        assert all((r["query"], r["partition"]) in again for r in failed), (failed, "never read again")
    twin = json.loads((faults / "twin.json").read_text())
    with check:
        assert twin["errors"] == [] and twin["twin"] == twin["slowed"] and twin["slowed"], \
            (twin["errors"], len(twin["twin"]), len(twin["slowed"]))

    print(f"\nD2 (seed {seed}): {len(expected)} ids in {len(puts)} puts ({len(dropped)} aggregated copies dropped, "
          f"{sum(p.shard_id in children for p in dropped)} of them on a child), shards {len(shards)} "
          f"({resharded}); {len(log)} batches; kills: {kills}; injected failures in "
          f"{[(r['query'], r['partition'], r['rows']) for r in failed]}, read again at attempts "
          f"{[again.get((r['query'], r['partition'])) for r in failed]}; twin of {twin['query']} {twin['partition']}: "
          f"{len(twin['twin'])} rows, the same as the slowed read's; DynamoDB requests {len(dynamodb.requests)}; "
          f"kill phase {kill_phase_s:.0f} s, producer done at {produced_s:.0f} s, caught up at {caught_up_s:.0f} s, "
          f"no-op restart {restart_s:.0f} s; total {time.monotonic() - began:.0f} s")


@pytest.mark.heavy
@pytest.mark.skipif(not NATIVE_AVAILABLE_NOW, reason="admission control and availableNow need PySpark >= 4.2")
@pytest.mark.timeout(900)
def test_available_now_reads_the_backlog_in_capped_batches_and_stops_at_its_start(kinesis_mock_url, unique_name,
                                                                                   tmp_path):
    began = time.monotonic()
    kinesis = boto3.client("kinesis", endpoint_url=kinesis_mock_url, region_name="us-east-1")
    stream = unique_name
    create_streams(kinesis, {stream: SHARDS})
    dynamodb = CountingEndpoint()
    backlog: list[Put] = []
    for n in range(IDS // CHUNK):
        backlog += produce(kinesis, stream, CHUNK, first_id=n * CHUNK, seed=n, aggregated_share=AGGREGATED,
                           per_aggregate=PER_AGGREGATE, misplaced_share=MISPLACED)
    backlog_s = time.monotonic() - began
    table, checkpoint = tmp_path / "table", tmp_path / "checkpoint"
    args = ["--stream", stream, "--endpoint-url", kinesis_mock_url, "--region", "us-east-1",
            "--initial-position", "trim_horizon", "--metadata", str(tmp_path / "metadata"),
            "--output", f"parquet={table}", "--checkpoint", str(checkpoint), "--max-records-per-trigger", str(CAP),
            "--available-now", "--restarts", "12", "--restart-pause", "2"]
    # one log file per batch (no compaction), so each batch's rows can be counted
    env = job_env(dynamodb, None, "spark.sql.streaming.fileSink.log.compactInterval=1000")
    chunks: list[tuple[float, float, list[Put]]] = []  # (call began, call ended, puts), epoch seconds

    def put(n: int) -> list[Put]:
        called = time.time()
        done = produce(kinesis, stream, 200, first_id=1_000_000 + n * 200, seed=10_000 + n,
                       aggregated_share=AGGREGATED, per_aggregate=PER_AGGREGATE)
        chunks.append((called, time.time(), done))
        return done

    producer = BackgroundProducer(put, 0.5)
    runs: list[float] = []
    try:
        producer.start()
        wait_until(lambda: producer.rounds >= 2, 60, "the producer putting")
        ran = time.monotonic()
        first = Job(tmp_path / "run-1.log", *args, env=env)
        first.wait(400)
        runs.append(time.monotonic() - ran)
        first_batches = len(planned(checkpoint))
        producer.finish()
        ran = time.monotonic()
        Job(tmp_path / "run-2.log", *args, env=env).wait(400)
        runs.append(time.monotonic() - ran)
        before = (sorted(planned(checkpoint)), sorted(sink_log(table)))
        ran = time.monotonic()
        Job(tmp_path / "run-3.log", *args, env=env).wait(400)
        runs.append(time.monotonic() - ran)
        after = (sorted(planned(checkpoint)), sorted(sink_log(table)))
    finally:
        producer.stop.set()
        dynamodb.close()
        delete_stream(kinesis, stream)

    log = offsets(checkpoint)
    until = log[first_batches - 1]["until"]  # the first run's offsets: nothing that arrived after
    assert until is not None and all(log[b]["until"] == until for b in range(first_batches)), log
    before_start = {p.id for _, ended, puts in chunks if ended * 1000 < until for p in puts}
    after_start = {p.id for called, _, puts in chunks if called * 1000 > until for p in puts}
    logged = sink_log(table)
    by_batch: dict[int, list[dict]] = {}
    for batch in range(first_batches):
        for entry in logged[batch]:
            path = unquote(urlparse(entry["path"]).path)
            by_batch.setdefault(batch, []).append({"rows": pq.read_metadata(path).num_rows, "path": path})
    first_ids = [json.loads(d)["id"] for batch in range(first_batches) for f in by_batch.get(batch, [])
                 for d in pq.read_table(f["path"], columns=["data"]).column("data").to_pylist()]
    rows_per_batch = [sum(f["rows"] for f in by_batch.get(b, [])) for b in range(first_batches)]
    backlog_ids = {p.id for p in backlog if not p.dropped}
    with check:
        assert first_batches >= 10, rows_per_batch
    with check:  # each shard's share of the cap, at whole Kinesis records
        assert max(rows_per_batch) <= CAP, rows_per_batch
    with check:
        assert len(first_ids) == len(set(first_ids)), "an id twice"
    with check:
        assert set(first_ids) >= backlog_ids | before_start, sorted(backlog_ids | before_start - set(first_ids))[:10]
    with check:
        assert not set(first_ids) & after_start, sorted(set(first_ids) & after_start)[:10]
    with check:
        assert set(first_ids) <= backlog_ids | {p.id for _, _, puts in chunks for p in puts}
    everything = backlog_ids | {p.id for _, _, puts in chunks for p in puts}
    exactly_once("after the second run", [r["id"] for r in sink_rows(table)], everything)
    with check:
        assert after == before, "the third run, with nothing new, wrote something"
    with check:
        assert {q: rows for q, (_, rows) in job_said(tmp_path / "run-3.log").items()} == {"kclmp_kinesis_parquet": 0}
    with check:
        assert dynamodb.requests == []
    print(f"\nD3: backlog of {len(backlog_ids)} ids put in {backlog_s:.0f} s; run 1: {first_batches} batches "
          f"{rows_per_batch} in {runs[0]:.0f} s, {len(first_ids)} ids, holding the {len(before_start)} put before "
          f"its start (until {until}) and none of the {len(after_start)} put after; run 2 {runs[1]:.0f} s "
          f"({job_said(tmp_path / 'run-2.log')}); run 3 (nothing new) {runs[2]:.0f} s, no batch; "
          f"total {time.monotonic() - began:.0f} s")

"""Delta Lake and Iceberg outputs (kcl_mp.spark.tables, the foreachBatch route into delta-rs
and pyiceberg), exactly once through SIGKILLs of the Spark job; and S3A on moto's S3.

The input is deterministic: Parquet files in the landed schema, each row a unique id, read
one file a batch by Spark's file source. The job (tests/integration/spark_tables_job.py)
runs as a subprocess in its own process group; it is SIGKILLed three times while a batch
is in flight (its offsets written, its commit not yet), then run to the end: every id is
in the Delta table and in the Iceberg table exactly once, read back with deltalake and
pyiceberg. Then the last batch is made a replay (its commit removed from the checkpoint,
the state a kill leaves between the table's commit and Spark's): the restart writes
nothing, no Delta version and no Iceberg snapshot.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from functools import partial
from pathlib import Path

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from pyiceberg.catalog import load_catalog

from kcl_mp.spark.tables import S3Settings, object_store_uri

from .harness import ROOT, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.spark]

JOB = ROOT / "tests" / "integration" / "spark_tables_job.py"
JARS = ROOT / ".cache" / "spark-jars"
FILES, ROWS = 8, 250


def write_input(directory: Path, files: int = FILES, rows: int = ROWS) -> set[int]:
    """``files`` Parquet files in the landed schema, ``rows`` unique ids each."""
    directory.mkdir(parents=True)
    ids: set[int] = set()
    for f in range(files):
        first = f * rows
        ids.update(range(first, first + rows))
        pq.write_table(pa.table({
            "stream": ["tables"] * rows,
            "shardId": [f"shardId-{f % 4:012d}"] * rows,
            "sequenceNumber": [f"{49_000_000_000 + i:056d}" for i in range(first, first + rows)],
            "subSequenceNumber": pa.array([0] * rows, pa.int64()),
            "partitionKey": [f"key-{i % 16}" for i in range(first, first + rows)],
            "approximateArrivalTimestamp": pa.array([datetime(2026, 11, 25, tzinfo=timezone.utc)] * rows,
                                                    pa.timestamp("us", tz="UTC")),
            "data": [json.dumps({"id": i}).encode() for i in range(first, first + rows)],
        }), directory / f"part-{f:04d}.parquet")
    return ids


def job_argv(inputs: Path, checkpoints: Path, *outputs: str, catalog: dict | None = None,
             s3_endpoint: str | None = None) -> list[str]:
    argv = [sys.executable, str(JOB), "--input", str(inputs), "--checkpoints", str(checkpoints)]
    argv += [a for output in outputs for a in ("--output", output)]
    if catalog is not None:
        argv += ["--iceberg-catalog", json.dumps(catalog)]
    if s3_endpoint is not None:
        argv += ["--s3-endpoint", s3_endpoint]
    return argv


def spark_env(jars: bool = False) -> dict[str, str]:
    submit = "--master local[2] --driver-memory 512m --conf spark.ui.enabled=false " \
             "--conf spark.driver.extraJavaOptions=-XX:+UseSerialGC"
    if jars:
        found = sorted(str(p) for p in JARS.glob("*.jar"))
        assert found, f"no jars in {JARS}: run `make spark-jars`"
        submit += " --jars " + ",".join(found)
    return {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_SUBMIT_ARGS": submit + " pyspark-shell",
            "PYSPARK_PYTHON": sys.executable,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def run_to_end(argv: list[str], env: dict[str, str], log: Path) -> float:
    began = time.monotonic()
    with log.open("a") as out:
        result = subprocess.run(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=300,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    assert result.returncode == 0, log.read_text()[-4000:]
    return time.monotonic() - began


def batches(checkpoint: Path, kind: str) -> set[int]:
    """The batch ids in a checkpoint's ``offsets`` (planned) or ``commits`` (done) log."""
    folder = checkpoint / kind
    return {int(p.name) for p in folder.iterdir() if p.name.isdigit()} if folder.exists() else set()


def in_flight(checkpoint: Path) -> int | None:
    """The batch Spark planned and has not committed, if one."""
    pending = batches(checkpoint, "offsets") - batches(checkpoint, "commits")
    return max(pending) if pending else None


def batch_in_flight_after(job: subprocess.Popen, log: Path, checkpoint: Path, after: int) -> bool:
    assert job.poll() is None, f"the job ended before it was killed:\n{log.read_text()[-4000:]}"
    batch = in_flight(checkpoint)
    return batch is not None and batch > after


def delta_ids(path: str, options: dict[str, str] | None = None) -> Counter:
    rows = DeltaTable(path, storage_options=options).to_pyarrow_table(columns=["data"]).column("data").to_pylist()
    return Counter(json.loads(d)["id"] for d in rows)


@pytest.mark.timeout(900)  # five Spark starts: 20 s each on 2 idle cores, a minute when the machine is loaded
def test_delta_and_iceberg_hold_every_id_once_through_three_sigkills(tmp_path):
    began = time.monotonic()
    expected = write_input(tmp_path / "input")
    catalog = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}",
               "warehouse": f"file://{tmp_path / 'warehouse'}"}
    checkpoints, delta = tmp_path / "checkpoints", tmp_path / "delta"
    argv = job_argv(tmp_path / "input", checkpoints, f"delta={delta}", "iceberg=landing.events", catalog=catalog)
    env, log = spark_env(), tmp_path / "job.log"
    rng = random.Random(28)
    killed_in: list[int] = []
    for _ in range(3):
        with log.open("a") as out:
            job = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            after = killed_in[-1] if killed_in else 0
            wait_until(partial(batch_in_flight_after, job, log, checkpoints / "delta", after), 180,
                       f"a batch after {after} in flight", 0.02)
            killed_in.append(in_flight(checkpoints / "delta") or 0)
            time.sleep(rng.uniform(0, 0.8))  # somewhere in the batch: reading, writing a table, committing
        finally:
            os.killpg(job.pid, signal.SIGKILL)  # the job's own group: its JVM and Python workers
            job.wait()
    assert max(killed_in) < FILES - 1, f"the kills came too late to be mid-run: batches {killed_in}"
    final_s = run_to_end(argv, env, log)

    ids = delta_ids(str(delta))
    assert set(ids) == expected and max(ids.values()) == 1, \
        f"delta: missing {sorted(expected - set(ids))[:10]}, twice {[i for i, c in ids.items() if c > 1][:10]}"
    iceberg = load_catalog("test", **catalog).load_table("landing.events")
    rows = iceberg.scan(selected_fields=("data",)).to_arrow().column("data").to_pylist()
    ice_ids = Counter(json.loads(d)["id"] for d in rows)
    assert set(ice_ids) == expected and max(ice_ids.values()) == 1, \
        f"iceberg: missing {sorted(expected - set(ice_ids))[:10]}, twice {[i for i, c in ice_ids.items() if c > 1][:10]}"
    assert {r["sequenceNumber"] for r in iceberg.scan(selected_fields=("sequenceNumber",)).to_arrow().to_pylist()} \
        == {f"{49_000_000_000 + i:056d}" for i in expected}

    # The state a kill leaves after the tables' commits and before Spark's: the last batch replays.
    versions = DeltaTable(str(delta)).version(), len(iceberg.snapshots())
    for fmt in ("delta", "iceberg"):
        last = max(batches(checkpoints / fmt, "commits"))
        for name in (str(last), f".{last}.crc"):  # the log entry and its Hadoop checksum
            (checkpoints / fmt / "commits" / name).unlink()
    replay_s = run_to_end(argv, env, log)
    iceberg = load_catalog("test", **catalog).load_table("landing.events")
    assert (DeltaTable(str(delta)).version(), len(iceberg.snapshots())) == versions
    assert delta_ids(str(delta)) == ids
    assert all(batches(checkpoints / fmt, "commits") == batches(checkpoints / fmt, "offsets") for fmt in ("delta", "iceberg"))
    print(f"\n{len(expected)} ids in {FILES} batches; SIGKILLed in batches {killed_in}; run to the end {final_s:.1f} s, "
          f"replayed restart {replay_s:.1f} s (delta version {versions[0]}, {versions[1]} iceberg snapshots, "
          f"unchanged); {time.monotonic() - began:.1f} s in all")


def test_parquet_and_delta_outputs_on_s3a_paths_of_moto(moto_url, unique_name, tmp_path):
    """The Parquet file sink through Spark's S3A (hadoop-aws and the AWS SDK modules from
    `make spark-jars`) and Delta through delta-rs, both on moto's S3 with the settings of one
    ``S3Settings``; read back through s3a by Spark and through delta-rs."""
    expected = write_input(tmp_path / "input", files=3, rows=100)
    boto3.client("s3", endpoint_url=moto_url, region_name="us-east-1").create_bucket(Bucket=unique_name)
    bucket = f"s3a://{unique_name}"
    argv = job_argv(tmp_path / "input", tmp_path / "checkpoints", f"parquet={bucket}/events",
                    f"delta={bucket}/delta", s3_endpoint=moto_url)
    env, log = spark_env(jars=True), tmp_path / "job.log"
    took = run_to_end(argv, env, log)

    s3 = S3Settings(endpoint=moto_url, path_style=True)
    assert delta_ids(object_store_uri(f"{bucket}/delta"), s3.storage_options()) == Counter(expected)
    read = [sys.executable, "-c", (
        "import sys; from pyspark.sql import SparkSession; from kcl_mp.spark.tables import S3Settings\n"
        "b = SparkSession.builder\n"
        f"for k, v in S3Settings(endpoint={moto_url!r}, path_style=True).spark_conf().items(): b = b.config(k, v)\n"
        f"print(b.getOrCreate().read.parquet({bucket + '/events'!r}).select('data').distinct().count())")]
    result = subprocess.run(read, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.split()[-1] == str(len(expected))
    print(f"\ns3a: {len(expected)} ids to parquet and delta on moto in {took:.1f} s")

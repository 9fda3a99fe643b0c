"""The outputs on S3: the Parquet file sink through Spark's S3A and Delta through delta-rs, on
moto's S3 (kcl_mp.spark.tables). The input is deterministic: Parquet files in the landed
schema, each row a unique id, read by Spark's file source in a job
(tests/support/spark_tables_job.py) run as a subprocess. Exactly once through SIGKILLs,
and a replayed batch writing nothing, are the pipeline's acceptance
(tests/e2e/test_spark_pipeline.py), on the same foreachBatch route.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from kcl_mp.devtools.spark_local import local_spark_env
from kcl_mp.spark.tables import S3Settings, object_store_uri

from ..support.harness import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.spark]

JOB = ROOT / "tests" / "support" / "spark_tables_job.py"
JARS = ROOT / ".cache" / "spark-jars"


def write_input(directory: Path, files: int, rows: int) -> set[int]:
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
    found = sorted(str(p) for p in JARS.glob("*.jar")) if jars else []
    assert found or not jars, f"no jars in {JARS}: run `make spark-jars`"
    return {**os.environ, **local_spark_env(jars=found),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def run_to_end(argv: list[str], env: dict[str, str], log: Path) -> float:
    began = time.monotonic()
    with log.open("a") as out:
        result = subprocess.run(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=300,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    assert result.returncode == 0, log.read_text()[-4000:]
    return time.monotonic() - began


def delta_ids(path: str, options: dict[str, str] | None = None) -> Counter:
    rows = DeltaTable(path, storage_options=options).to_pyarrow_table(columns=["data"]).column("data").to_pylist()
    return Counter(json.loads(d)["id"] for d in rows)


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

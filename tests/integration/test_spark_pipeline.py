"""The pipeline's acceptance: Kinesis -> kcl-mp (two hosts, the Parquet sink) -> a landing
directory -> the PySpark job -> tables that hold every record exactly once.

A producer puts records with unique ids throughout. Host-b's sink checkpoints only every
1,000th file, so everything it commits stays unchecked; it is SIGKILLed once it has
committed files for every lease it holds, so the survivor delivers those records again and
the landing area holds duplicates for real (host-a checkpoints every 4th file). The Spark job (local mode, the machine's Java) then runs twice with
availableNow: its events table must hold every id exactly once and no other, its counts
must add up to the same total, and the second run must change nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kcl_mp.devtools.producer import produce
from kcl_mp.embedded import ensure_stream
from kcl_mp.errors import DependencyError
from kcl_mp.leases.table import LeaseTable

from .harness import ROOT, BackgroundProducer, Daemon, base_properties, wait_until, write_properties

pytestmark = [pytest.mark.integration, pytest.mark.spark]

SHARDS = 4
SINK = ROOT / "processors" / "python" / "parquet_sink.py"
JOB = ROOT / "examples" / "spark" / "landing_job.py"
sys.path.insert(0, str(JOB.parent))
from landing_job import committed_files  # noqa: E402


def landed(landing: Path) -> tuple[Counter, dict[str, list[tuple[int, int]]]]:
    """Ids in the committed files (temporary ones skipped), and per shard each file's
    (first, last) sequence numbers from its name."""
    ids: Counter = Counter()
    files: dict[str, list[tuple[int, int]]] = {}
    for path in landing.glob("*.parquet"):
        shard, first, last, _ = path.name.split(".", 3)
        files.setdefault(shard, []).append((int(first), int(last)))
        for data in pq.read_table(path, columns=["data"]).column("data").to_pylist():
            ids[json.loads(data)["id"]] += 1
    return ids, files


def spark_output(events: Path) -> Counter:
    """Ids in the file sink's committed files."""
    ids: Counter = Counter()
    for path in committed_files(str(events)):
        for data in pq.read_table(path, columns=["data"]).column("data").to_pylist():
            ids[json.loads(data)["id"]] += 1
    return ids


def run_job(tmp_path: Path, landing: Path) -> float:
    began = time.monotonic()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1",
           "PYSPARK_SUBMIT_ARGS": "--driver-memory 512m --conf spark.driver.extraJavaOptions=-XX:+UseSerialGC "
                                  "pyspark-shell"}
    run = subprocess.run([sys.executable, str(JOB), "--landing", str(landing), "--output", str(tmp_path / "tables"),
                          "--checkpoint", str(tmp_path / "spark-checkpoint"), "--available-now",
                          "--files-per-trigger", "40"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stderr[-4000:]
    return time.monotonic() - began


def test_every_record_lands_exactly_once_in_the_spark_tables(moto_url, kinesis, dynamodb, unique_name, tmp_path):
    began = time.monotonic()
    stream = unique_name
    ensure_stream(kinesis, stream, SHARDS)
    landing = tmp_path / "landing"
    client = boto3.client("kinesis", endpoint_url=moto_url, region_name="us-east-1")
    producer = BackgroundProducer(lambda n: produce(client, stream, 30, first_id=n * 30, seed=n), 0.1)
    daemons: dict[str, Daemon] = {}
    producer.start()
    try:
        for name, every in (("a", 4), ("b", 1000)):
            props = write_properties(tmp_path / f"{name}.properties", **base_properties(
                moto_url, stream, unique_name,
                f"{sys.executable} {SINK} --landing {landing} --batch-records 150 --batch-seconds 0.5 "
                f"--checkpoint-every {every}",
                workerId=f"host-{name}", failoverTimeMillis=3000, callProcessRecordsEvenForEmptyRecordList="true"))
            daemons[name] = Daemon(props, tmp_path / f"{name}.log")
        table = LeaseTable(dynamodb, unique_name)

        def b_has_unchecked_files() -> bool:
            """Mid-run, every lease host-b holds has a committed file past its checkpoint
            (host-b never checkpoints: any file it committed)."""
            if time.monotonic() - began < 6:
                return False
            try:
                leases = [lease for lease in table.list_leases() if lease.owner == "host-b"]
            except DependencyError:  # the table does not exist yet
                return False
            if not leases or not landing.exists():
                return False
            _, files = landed(landing)
            for lease in leases:
                done = lease.checkpoint.sequence_number if lease.checkpoint else ""
                checkpoint = int(done) if done.isdigit() else 0
                if not any(last > checkpoint for _, last in files.get(lease.key, ())):
                    return False
            return True

        wait_until(b_has_unchecked_files, 60, "host-b holding leases with committed, unchecked files", 0.1)
        daemons["b"].kill()
        killed_at = time.monotonic()
        time.sleep(4)  # host-a takes host-b's leases (failover 3 s) while records keep coming
        producer.finish()
        expected = {put.id for put in producer.puts}
        wait_until(lambda: set(landed(landing)[0]) >= expected, 90, "every record in the landing area")
        daemons["a"].stop_gracefully()
    finally:
        producer.stop.set()
        for daemon in daemons.values():
            daemon.kill()
    ids, _ = landed(landing)
    duplicates = sum(count - 1 for count in ids.values())
    assert set(ids) == expected
    assert duplicates > 0, "the kill should have left re-delivered records in the landing area"
    pipeline_s = time.monotonic() - began

    first_s = run_job(tmp_path, landing)
    events = spark_output(tmp_path / "tables" / "events")
    assert set(events) == expected, f"missing {sorted(expected - set(events))[:10]}, extra {sorted(set(events) - expected)[:10]}"
    assert max(events.values()) == 1, [i for i, c in events.items() if c > 1][:10]
    counts = pq.read_table(tmp_path / "tables" / "counts").to_pydict()
    assert sum(counts["count"]) == len(expected)
    assert set(counts["partitionKey"]) <= {f"key-{k}" for k in range(64)}

    second_s = run_job(tmp_path, landing)  # a restart over the same landing area: nothing changes
    assert spark_output(tmp_path / "tables" / "events") == events
    assert sum(pq.read_table(tmp_path / "tables" / "counts").to_pydict()["count"]) == len(expected)
    print(f"{len(expected)} records, {duplicates} duplicates landed (host-b killed {killed_at - began:.1f} s in); "
          f"kcl-mp part {pipeline_s:.1f} s, Spark runs {first_s:.1f} s and {second_s:.1f} s")


def test_the_sink_commits_to_an_s3_prefix_then_checkpoints(moto_url, kinesis, dynamodb, unique_name, tmp_path):
    """The same sink with ``--landing s3://bucket/prefix`` (moto's S3): every record in the
    objects under the prefix, one object per shard and batch, and the lease checkpointed at
    each shard's last record once the objects exist."""
    stream = unique_name
    ensure_stream(kinesis, stream, 2)
    puts = produce(kinesis, stream, 600)
    s3 = boto3.client("s3", endpoint_url=moto_url, region_name="us-east-1")
    s3.create_bucket(Bucket=unique_name)
    props = write_properties(tmp_path / "app.properties", **base_properties(
        moto_url, stream, unique_name,
        f"{sys.executable} {SINK} --landing s3://{unique_name}/landing/v1 --s3-endpoint {moto_url} "
        "--batch-records 100 --batch-seconds 0.5", callProcessRecordsEvenForEmptyRecordList="true"))
    daemon = Daemon(props, tmp_path / "app.log")
    last = {}
    for put in puts:
        last[put.shard_id] = max(last.get(put.shard_id, (0, 0)), (int(put.sequence_number), put.sub_sequence_number))
    table = LeaseTable(dynamodb, unique_name)

    def checkpointed() -> bool:
        try:
            leases = {lease.key: lease.checkpoint for lease in table.list_leases()}
        except DependencyError:
            return False
        return all(leases.get(shard) is not None and leases[shard].sequence_number.isdigit()
                   and (int(leases[shard].sequence_number), leases[shard].sub_sequence_number) >= end
                   for shard, end in last.items())

    try:
        wait_until(checkpointed, 60, "every shard checkpointed at its last record")
        daemon.stop_gracefully()
    finally:
        daemon.kill()
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=unique_name, Prefix="landing/v1/")["Contents"]]
    ids: Counter = Counter()
    for key in keys:
        body = s3.get_object(Bucket=unique_name, Key=key)["Body"].read()
        shard = key.split("/")[-1].split(".")[0]
        table_ = pq.read_table(pa.BufferReader(body))
        assert set(table_.column("shardId").to_pylist()) == {shard}
        ids.update(json.loads(d)["id"] for d in table_.column("data").to_pylist())
    assert set(ids) == {put.id for put in puts} and max(ids.values()) == 1
    assert len(keys) >= 600 // 100, keys

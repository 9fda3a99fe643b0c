#!/usr/bin/env python3
"""The whole pipeline locally: Kinesis (embedded moto) -> kcl-mp with the landing sink ->
run/landing -> the landing source (kcl_mp.spark.job, availableNow) -> a Delta table in
run/tables/events -> a query of it.

Runs the demo driver with ``examples/spark/pipeline.properties`` (it puts ``--records``
records with unique ids and waits until every shard's last record is checkpointed, so
every record has landed), then ``python -m kcl_mp.spark.job --format delta``, then SQL over
the Delta table with delta-rs: every id exactly once, and the records per partition key.
Run it again and the job picks up only what landed since.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder

from kcl_mp.devtools.spark_local import local_spark_env

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "run"
QUERY = """SELECT count(*) AS records, count(DISTINCT data) AS distinct_records, count(DISTINCT "shardId") AS shards,
min("approximateArrivalTimestamp") AS first_arrival, max("approximateArrivalTimestamp") AS last_arrival FROM events"""
PER_KEY = 'SELECT "partitionKey", count(*) AS records FROM events GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 5'


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=20_000, help="records to put (default 20,000)")
    p.add_argument("--rate", type=int, default=2_000, help="records per second (default 2,000)")
    args = p.parse_args()
    demo = subprocess.run([sys.executable, "examples/demo/run_demo.py", "--properties",
                           "examples/spark/pipeline.properties", "--records", str(args.records),
                           "--rate", str(args.rate)], cwd=ROOT)
    if demo.returncode != 0:
        print("the kcl-mp part failed; see run/kcl-mp-pipeline.log", file=sys.stderr)
        return demo.returncode
    table = RUN / "tables" / "events"
    print(f"running the landing source over run/landing into the Delta table {table.relative_to(ROOT)}")
    job = subprocess.run([sys.executable, "-m", "kcl_mp.spark.job", "--landing", str(RUN / "landing"),
                          "--output", str(table), "--checkpoint", str(RUN / "spark-checkpoint"),
                          "--format", "delta", "--available-now"], cwd=ROOT,
                         env={**local_spark_env(), **os.environ})
    if job.returncode != 0:
        return job.returncode
    events = DeltaTable(str(table))
    print(f"run/tables/events: Delta version {events.version()}")
    for sql in (QUERY, PER_KEY):
        print(sql)
        for row in pa.table(QueryBuilder().register("events", events).execute(sql).read_all()).to_pylist():
            print("  ", row)
    (totals,) = pa.table(QueryBuilder().register("events", events).execute(QUERY).read_all()).to_pylist()
    twice = totals["records"] - totals["distinct_records"]
    return 0 if twice == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The whole pipeline locally: Kinesis (embedded moto) -> kcl-mp with the Parquet sink ->
run/landing -> the PySpark job (availableNow) -> run/tables/{events,counts}.

Runs the demo driver with ``examples/spark/pipeline.properties`` (it puts ``--records``
records with unique ids and waits until every shard's last record is checkpointed, so
every record has landed), then the Spark job, then checks the events table: every id
exactly once. Run it again and the job picks up only what landed since.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "run"
sys.path.insert(0, str(Path(__file__).resolve().parent))
from landing_job import committed_files  # noqa: E402


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
    print("running the Spark job over run/landing (availableNow)")
    job = subprocess.run([sys.executable, "examples/spark/landing_job.py", "--landing", str(RUN / "landing"),
                          "--output", str(RUN / "tables"), "--checkpoint", str(RUN / "spark-checkpoint"),
                          "--available-now"], cwd=ROOT, env={"SPARK_LOCAL_IP": "127.0.0.1", **os.environ})
    if job.returncode != 0:
        return job.returncode
    ids: Counter = Counter()
    for path in committed_files(str(RUN / "tables" / "events")):
        for data in pq.read_table(path, columns=["data"]).column("data").to_pylist():
            ids[json.loads(data)["id"]] += 1
    counts = pq.read_table(RUN / "tables" / "counts").to_pydict()
    twice = sum(1 for c in ids.values() if c > 1)
    print(f"events: {len(ids)} distinct ids, {twice} seen more than once; counts: {len(counts['count'])} "
          f"(minute, key) rows adding up to {sum(counts['count'])}")
    return 0 if twice == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

"""What the Spark tests share: the job as a subprocess in its own process group (local[2],
the UI off, set from outside as spark-submit would), the landing area read back with pyarrow,
a file landed by hand, and Spark's own view of an output table and a checkpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow.parquet as pq

from kcl_mp.devtools.spark_local import job_env, local_spark_env
from kcl_mp.spark.layout import Position, parse_name
from kcl_mp.spark.sink import landing_file
from kcl_mp.spark.storage import Storage

from .harness import ROOT

# KCLMP_SPARK_PYTHON: run the job (and its Python workers) on another interpreter, e.g. a venv
# with a cluster's PySpark and the kcl-mp wheel installed, instead of this checkout's.
JOB_PYTHON = os.environ.get("KCLMP_SPARK_PYTHON", sys.executable)
SPARK_ENV = local_spark_env(JOB_PYTHON)


class Job:
    """``python -m kcl_mp.spark.job`` (or ``module``, a wrapper of it) in its own process group,
    its output in a file."""

    def __init__(self, log: Path, *args: str, env: dict[str, str] | None = None, module: str = "kcl_mp.spark.job"):
        self.log = log
        with open(log, "ab") as out:
            self.process = subprocess.Popen([JOB_PYTHON, "-m", module, *args], cwd=ROOT if JOB_PYTHON == sys.executable else log.parent,
                                            env={**job_env(JOB_PYTHON), **(env or {})}, stdin=subprocess.DEVNULL,
                                            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(30)

    def wait(self, timeout: float) -> None:
        code = self.process.wait(timeout)
        assert code == 0, f"the job exited with {code}:\n{self.log.read_text(errors='replace')[-4000:]}"


def landed_files(landing: Path) -> dict[str, list[Path]]:
    """``<stream>/<shard>`` -> its committed files (temporary ones skipped)."""
    found: dict[str, list[Path]] = {}
    for path in sorted(landing.glob("*/*/*.parquet")):
        found.setdefault(f"{path.parent.parent.name}/{path.parent.name}", []).append(path)
    return found


def landed_ids(landing: Path) -> Counter:
    ids: Counter = Counter()
    for paths in landed_files(landing).values():
        for path in paths:
            ids.update(json.loads(d)["id"] for d in pq.read_table(path, columns=["data"]).column("data").to_pylist())
    return ids


def last_landed(landing: Path, shard: str) -> Position:
    return max(parse_name(p.name).last for p in landed_files(landing)[shard])


def land(storage: Storage, stream: str, shard: str, rows: list[tuple[Position, int]], after: Position, writer: str,
         written: datetime | None = None) -> str:
    """Land ``rows`` ((position, id) each) as the sink does, written at ``written`` (a writer's
    clock: ingestTime; the local file's mtime too)."""
    written = written or datetime.now(timezone.utc)
    records = [(str(p[0]), p[1], f"key-{i % 7}", int(written.timestamp() * 1000), json.dumps({"id": i}).encode())
               for p, i in rows]
    relative, table = landing_file(stream, shard, records, after, after, False, written, writer, 1)
    where = storage.commit(relative, table)
    if storage.bucket is None:
        os.utime(where, (written.timestamp(), written.timestamp()))
    return relative


def hours(n: float) -> timedelta:
    return timedelta(hours=n)


def offsets(checkpoint: Path) -> dict[int, dict]:
    """The source's end offset of each planned batch, from the query's offset log."""
    found = {}
    for path in (checkpoint / "offsets").iterdir():
        if path.name.isdigit():
            found[int(path.name)] = json.loads(path.read_text().splitlines()[2])
    return found


def moved(log: dict[int, dict], shard: str) -> list[int]:
    """The batches that read ``shard`` (its position moved; an entry that did not move is kept as it was)."""
    def position(batch: int) -> tuple:
        entry = log.get(batch, {}).get(shard, {})
        return entry.get("seq"), entry.get("sub")

    return [b for b in sorted(log) if log[b].get(shard, {}).get("seq") and position(b) != position(b - 1)]


def committed_batches(checkpoint: Path) -> set[int]:
    if not (checkpoint / "commits").exists():
        return set()
    return {int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit()}

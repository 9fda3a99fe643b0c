"""``python -m kcl_mp.spark.job`` with the ``kclmp_kinesis`` source swapped for a subclass whose
executor ``read`` fails and slows on cue, as tests/e2e/test_spark_kinesis_source.py runs it:

    python -m tests.support.spark_kinesis_faults --stream ... (the job's arguments)

The cues are in ``$KCLMP_TEST_FAULTS/plan.json`` (:class:`Plan`); the markers the reads claim
and the lines they log go in the same directory, so the test sees what happened:

- a failure: the first read of a partition (a batch's shards for one task) of epoch
  ``fail_from[k]`` or later that emits rows claims marker ``fail-k`` and raises after its first
  Arrow batch. The partition's later attempts in that query (Spark's task retry, or the batch
  replayed after a driver kill) find ``tried-<query>-<partition>`` and read normally: each
  failure is a first attempt's.
- a slowed task with a twin: the first read of epoch ``slow_from`` or later claims ``slow-<run>``
  (``$KCLMP_TEST_RUN``; until one has written ``twin.json``, each start of the job may slow one); it starts the same read at once in another thread, as a speculative copy would (Spark never
  launches one in local mode, where every executor is on one host), waits ``slow_s``, then
  reads. Both reads' rows go to ``twin.json``: they must be the same.

Spark's Python workers import this module by name (``PYTHONPATH`` holds the checkout).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kcl_mp.spark.kinesis_options import Options
from kcl_mp.spark.kinesis_source import KinesisSource, KinesisStreamReader

FAULTS = "KCLMP_TEST_FAULTS"
RUN = "KCLMP_TEST_RUN"  # which start of the job this is


@dataclass(frozen=True)
class Plan:
    fail_from: tuple[int, ...] = ()
    slow_from: int | None = None
    slow_s: float = 3.0

    def write(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "plan.json").write_text(json.dumps(
            {"fail_from": list(self.fail_from), "slow_from": self.slow_from, "slow_s": self.slow_s}))

    @classmethod
    def read(cls, directory: Path) -> Plan:
        raw = json.loads((directory / "plan.json").read_text())
        return cls(tuple(raw["fail_from"]), raw["slow_from"], raw["slow_s"])


class InjectedFailure(RuntimeError):
    pass


def claim(path: Path) -> bool:
    """Create ``path`` if absent: True for the one caller that did."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


def log(directory: Path, **line: Any) -> None:
    with open(directory / "reads.jsonl", "a") as out:  # one short write each: O_APPEND keeps lines whole
        out.write(json.dumps(line) + "\n")


def attempt() -> int:
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.attemptNumber() if context is not None else -1


def partition_name(partition: Any) -> str:
    takes = partition.takes
    shards = ",".join(f"{t.stream}/{t.shard_id}" for t in takes)
    return f"{takes[0].epoch}-{zlib.crc32(shards.encode()):08x}"


def ids(batches: Any) -> list[tuple[str, str, int]]:
    """The rows' (shard, sequence number, sub-sequence number)."""
    return [(s, q, n) for b in batches for s, q, n in zip(b.column("shardId").to_pylist(),
                                                         b.column("sequenceNumber").to_pylist(),
                                                         b.column("subSequenceNumber").to_pylist())]


class FaultyStreamReader(KinesisStreamReader):
    def read(self, partition: Any) -> Iterator[Any]:
        where = os.environ.get(FAULTS)
        if not where or not partition.takes:
            yield from super().read(partition)
            return
        directory = Path(where)
        plan = Plan.read(directory)
        query = os.path.basename((self.options.metadata or "").rstrip("/"))  # the job's <metadata>/<format>
        name = partition_name(partition)
        epoch = partition.takes[0].epoch
        # once a run (a kill may cut the slowed read short: a later run slows one again)
        if (plan.slow_from is not None and epoch >= plan.slow_from and not (directory / "twin.json").exists()
                and claim(directory / f"slow-{os.environ.get(RUN, '0')}")):
            yield from self._slowed_with_twin(partition, directory, plan, query, name)
            return
        emitted = 0
        tried = directory / f"tried-{query}-{name}"
        for batch in super().read(partition):
            yield batch
            emitted += batch.num_rows
            if emitted and not tried.exists():
                for k, first in enumerate(plan.fail_from):
                    if epoch >= first and claim(directory / f"fail-{k}"):
                        claim(tried)
                        log(directory, query=query, partition=name, attempt=attempt(), rows=emitted, failed=k)
                        raise InjectedFailure(f"injected failure {k} in {query} {name} after {emitted} rows")
        log(directory, query=query, partition=name, attempt=attempt(), rows=emitted, failed=None)

    def _slowed_with_twin(self, partition: Any, directory: Path, plan: Plan, query: str,
                          name: str) -> Iterator[Any]:
        twin: list[Any] = []
        errors: list[BaseException] = []

        def read_twin() -> None:
            try:
                twin.extend(KinesisStreamReader.read(self, partition))
            except BaseException as exc:  # noqa: BLE001 (reported in twin.json)
                errors.append(exc)

        thread = threading.Thread(target=read_twin, name="twin")
        thread.start()
        time.sleep(plan.slow_s)
        mine = list(super().read(partition))
        thread.join(600)
        (directory / "twin.json").write_text(json.dumps({
            "query": query, "partition": name, "twin": ids(twin), "slowed": ids(mine),
            "errors": [repr(e) for e in errors]}))
        log(directory, query=query, partition=name, attempt=attempt(), rows=sum(b.num_rows for b in mine),
            failed=None, slowed=True)
        yield from mine


class FaultySource(KinesisSource):
    def streamReader(self, schema: Any) -> FaultyStreamReader:  # noqa: N802 (PySpark's name)
        return FaultyStreamReader(Options.parse(dict(self.options)))


def main() -> int:
    from kcl_mp.spark import job

    # by its name, not as __main__: the class must pickle by reference for Spark's workers
    from tests.support.spark_kinesis_faults import FaultySource as Faulty

    registered = job.register

    def register(spark: Any) -> None:
        registered(spark)
        spark.dataSource.register(Faulty)  # the same name: it replaces the real one

    job.register = register
    return job.main()


if __name__ == "__main__":
    sys.exit(main())

"""Spark's micro-batch loop over the ``kclmp_kinesis`` stream reader, in-process (no Spark):
the tests that drive the planner and the executors' reads themselves share it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from kcl_mp.spark.kinesis_plan import IDLE_PROBE_GAP_S
from kcl_mp.spark.kinesis_source import KinesisStreamReader


def drain(reader: KinesisStreamReader, start: dict, on_batch: Callable[[dict, pa.RecordBatch], None],
          limit: Any = None, bound: int = 200) -> dict:
    """Plan, read every partition, commit, until nothing moves; the end offset. Nothing moving
    counts only on a trigger planned IDLE_PROBE_GAP_S after the last (an idle shard is probed at
    most that often, so a quiet trigger right after another has not asked it).
    ``on_batch(end, batch)`` sees every Arrow batch read; ``limit`` is Spark's read limit."""
    quiet_since: float | None = None
    for _ in range(bound):
        end = reader.latestOffset(start, limit)
        if end == start:
            if quiet_since is not None and time.monotonic() - quiet_since >= IDLE_PROBE_GAP_S:
                return end
            quiet_since = quiet_since if quiet_since is not None else time.monotonic()
            time.sleep(max(0.0, quiet_since + IDLE_PROBE_GAP_S - time.monotonic()))
            continue
        quiet_since = None
        for part in reader.partitions(start, end):
            for batch in reader.read(part):
                on_batch(end, batch)
        reader.commit(end)
        start = end
    raise AssertionError(f"still moving after {bound} triggers")

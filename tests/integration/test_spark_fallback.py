"""The Spark 3.5 fallback (kcl_mp.spark.fallback.read_deduplicated) on the landing layout: a
range landed twice within the window comes out once; a copy landed after the window has
moved past the first is a duplicate, and a writer further behind than the window loses its
rows: the limits docs/spark.md states, measured (the kclmp_landing source has neither)."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone

import pytest

from kcl_mp.spark.fallback import read_deduplicated
from kcl_mp.spark.layout import START
from kcl_mp.spark.storage import Storage

from ..support.spark_support import SPARK_ENV, land

pytestmark = [pytest.mark.integration, pytest.mark.spark]


@pytest.fixture(scope="module")
def spark():
    os.environ.update(SPARK_ENV)
    from pyspark.sql import SparkSession

    session = SparkSession.builder.appName("test_spark_fallback").config("spark.sql.session.timeZone", "UTC") \
        .getOrCreate()
    yield session
    session.stop()


def test_duplicates_within_the_window_only(spark, tmp_path):
    landing = tmp_path / "landing"
    storage = Storage(str(landing))
    t0 = datetime.now(timezone.utc) - timedelta(hours=3)
    shard = "shardId-000000000000"
    first = [((100 + n, 0), n) for n in range(10)]
    land(storage, "s", shard, first, START, "w1", written=t0)
    land(storage, "s", shard, first[5:], (104, 0), "w2", written=t0 + timedelta(minutes=1))  # a failover's copy
    land(storage, "s", shard, [((200 + n, 0), 100 + n) for n in range(5)], (109, 0), "w3",
         written=t0 + timedelta(hours=2))  # moves the watermark past the first copy's window
    land(storage, "s", shard, [((300 + n, 0), 200 + n) for n in range(5)], (204, 0), "w3b",
         written=t0 + timedelta(hours=2, milliseconds=500))  # a batch more: the expired keys leave the state
    land(storage, "s", shard, first[:3], START, "w4", written=t0 + timedelta(hours=2, seconds=1))  # copied late
    behind = land(storage, "s", "shardId-000000000001", [((300, 0), 500)], START, "w5", written=t0)
    late = (t0 + timedelta(hours=2, seconds=2)).timestamp()  # landed last, by a writer whose clock is 2 h behind
    os.utime(landing / behind, (late, late))

    query = (read_deduplicated(spark, str(landing), window="30 minutes", files_per_trigger=1)
             .writeStream.format("memory").queryName("fallback").trigger(availableNow=True)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    query.awaitTermination()
    ids = [json.loads(row.data)["id"] for row in spark.sql("select data from fallback").collect()]
    assert sorted(set(ids)) == [*range(10), *range(100, 105), *range(200, 205)], sorted(ids)  # the late writer's row: dropped
    assert sorted(i for i in set(ids) if ids.count(i) > 1) == [0, 1, 2]  # within the window once, after it twice
    dropped = sum(p["stateOperators"][0].get("numRowsDroppedByWatermark", 0) for p in query.recentProgress
                  if p["stateOperators"])
    assert dropped == 1, dropped

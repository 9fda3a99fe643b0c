#!/usr/bin/env python3
"""The PySpark side of the pipeline: kcl-mp's at-least-once landing area in, exactly-once
tables out.

    python examples/spark/landing_job.py --landing run/landing --output run/tables \\
        --checkpoint run/spark-checkpoint --available-now          # what has landed, then stop
    python examples/spark/landing_job.py ... --processing-time "30 seconds"   # a stream

Reads the Parquet files ``processors/python/parquet_sink.py`` commits (a Structured
Streaming file source: a file is read once, when it appears), and:

- ``events``: every record once. Duplicates (a batch written again after a failover or a
  crash before the checkpoint) are dropped on (shardId, sequenceNumber, subSequenceNumber)
  with ``dropDuplicatesWithinWatermark`` on ``ingestTime``, the time the sink wrote the
  file. Not on arrival time: the watermark is global, so a lagging shard's old arrival
  times would be dropped as late; a re-delivery is written again within minutes, well
  inside ``--dedup-window``. Written by the Parquet file sink, whose ``_spark_metadata``
  log makes it exactly-once: read it with Spark (or honour that log).
- ``counts``: records per partition key per minute of arrival, the whole table rewritten
  each batch (complete mode) to a new directory that then replaces the old one.

Each query keeps its state and the files it has read in ``--checkpoint``: stop and start
the job at will, kill it at any point; it resumes where it committed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType, TimestampType

KEY = ["shardId", "sequenceNumber", "subSequenceNumber"]
SCHEMA = StructType([
    StructField("shardId", StringType()),
    StructField("sequenceNumber", StringType()),
    StructField("subSequenceNumber", LongType()),
    StructField("partitionKey", StringType()),
    StructField("approximateArrivalTimestamp", TimestampType()),
    StructField("data", BinaryType()),
    StructField("ingestTime", TimestampType()),
])


def session(app: str = "kcl-mp landing job") -> SparkSession:
    return (SparkSession.builder.appName(app)
            .master(os.environ.get("SPARK_MASTER", "local[2]"))
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", os.environ.get("SPARK_SHUFFLE_PARTITIONS", "4"))
            .config("spark.sql.session.timeZone", "UTC")
            .getOrCreate())


def deduplicated(spark: SparkSession, landing: str, dedup_window: str, files_per_trigger: int) -> DataFrame:
    records = (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", files_per_trigger)
               .parquet(landing))
    return records.withWatermark("ingestTime", dedup_window).dropDuplicatesWithinWatermark(KEY)


def _replace_counts(output: str):
    """foreachBatch for the complete-mode counts: write the batch aside, then swap it in."""

    def write(batch: DataFrame, batch_id: int) -> None:
        target = os.path.join(output, "counts")
        staging = os.path.join(output, f".counts-{batch_id}")
        shutil.rmtree(staging, ignore_errors=True)  # a replay of this batch starts over
        batch.coalesce(1).write.mode("overwrite").parquet(staging)
        old = os.path.join(output, f".counts-old-{batch_id}")
        if os.path.exists(target):
            os.replace(target, old)
        os.replace(staging, target)
        shutil.rmtree(old, ignore_errors=True)

    return write


def committed_files(table: str) -> list[str]:
    """The files a Parquet file sink committed, from its ``_spark_metadata`` log: what a
    reader other than Spark must read (a crash can leave uncommitted files beside them)."""
    files: list[str] = []
    log = os.path.join(table, "_spark_metadata")
    for name in sorted((n for n in os.listdir(log) if not n.startswith(".")), key=lambda n: int(n.split(".")[0])):
        with open(os.path.join(log, name)) as entries:
            for line in entries.read().splitlines()[1:]:  # the first line is the log's version
                entry = json.loads(line)
                if entry["action"] == "add":
                    files.append(entry["path"].removeprefix("file://"))
                elif entry["action"] == "delete":
                    files.remove(entry["path"].removeprefix("file://"))
    return files


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--landing", required=True, help="the sink's landing directory (or s3a:// with hadoop-aws)")
    p.add_argument("--output", required=True, help="where the events and counts tables go")
    p.add_argument("--checkpoint", required=True, help="the queries' checkpoint location")
    when = p.add_mutually_exclusive_group(required=True)
    when.add_argument("--available-now", action="store_true", help="process what has landed, then stop")
    when.add_argument("--processing-time", metavar="INTERVAL", help='run as a stream, e.g. "30 seconds"')
    p.add_argument("--dedup-window", default="30 minutes",
                   help="how long after a file a re-delivered copy of its records may land (default 30 minutes)")
    p.add_argument("--files-per-trigger", type=int, default=100, help="files per micro-batch at most (default 100)")
    args = p.parse_args(argv)

    spark = session()
    spark.sparkContext.setLogLevel("WARN")
    events = deduplicated(spark, args.landing, args.dedup_window, args.files_per_trigger)
    trigger = {"availableNow": True} if args.available_now else {"processingTime": args.processing_time}
    os.makedirs(args.output, exist_ok=True)
    queries = [
        events.writeStream.queryName("events").format("parquet")
        .option("checkpointLocation", os.path.join(args.checkpoint, "events"))
        .trigger(**trigger).start(os.path.join(args.output, "events")),
        events.groupBy(F.window("approximateArrivalTimestamp", "1 minute").start.alias("minute"), "partitionKey")
        .count().writeStream.queryName("counts").outputMode("complete").foreachBatch(_replace_counts(args.output))
        .option("checkpointLocation", os.path.join(args.checkpoint, "counts")).trigger(**trigger).start(),
    ]
    try:
        for query in queries:
            query.awaitTermination()
            rows = sum(p.get("numInputRows", 0) for p in query.recentProgress)
            print(f"{query.name}: {len(query.recentProgress)} micro-batches, {rows} landed rows read "
                  "(duplicates included)", file=sys.stderr)
    finally:
        for query in queries:
            query.stop()
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

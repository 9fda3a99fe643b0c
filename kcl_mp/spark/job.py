"""A Spark job: the ``kclmp_landing`` source into an output table, exactly once.

    spark-submit --master yarn -m kcl_mp.spark.job ...   (or: python -m kcl_mp.spark.job ...)
    python -m kcl_mp.spark.job --landing s3a://bucket/landing --output s3a://bucket/events \\
        --checkpoint s3a://bucket/checkpoints/events --processing-time "5 seconds"

Master, shuffle partitions, the UI and everything else that belongs to spark-submit come from
it (or ``PYSPARK_SUBMIT_ARGS`` for ``python -m``): the session is ``getOrCreate()``. Output goes
through Spark's writers only (``WRITERS``), so any path Spark can write works.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from kcl_mp.spark import register


def write_parquet(df: Any, path: str, checkpoint: str, trigger: dict[str, Any]) -> Any:
    """Spark's Parquet file sink: exactly once through its ``_spark_metadata`` log (read it
    with Spark, or honour that log)."""
    return (df.writeStream.queryName("kclmp_landing_parquet").format("parquet")
            .option("checkpointLocation", checkpoint).trigger(**trigger).start(path))


WRITERS: dict[str, Callable[[Any, str, str, dict[str, Any]], Any]] = {"parquet": write_parquet}


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m kcl_mp.spark.job", description=__doc__.split("\n\n")[0])
    p.add_argument("--landing", required=True, help="the sink's landing root (directory, s3:// or s3a://)")
    p.add_argument("--output", required=True, help="the output table's path")
    p.add_argument("--checkpoint", required=True, help="the query's checkpoint location")
    p.add_argument("--format", choices=sorted(WRITERS), default="parquet", help="the output's format (default parquet)")
    when = p.add_mutually_exclusive_group(required=True)
    when.add_argument("--available-now", action="store_true", help="process what has landed, then stop")
    when.add_argument("--processing-time", metavar="INTERVAL", help='run as a stream, e.g. "5 seconds"')
    p.add_argument("--max-files-per-trigger", type=int, help="files per micro-batch at most")
    p.add_argument("--max-rows-per-trigger", type=int, help="rows per micro-batch at most (whole files)")
    p.add_argument("--clean-source", choices=("off", "delete", "archive"), default="off",
                   help="what happens to landed files at or below the committed offsets (default off)")
    p.add_argument("--archive-dir", help="where cleanSource=archive moves them")
    p.add_argument("--s3-endpoint", help="an S3 endpoint URL for the landing area (an emulator)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from pyspark.sql import SparkSession

    from kcl_mp.spark.source import NAME

    args = parse(argv)
    spark = SparkSession.builder.appName("kcl-mp landing job").getOrCreate()
    register(spark)
    options = {"cleanSource": args.clean_source, "maxFilesPerTrigger": args.max_files_per_trigger,
               "maxRowsPerTrigger": args.max_rows_per_trigger, "sourceArchiveDir": args.archive_dir,
               "s3Endpoint": args.s3_endpoint}
    reader = spark.readStream.format(NAME)
    for key, value in options.items():
        if value is not None:
            reader = reader.option(key, str(value))
    trigger = {"availableNow": True} if args.available_now else {"processingTime": args.processing_time}
    query = WRITERS[args.format](reader.load(args.landing), args.output, args.checkpoint, trigger)
    try:
        query.awaitTermination()
    finally:
        query.stop()
    rows = sum(p.get("numInputRows", 0) for p in query.recentProgress)
    print(f"kclmp_landing: {len(query.recentProgress)} micro-batches, {rows} rows", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

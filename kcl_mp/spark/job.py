"""A Spark job: the ``kclmp_landing`` source into an output table, exactly once.

    spark-submit --master yarn -m kcl_mp.spark.job ...   (or: python -m kcl_mp.spark.job ...)
    python -m kcl_mp.spark.job --landing s3a://bucket/landing --output s3a://bucket/events \\
        --checkpoint s3a://bucket/checkpoints/events --processing-time "5 seconds"

Master, shuffle partitions, the UI and everything else that belongs to spark-submit come from
it (or ``PYSPARK_SUBMIT_ARGS`` for ``python -m``): the session is ``getOrCreate()``. The output
is written by :func:`kcl_mp.spark.tables.write_stream`: Parquet through Spark's file sink, Delta
and Iceberg through delta-rs and pyiceberg keyed by the query and batch (exactly once through
kills), so any path Spark, delta-rs or pyiceberg can write works.

    python -m kcl_mp.spark.job --landing run/landing --format iceberg --output landing.events \
        --iceberg-catalog '{"type": "sql", "uri": "sqlite:///run/catalog.db", "warehouse": "file:///run/wh"}' \
        --checkpoint run/checkpoints/events --available-now
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from typing import Any

from kcl_mp.spark import register
from kcl_mp.spark.queries import Queries, RestartPolicy
from kcl_mp.spark.tables import Format, IcebergCatalog, S3Settings, Trigger, write_stream


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m kcl_mp.spark.job", description=__doc__.split("\n\n")[0])
    p.add_argument("--landing", required=True, help="the sink's landing root (directory, s3:// or s3a://)")
    p.add_argument("--output", required=True, action="append", metavar="[FORMAT=]TABLE",
                   help="an output table: a path for parquet and delta, namespace.table for iceberg; in --format, "
                        "or in the FORMAT given before '='. Repeat it for several outputs of one read, each then "
                        "checkpointed in <checkpoint>/<format>")
    p.add_argument("--checkpoint", required=True, help="the query's checkpoint location")
    p.add_argument("--format", choices=[f.value for f in Format], default="parquet",
                   help="the output's format (default parquet)")
    p.add_argument("--iceberg-catalog", metavar="JSON",
                   help="with --format iceberg: pyiceberg's catalog properties, e.g. "
                        '\'{"type": "glue"}\' or \'{"type": "rest", "uri": "..."}\'')
    p.add_argument("--iceberg-catalog-name", default="default", help="the Iceberg catalog's name (default default)")
    when = p.add_mutually_exclusive_group(required=True)
    when.add_argument("--available-now", action="store_true", help="process what has landed, then stop")
    when.add_argument("--processing-time", metavar="INTERVAL", help='run as a stream, e.g. "5 seconds"')
    p.add_argument("--max-files-per-trigger", type=int, help="files per micro-batch at most")
    p.add_argument("--max-rows-per-trigger", type=int, help="rows per micro-batch at most (whole files)")
    p.add_argument("--clean-source", choices=("off", "delete", "archive"), default="off",
                   help="what happens to landed files at or below the committed offsets (default off)")
    p.add_argument("--archive-dir", help="where cleanSource=archive moves them")
    p.add_argument("--s3-endpoint", help="an S3 endpoint URL (an emulator): the landing area's and the output's")
    p.add_argument("--restarts", type=int, default=RestartPolicy.restarts, metavar="N",
                   help="start a failed query again from its checkpoint, up to N times while no batch completes "
                        f"between (default {RestartPolicy.restarts}; 0: fail at once)")
    p.add_argument("--restart-pause", type=float, default=RestartPolicy.pause_s, metavar="SECONDS",
                   help=f"the pause before such a start (default {RestartPolicy.pause_s:g})")
    args = p.parse_args(argv)
    outputs = []
    for output in args.output:
        fmt, sep, table = output.partition("=")
        fmt, table = (fmt, table) if sep and fmt in {f.value for f in Format} else (args.format, output)
        outputs.append((fmt, table))
    if len({fmt for fmt, _ in outputs}) != len(outputs):
        p.error(f"one output per format: {args.output}")
    if any(fmt == "iceberg" for fmt, _ in outputs) != (args.iceberg_catalog is not None):
        p.error("--iceberg-catalog goes with an iceberg output, and only with it")
    if args.restarts < 0 or args.restart_pause < 0:
        p.error(f"--restarts and --restart-pause take a number >= 0, not {args.restarts} and {args.restart_pause}")
    args.outputs = outputs
    return args


def main(argv: list[str] | None = None) -> int:
    from pyspark.sql import SparkSession

    from kcl_mp.spark.source import NAME

    args = parse(argv)
    spark = SparkSession.builder.appName("kcl-mp landing job").getOrCreate()
    register(spark)
    options = {"cleanSource": args.clean_source, "maxFilesPerTrigger": args.max_files_per_trigger,
               "maxRowsPerTrigger": args.max_rows_per_trigger, "sourceArchiveDir": args.archive_dir,
               "s3Endpoint": args.s3_endpoint,
               "availableNow": "true" if args.available_now else None}  # held to what had landed (Spark < 4.2)
    reader = spark.readStream.format(NAME)
    for key, value in options.items():
        if value is not None:
            reader = reader.option(key, str(value))
    trigger = Trigger(available_now=True) if args.available_now else Trigger(processing_time=args.processing_time)
    catalog = (IcebergCatalog(args.iceberg_catalog_name, json.loads(args.iceberg_catalog))
               if args.iceberg_catalog else None)
    s3 = S3Settings(endpoint=args.s3_endpoint, path_style=True) if args.s3_endpoint else None

    def start(fmt: str, table: str) -> Any:
        checkpoint = args.checkpoint if len(args.outputs) == 1 else f"{args.checkpoint}/{fmt}"
        return write_stream(reader.load(args.landing), fmt, table, checkpoint, trigger,
                            query_name=f"kclmp_landing_{fmt}", iceberg=catalog, s3=s3)

    # availableNow: one output after another (PySpark 4.3 fails a replayed batch's task with
    # java.io.OptionalDataException when several Python-source queries run it at once); a
    # stream: all at once
    queries = Queries({fmt: partial(start, fmt, table) for fmt, table in args.outputs},
                      RestartPolicy(args.restarts, args.restart_pause))
    try:
        if args.available_now:
            queries.run_one_by_one()
        else:
            queries.run_together(spark.streams.awaitAnyTermination, spark.streams.resetTerminated)
    finally:
        queries.stop()
    for query in queries.finished.values():
        rows = sum(p.get("numInputRows", 0) for p in query.recentProgress)
        print(f"{query.name}: {len(query.recentProgress)} micro-batches, {rows} rows", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

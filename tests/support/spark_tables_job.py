"""The Spark job tests/unit/test_spark_tables.py runs (and SIGKILLs) as a subprocess:
Parquet files in the landed schema in, through Spark's file source (one file a batch),
out to each output named, with ``kcl_mp.spark.tables.write_stream``. What belongs to
spark-submit (master, memory, jars) comes in through PYSPARK_SUBMIT_ARGS, as on a cluster."""

from __future__ import annotations

import argparse
import json

from pyspark.sql import SparkSession

from kcl_mp.spark.tables import IcebergCatalog, S3Settings, Trigger, write_stream


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--input", required=True)
    p.add_argument("--checkpoints", required=True)
    p.add_argument("--output", action="append", default=[], metavar="FORMAT=PATH",
                   help="parquet=DIR, delta=DIR, iceberg=namespace.table")
    p.add_argument("--iceberg-catalog", default="{}", help="pyiceberg catalog properties (JSON)")
    p.add_argument("--s3-endpoint", help="S3A and delta-rs on this endpoint, path style")
    args = p.parse_args()
    s3 = S3Settings(endpoint=args.s3_endpoint, path_style=True) if args.s3_endpoint else None
    builder = SparkSession.builder.appName("kcl-mp tables test").config("spark.sql.session.timeZone", "UTC")
    for key, value in (s3.spark_conf() if s3 else {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    schema = spark.read.parquet(args.input).schema  # the landed schema, as the test wrote it
    landed = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(args.input)
    catalog = IcebergCatalog("test", json.loads(args.iceberg_catalog))
    queries = []
    for output in args.output:
        fmt, path = output.split("=", 1)
        queries.append(write_stream(landed, fmt, path, f"{args.checkpoints}/{fmt}", Trigger(available_now=True),
                                    query_name=fmt, iceberg=catalog, s3=s3))
    for query in queries:
        query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()

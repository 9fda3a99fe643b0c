"""A Spark job: Kinesis into output tables, exactly once: the ``kclmp_landing`` source (what
kcl-mp's sink landed) or the ``kclmp_kinesis`` source (the streams themselves).

    spark-submit --master yarn -m kcl_mp.spark.job ...   (or: python -m kcl_mp.spark.job ...)
    python -m kcl_mp.spark.job --landing s3a://bucket/landing --output s3a://bucket/events \\
        --checkpoint s3a://bucket/checkpoints/events --processing-time "5 seconds"
    python -m kcl_mp.spark.job --stream orders,payments --region eu-west-1 --initial-position trim_horizon \\
        --metadata s3://bucket/kinesis-metadata/events --output s3a://bucket/events \\
        --checkpoint s3a://bucket/checkpoints/events --processing-time "5 seconds"

With ``--stream`` each output's query reads the streams itself and records where its batches
ended under ``<metadata>/<format>`` (one directory or prefix per query: never give two jobs the
same ``--metadata``); ``--source-option KEY=VALUE`` passes any other option of the source
(``maxRecordsPerFetch``, ``maxFetchDuration``, ``shardsPerTask``, ...).

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
from collections.abc import Iterable
from functools import partial
from typing import Any

from kcl_mp.spark import register
from kcl_mp.spark.queries import Queries, RestartPolicy
from kcl_mp.spark.tables import Format, IcebergCatalog, S3Settings, Trigger, write_stream

KINESIS = "kclmp_kinesis"  # the direct source's name (kcl_mp.spark.kinesis_source)
SETTLE_S = 120.0  # how long a query's start waits for the others' sources to exist (queries.Queries)
POSITIONS = ("latest", "trim_horizon", "earliest")  # the initial positions named by a word
# the direct source's options a flag of this job sets (Spark's option names are case-insensitive)
SET_BY_FLAGS = {"streamname": "--stream", "streamarn": "--stream", "endpointurl": "--endpoint-url",
                "region": "--region", "initialposition": "--initial-position", "metadatapath": "--metadata",
                "maxrecordspertrigger": "--max-records-per-trigger", "availablenow": "--available-now",
                "s3endpoint": "--s3-endpoint"}


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m kcl_mp.spark.job", description=__doc__.split("\n\n")[0])
    read = p.add_mutually_exclusive_group(required=True)
    read.add_argument("--landing", help="read what kcl-mp's sink landed under this root (directory, s3:// or s3a://)")
    read.add_argument("--stream", action="append", metavar="NAME[,NAME...]",
                      help="read Kinesis directly: a stream's name (or ARN); repeat it, or give a comma list, for "
                           "several streams")
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
    when.add_argument("--available-now", action="store_true",
                      help="process what has landed (with --stream: what has arrived), then stop")
    when.add_argument("--processing-time", metavar="INTERVAL", help='run as a stream, e.g. "5 seconds"')
    landing = p.add_argument_group("with --landing")
    landing.add_argument("--max-files-per-trigger", type=int, help="files per micro-batch at most")
    landing.add_argument("--max-rows-per-trigger", type=int, help="rows per micro-batch at most (whole files)")
    landing.add_argument("--clean-source", choices=("off", "delete", "archive"),
                         help="what happens to landed files at or below the committed offsets (default off)")
    landing.add_argument("--archive-dir", help="where cleanSource=archive moves them")
    direct = p.add_argument_group("with --stream")
    direct.add_argument("--endpoint-url", metavar="URL", help="Kinesis's endpoint URL (an emulator, a VPC endpoint)")
    direct.add_argument("--region", help="the streams' region (default: the default chain's)")
    direct.add_argument("--initial-position", metavar="POSITION",
                        help="where a query new to its checkpoint starts: latest (default), trim_horizon (or "
                             'earliest), or JSON: {"at_timestamp": "<ISO-8601 or epoch ms>"} or '
                             '{"at_sequence_number": {"<shardId>": "<sequence number>"}}')
    direct.add_argument("--metadata", metavar="PATH",
                        help="required: where executors record where each batch ended on each shard (a directory or "
                             "s3://bucket/prefix); each output's query gets <metadata>/<format>. One job's own")
    direct.add_argument("--max-records-per-trigger", type=int, metavar="N", help="records per micro-batch at most")
    direct.add_argument("--source-option", action="append", default=[], metavar="KEY=VALUE",
                        help="another option of the kclmp_kinesis source (maxRecordsPerFetch, maxFetchDuration, "
                             "shardsPerTask, ...); repeat it for several")
    p.add_argument("--s3-endpoint", help="an S3 endpoint URL (an emulator): the landing area's or the metadata's, and "
                                         "the output's")
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
    if args.stream is None:
        given = _given(args, ("endpoint_url", "region", "initial_position", "metadata", "max_records_per_trigger",
                              "source_option"))
        if given:
            p.error(f"{', '.join(given)}: options of --stream, not of --landing")
        args.clean_source = args.clean_source or "off"
        return args
    given = _given(args, ("max_files_per_trigger", "max_rows_per_trigger", "clean_source", "archive_dir"))
    if given:
        p.error(f"{', '.join(given)}: options of --landing, not of --stream")
    try:
        args.source_options = direct_options(args)
    except ValueError as error:
        p.error(str(error))
    return args


def _given(args: argparse.Namespace, names: Iterable[str]) -> list[str]:
    """The flags among ``names`` (destinations) that were given."""
    return ["--" + name.replace("_", "-") for name in names if getattr(args, name) not in (None, [])]


def direct_options(args: argparse.Namespace) -> dict[str, str]:
    """The ``kclmp_kinesis`` options of ``--stream``'s flags, less ``metadataPath`` (each
    output's own: :func:`metadata_path`); a ValueError says what is wrong.

    >>> ns = argparse.Namespace(stream=["a,b", "c"], endpoint_url=None, region="eu-west-1",
    ...     initial_position="TRIM_HORIZON", metadata="/m", max_records_per_trigger=None,
    ...     source_option=["shardsPerTask=2"], s3_endpoint=None, available_now=False)
    >>> direct_options(ns)
    {'streamName': 'a,b,c', 'region': 'eu-west-1', 'initialPosition': 'trim_horizon', 'shardsPerTask': '2'}
    """
    if args.metadata is None or not args.metadata.strip():
        raise ValueError("--stream needs --metadata PATH: where the executors record where each batch ended")
    streams = [name.strip() for given in args.stream for name in given.split(",") if name.strip()]
    if not streams:
        raise ValueError(f"--stream names no stream: {args.stream}")
    if len(set(streams)) != len(streams):
        raise ValueError(f"a stream named twice in --stream: {streams}")
    arns = [name for name in streams if name.startswith("arn:")]
    if arns and len(streams) > 1:
        raise ValueError(f"--stream takes one stream ARN, or stream names (one or several): {streams}")
    if args.max_records_per_trigger is not None and args.max_records_per_trigger < 1:
        raise ValueError(f"--max-records-per-trigger takes a number >= 1, not {args.max_records_per_trigger}")
    options = {"streamArn": arns[0]} if arns else {"streamName": ",".join(streams)}
    flags = {"endpointUrl": args.endpoint_url, "region": args.region,
             "initialPosition": None if args.initial_position is None else initial_position(args.initial_position),
             "maxRecordsPerTrigger": args.max_records_per_trigger, "s3Endpoint": args.s3_endpoint,
             "availableNow": "true" if args.available_now else None}  # held to what had arrived (Spark < 4.2)
    options.update({key: str(value) for key, value in flags.items() if value is not None})
    for given in args.source_option:
        key, sep, value = given.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--source-option takes KEY=VALUE, not {given!r}")
        if key.lower() in SET_BY_FLAGS:
            raise ValueError(f"--source-option {key}: set it with {SET_BY_FLAGS[key.lower()]}")
        if key.lower() in {k.lower() for k in options}:
            raise ValueError(f"--source-option {key} given twice")
        options[key] = value
    return options


def initial_position(given: str) -> str:
    """``--initial-position`` as the source takes it: a word in lower case, or the JSON checked
    and written compactly.

    >>> initial_position("Earliest"), initial_position('{"at_timestamp": 1764000000000}')
    ('earliest', '{"at_timestamp":1764000000000}')
    >>> initial_position("now")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: --initial-position: latest, trim_horizon, earliest, or JSON ... not 'now'
    """
    if given.strip().lower() in POSITIONS:
        return given.strip().lower()
    usage = ('--initial-position: latest, trim_horizon, earliest, or JSON {"at_timestamp": "<ISO-8601 or epoch '
             'ms>"} or {"at_sequence_number": {"<shardId>": "<sequence number>"}}, not ' + repr(given))
    try:
        position = json.loads(given)
    except ValueError:
        raise ValueError(usage) from None
    if not isinstance(position, dict) or len(position) != 1:
        raise ValueError(usage)
    ((kind, value),) = position.items()
    if kind == "at_timestamp" and isinstance(value, (str, int)) and not isinstance(value, bool) and str(value):
        return json.dumps(position, separators=(",", ":"))
    if (kind == "at_sequence_number" and isinstance(value, dict) and value
            and all(isinstance(k, str) and isinstance(v, str) and v.isdigit() for k, v in value.items())):
        return json.dumps(position, separators=(",", ":"))
    raise ValueError(usage)


def metadata_path(metadata: str, fmt: str) -> str:
    """The ``metadataPath`` of one output's query: its own, under ``--metadata``.

    >>> metadata_path("s3://bucket/meta/", "delta")
    's3://bucket/meta/delta'
    """
    return f"{metadata.rstrip('/')}/{fmt}"


def main(argv: list[str] | None = None) -> int:
    from pyspark.sql import SparkSession

    from kcl_mp.spark.source import NAME

    args = parse(argv)
    direct = args.stream is not None
    spark = SparkSession.builder.appName("kcl-mp kinesis job" if direct else "kcl-mp landing job").getOrCreate()
    register(spark)
    options: dict[str, Any]
    if direct:
        options = args.source_options
    else:
        options = {"cleanSource": args.clean_source, "maxFilesPerTrigger": args.max_files_per_trigger,
                   "maxRowsPerTrigger": args.max_rows_per_trigger, "sourceArchiveDir": args.archive_dir,
                   "s3Endpoint": args.s3_endpoint,
                   "availableNow": "true" if args.available_now else None}  # held to what had landed (Spark < 4.2)

    def read(more: dict[str, str]) -> Any:
        reader = spark.readStream.format(KINESIS if direct else NAME)  # a reader's options are its own: one each
        for key, value in {**options, **more}.items():
            if value is not None:
                reader = reader.option(key, str(value))
        return reader

    trigger = Trigger(available_now=True) if args.available_now else Trigger(processing_time=args.processing_time)
    catalog = (IcebergCatalog(args.iceberg_catalog_name, json.loads(args.iceberg_catalog))
               if args.iceberg_catalog else None)
    s3 = S3Settings(endpoint=args.s3_endpoint, path_style=True) if args.s3_endpoint else None

    def start(fmt: str, table: str) -> Any:
        checkpoint = args.checkpoint if len(args.outputs) == 1 else f"{args.checkpoint}/{fmt}"
        if direct:  # each query its own metadata: two queries sharing one would read each other's batch ends
            rows = read({"metadataPath": metadata_path(args.metadata, fmt)}).load()
        else:
            rows = read({}).load(args.landing)
        return write_stream(rows, fmt, table, checkpoint, trigger,
                            query_name=f"{KINESIS if direct else NAME}_{fmt}", iceberg=catalog, s3=s3)

    # availableNow: one output after another; a stream: side by side, each started once the
    # others' sources exist (two Python-source queries starting together can corrupt Spark's
    # map of the source's settings: Queries.run_together)
    queries = Queries({fmt: partial(start, fmt, table) for fmt, table in args.outputs},
                      RestartPolicy(args.restarts, args.restart_pause))
    try:
        if args.available_now:
            queries.run_one_by_one()
        else:
            queries.run_together(spark.streams.awaitAnyTermination, spark.streams.resetTerminated,
                                 settle_s=SETTLE_S)
    finally:
        queries.stop()
    for query in queries.finished.values():
        rows = sum(p.get("numInputRows", 0) for p in query.recentProgress)
        print(f"{query.name}: {len(query.recentProgress)} micro-batches, {rows} rows", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

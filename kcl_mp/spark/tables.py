"""Parquet, Delta Lake and Iceberg as outputs of a streaming DataFrame, exactly once through
kills of the Spark job: ``write_stream(df, fmt, path, checkpoint, trigger) -> StreamingQuery``.

Spark replays a micro-batch it had not committed with the same batch id and the same
input (its offset log), so an output is exactly once when writing a batch twice leaves one
copy. Each format gets that from its own log:

- ``parquet``: Spark's file sink; its ``_spark_metadata`` log names the committed files
  (Spark reads through it; Athena, Trino and pyarrow do not: use a table format for them).
- ``delta`` (route ``python``, the default): ``foreachBatch`` into delta-rs. Each commit
  carries an app transaction ``(query id, batch id)``; a batch whose id is at or below the
  table's recorded version for that query was committed before the kill and is skipped.
- ``iceberg`` (route ``python``): ``foreachBatch`` into pyiceberg. Each append's snapshot
  summary holds ``kcl-mp.query-id`` and ``kcl-mp.batch-id``; a batch at or below the newest
  such snapshot of the table's history is skipped.
- route ``native``: Spark's own Delta or Iceberg sink (delta-spark, iceberg-spark-runtime on
  the session's jars), exactly once by their own transaction logs.

The query id is the checkpoint's (``<checkpoint>/metadata``): it survives restarts from
that checkpoint, and a new checkpoint, whose batch ids start at 0 again, gets a new one,
so its batches are never taken for replays.

Why ``python`` is the default route: it needs no jars (delta-spark and the Iceberg runtime
are built per Spark minor version and lag it: on PySpark 4.3.0 the newest published,
delta-spark_4.2 4.4.0 and iceberg-spark-runtime-4.1 1.12.0, fail with NoSuchMethodError /
IncompatibleClassChangeError), and the same code runs on every Spark 4.x. Its cost: each
micro-batch is collected to the driver as Arrow (``DataFrame.toArrow``), so batch sizes
must be bounded by the source's admission control (``maxFilesPerTrigger`` or rows).

Example::

    query = write_stream(events, "iceberg", "landing.events", "s3a://bucket/checkpoints/events",
                         Trigger(available_now=True),
                         iceberg=IcebergCatalog("glue", {"type": "glue"}))
    query.awaitTermination()
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from kcl_mp.spark.checkpoint import clear_interrupted_start

if TYPE_CHECKING:
    from pyiceberg.table import Table as IcebergTable
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming import StreamingQuery

QUERY_ID = "kcl-mp.query-id"
BATCH_ID = "kcl-mp.batch-id"


class Format(str, Enum):
    PARQUET = "parquet"
    DELTA = "delta"
    ICEBERG = "iceberg"


class Route(str, Enum):
    """How a table format is written: ``python`` (foreachBatch into delta-rs / pyiceberg,
    no jars) or ``native`` (Spark's own sink from the format's jars)."""

    PYTHON = "python"
    NATIVE = "native"


@dataclass(frozen=True)
class Trigger:
    """One of Spark's triggers: ``Trigger(available_now=True)`` (what is there, then stop)
    or ``Trigger(processing_time="5 seconds")``."""

    available_now: bool = False
    processing_time: str | None = None

    def __post_init__(self) -> None:
        if self.available_now == (self.processing_time is not None):
            raise ValueError(f"a trigger is available_now or a processing_time, exactly one: {self}")

    def spark_kwargs(self) -> dict[str, Any]:
        return {"availableNow": True} if self.available_now else {"processingTime": self.processing_time}


@dataclass(frozen=True)
class IcebergCatalog:
    """The Iceberg catalog a table lives in: its name and the properties pyiceberg's
    ``load_catalog`` takes (``{"type": "sql", "uri": "sqlite:///...", "warehouse": "..."}``,
    ``{"type": "glue"}``, ``{"type": "rest", "uri": ...}``). On the native route the name is
    the Spark catalog's (``spark.sql.catalog.<name>``), configured on the session."""

    name: str
    properties: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "properties", MappingProxyType(dict(self.properties)))


@dataclass(frozen=True)
class S3Settings:
    """S3 (or an S3 emulator) for every writer of a pipeline, in one place: Spark's S3A
    (``spark_conf()``, for ``s3a://`` paths) and delta-rs / pyiceberg (``storage_options()``,
    ``iceberg_properties()``, for the same objects as ``s3://``).

    ``endpoint`` None is AWS itself; ``path_style`` for emulators and dotted bucket names;
    credentials come from the default chain (environment, profile, instance or pod role)
    unless ``credentials_provider`` names another S3A provider class.
    """

    region: str = "us-east-1"
    endpoint: str | None = None
    path_style: bool = False
    credentials_provider: str = "software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider"

    def spark_conf(self) -> dict[str, str]:
        """``spark.hadoop.fs.s3a.*`` settings, for ``SparkSession.builder.config`` or spark-submit's ``--conf``."""
        conf = {
            "spark.hadoop.fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
            "spark.hadoop.fs.s3a.endpoint.region": self.region,
            "spark.hadoop.fs.s3a.path.style.access": str(self.path_style).lower(),
            "spark.hadoop.fs.s3a.aws.credentials.provider": self.credentials_provider,
        }
        if self.endpoint is not None:
            conf["spark.hadoop.fs.s3a.endpoint"] = self.endpoint
            conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(self.endpoint.startswith("https")).lower()
        return conf

    def storage_options(self) -> dict[str, str]:
        """delta-rs's ``storage_options`` (credentials from the same default chain)."""
        options = {"AWS_REGION": self.region, "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": str(not self.path_style).lower()}
        if self.endpoint is not None:
            options["AWS_ENDPOINT_URL"] = self.endpoint
            options["AWS_ALLOW_HTTP"] = str(self.endpoint.startswith("http:")).lower()
        return options

    def iceberg_properties(self) -> dict[str, str]:
        """pyiceberg's FileIO properties for a catalog whose warehouse is on S3."""
        props = {"s3.region": self.region}
        if self.endpoint is not None:
            props["s3.endpoint"] = self.endpoint
        if self.path_style:
            props["s3.force-virtual-addressing"] = "false"
        return props


def object_store_uri(path: str) -> str:
    """A path as delta-rs and pyiceberg name it: Hadoop's ``s3a://`` is their ``s3://``.

    >>> object_store_uri("s3a://bucket/tables/events")
    's3://bucket/tables/events'
    """
    return "s3://" + path.removeprefix("s3a://") if path.startswith("s3a://") else path


def replayed(recorded: int | None, batch_id: int) -> bool:
    """Whether a batch was committed before: its id is at or below the last one the table
    recorded for this query (batch ids of one checkpoint only grow).

    >>> replayed(None, 0), replayed(3, 3), replayed(3, 4)
    (False, True, False)
    """
    return recorded is not None and batch_id <= recorded


def write_stream(df: DataFrame, fmt: Format | str, path: str, checkpoint: str, trigger: Trigger, *,
                 route: Route | str = Route.PYTHON, query_name: str | None = None,
                 iceberg: IcebergCatalog | None = None, s3: S3Settings | None = None) -> StreamingQuery:
    """Start writing ``df`` to ``path`` in ``fmt``, checkpointed at ``checkpoint``.

    ``path`` is a directory (``/data/events``, ``s3a://bucket/events``) for parquet and delta,
    and a table identifier (``namespace.table``) in ``iceberg``'s catalog for iceberg; the
    python route creates a missing Delta or Iceberg table with the batch's schema. ``s3``
    gives delta-rs and pyiceberg the S3 settings Spark has from ``S3Settings.spark_conf``.

    ``Trigger(available_now=True)`` on PySpark 4.0 and 4.1, whose availableNow runs one batch
    (only the pending replay when there is one) for a Python source: the query runs on a
    processing-time trigger and is stopped at the first trigger that finds nothing new. Read
    ``kclmp_landing`` with option ``availableNow`` = ``true`` so that is what had landed at
    the start (without it, the run ends when the landing area is caught up).

    A checkpoint a kill left before its first batch was logged is cleared of the temporary
    files Spark 4.3+ would refuse to start on (``checkpoint.clear_interrupted_start``).
    """
    from kcl_mp.spark.source import NATIVE_AVAILABLE_NOW

    fmt, route = Format(fmt), Route(route)
    clear_interrupted_start(df.sparkSession, checkpoint)
    emulated = trigger.available_now and not NATIVE_AVAILABLE_NOW
    spark_trigger = Trigger(processing_time="0 seconds") if emulated else trigger
    writer = df.writeStream.option("checkpointLocation", checkpoint).trigger(**spark_trigger.spark_kwargs())
    if query_name is not None:
        writer = writer.queryName(query_name)
    if fmt is Format.ICEBERG and iceberg is None:
        raise ValueError(f"the iceberg output {path!r} needs its catalog (iceberg=IcebergCatalog(...))")
    query = _start(writer, fmt, route, path, checkpoint, iceberg, s3 or S3Settings())
    if emulated:
        threading.Thread(target=_stop_once_caught_up, args=(query,), name=f"caught-up {path}", daemon=True).start()
    return query


def _start(writer: Any, fmt: Format, route: Route, path: str, checkpoint: str, iceberg: IcebergCatalog | None,
           s3: S3Settings) -> StreamingQuery:
    if fmt is Format.PARQUET:
        return writer.format("parquet").start(path)
    if route is Route.NATIVE:
        if fmt is Format.DELTA:
            return writer.format("delta").outputMode("append").start(path)
        assert iceberg is not None
        return writer.format("iceberg").outputMode("append").toTable(f"{iceberg.name}.{path}")
    if fmt is Format.DELTA:
        return writer.foreachBatch(_delta_batches(object_store_uri(path), checkpoint, s3)).start()
    assert iceberg is not None
    return writer.foreachBatch(_iceberg_batches(iceberg, path, checkpoint, s3)).start()


WAITING_FOR_DATA = "Waiting for data to arrive"  # Spark's status after a trigger that found nothing new


def caught_up(status: Mapping[str, Any]) -> bool:
    """Whether a query's last trigger found nothing new and none runs now (``query.status``):
    an emulated availableNow run is done (a pending replay ran first: Spark runs it before it
    plans anything).

    >>> caught_up({"message": "Waiting for data to arrive", "isDataAvailable": False, "isTriggerActive": False})
    True
    >>> caught_up({"message": "Initializing sources", "isDataAvailable": False, "isTriggerActive": False})
    False
    >>> caught_up({"message": "Waiting for next trigger", "isDataAvailable": False, "isTriggerActive": False})
    False
    """
    return (status.get("message") == WAITING_FOR_DATA and not status.get("isDataAvailable")
            and not status.get("isTriggerActive"))


def _stop_once_caught_up(query: StreamingQuery, poll_s: float = 0.2) -> None:
    """availableNow on Spark < 4.2: stop the query at the first trigger that finds nothing new."""
    try:
        while query.isActive:
            if caught_up(query.status):
                query.stop()
                return
            time.sleep(poll_s)
    except Exception:  # noqa: BLE001 (the query or its session ended under us: nothing left to stop)
        return


def _query_id(batch: DataFrame, checkpoint: str) -> str:
    """The id in ``<checkpoint>/metadata``, read through Spark (so s3a:// works)."""
    (line,) = batch.sparkSession.read.text(f"{checkpoint}/metadata").take(1)
    return str(json.loads(line[0])["id"])


def _delta_batches(uri: str, checkpoint: str, s3: S3Settings) -> Callable[[DataFrame, int], None]:
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
    from deltalake.exceptions import TableNotFoundError

    options = s3.storage_options() if uri.startswith("s3://") else None
    ids: list[str] = []

    def write(batch: DataFrame, batch_id: int) -> None:
        if not ids:
            ids.append(_query_id(batch, checkpoint))
        try:
            recorded = DeltaTable(uri, storage_options=options).transaction_version(ids[0])
        except TableNotFoundError:
            recorded = None
        if replayed(recorded, batch_id):
            return
        rows = batch.toArrow()
        if rows.num_rows == 0:
            return
        write_deltalake(uri, rows, mode="append", storage_options=options,
                        commit_properties=CommitProperties(app_transactions=[Transaction(ids[0], batch_id)]))

    return write


def _iceberg_batches(catalog: IcebergCatalog, identifier: str, checkpoint: str,
                     s3: S3Settings) -> Callable[[DataFrame, int], None]:
    from pyiceberg.catalog import load_catalog
    from pyiceberg.exceptions import NoSuchTableError

    # loaded here, once: a catalog that cannot load fails the start, not each batch (foreachBatch
    # runs in this process, so the catalog's connections serve every batch)
    store = load_catalog(catalog.name, **{**s3.iceberg_properties(), **catalog.properties})
    ids: list[str] = []

    def write(batch: DataFrame, batch_id: int) -> None:
        if not ids:
            ids.append(_query_id(batch, checkpoint))
        try:
            table: IcebergTable | None = store.load_table(identifier)
        except NoSuchTableError:
            table = None
        if table is not None and replayed(_iceberg_recorded(table, ids[0]), batch_id):
            return
        rows = batch.toArrow()
        if rows.num_rows == 0:
            return
        if table is None:
            store.create_namespace_if_not_exists(identifier.rsplit(".", 1)[0])
            table = store.create_table(identifier, schema=rows.schema)
        table.append(rows, snapshot_properties={QUERY_ID: ids[0], BATCH_ID: str(batch_id)})

    return write


def _iceberg_recorded(table: IcebergTable, query_id: str) -> int | None:
    """The newest batch id this query appended, walking the current snapshot's ancestry."""
    from pyiceberg.table.snapshots import ancestors_of

    for snapshot in ancestors_of(table.current_snapshot(), table.metadata):
        summary = snapshot.summary
        if summary is not None and summary.get(QUERY_ID) == query_id:
            return int(str(summary[BATCH_ID]))
    return None

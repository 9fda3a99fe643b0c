"""``kclmp_kinesis``: a Spark Python data source (streaming and batch) that reads Kinesis
itself, exactly once, with no DynamoDB, no kcl-mp daemon and no jars.

    kcl_mp.spark.register(spark)
    df = (spark.readStream.format("kclmp_kinesis").option("streamName", "events")
          .option("region", "eu-west-1").option("initialPosition", "trim_horizon")
          .option("metadataPath", "s3://bucket/kinesis-meta/events").load())

Options: :mod:`kcl_mp.spark.kinesis_options` (Databricks' Kinesis names where they exist).

Columns: ``partitionKey, data, stream, shardId, sequenceNumber, subSequenceNumber,
approximateArrivalTimestamp``.

How it is exactly once: offsets and the planning rule are :mod:`kcl_mp.spark.kinesis_plan`'s
(epochs, lineage); executors read and record each batch's end per shard in ``metadataPath``
(:mod:`kcl_mp.spark.kinesis_read`), so a replayed batch, a retried task or a speculative
twin reads the same records. Where it runs: ``initialOffset``, ``latestOffset``,
``partitions`` and ``commit`` in one Python process the driver's JVM keeps (the shard listing,
the manifests read and idle shards' iterators are cached there); ``read`` on executors.

Planning costs, per trigger: one ListShards page per 1,000 shards and stream; per shard that
may move, one GetRecords (Limit 1) with the iterator the last probe left when the shard was
idle (a GetShardIterator first otherwise), PROBE_THREADS at a time; reading a manifest per
shard that moved in the last batch. An idle shard writes nothing, and is probed at most once
a second (:func:`kcl_mp.spark.kinesis_plan.probe_order`). After PROBE_BUDGET_S a trigger starts
no more probes of idle shards (past one wave of PROBE_THREADS): with more idle shards than that
covers (about 300 at 20 ms a call), each trigger probes the least recently probed ones and the
rest go first next time, so planning stays bounded and a shard that wakes is found a few
triggers later (1,000 idle shards: every 4 s at most, bench/spark_kinesis.py planning). Shards not
known to be idle (they moved, or were never probed) are all probed every trigger, and under
availableNow every shard is (a run ends at the first trigger that finds nothing).
``commit(end)`` deletes the manifests of earlier epochs of the shards that moved (Spark commits
batch N when it plans N+1, so nothing a replay needs goes).

Admission control: on Spark >= 4.2 ``getDefaultReadLimit`` (``maxRecordsPerTrigger``) and
``latestOffset(start, limit)``, and ``Trigger.AvailableNow`` through
``SupportsTriggerAvailableNow``: the run reads what arrived before it started, in capped
batches. On 4.0 and 4.1 Spark calls ``latestOffset()`` without a start: the reader plans from
the last end it planned or was told (``partitions``), and option ``availableNow`` holds a
processing-time run to what had arrived at its first plan (:func:`kcl_mp.spark.tables.write_stream`
stops it at the first trigger that finds nothing).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

import orjson
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition

from kcl_mp.retrieval import kinesis_shards
from kcl_mp.retrieval.fanout import active_consumer
from kcl_mp.retrieval.stream import IteratorExpired
from kcl_mp.spark.kinesis_options import NAME, Options
from kcl_mp.spark.kinesis_plan import (
    Listed,
    Manifest,
    Probe,
    admit,
    check_offset,
    initial_offset,
    next_offset,
    probe_order,
    resolve,
    shard_key,
    split_key,
)
from kcl_mp.spark.kinesis_read import (
    Shard,
    ShardTake,
    fetch,
    manifest_dir,
    manifest_name,
    read_manifest,
    read_takes,
)
from kcl_mp.spark.kinesis_rows import SCHEMA, arrival_ms, rows
from kcl_mp.spark.storage import Storage

limits: Any
try:  # Spark >= 4.2: admission control and availableNow for Python sources
    from pyspark.sql.streaming import datasource as limits
except ImportError:  # PySpark 4.0 / 4.1
    limits = None
AvailableNow: Any = limits.SupportsTriggerAvailableNow if limits is not None else object

PROBE_THREADS = 64
PROBE_BUDGET_S = 0.8  # a trigger starts no probe of an idle shard after this long (not under availableNow)
PROBE_HOPS = 4  # empty pages a probe follows while Kinesis says records lie further on
ITERATOR_REUSE_S = 240.0  # an idle shard's iterator from the last probe (Kinesis keeps one 5 minutes)
FULL_RANGE = (0, 2**128 - 1)
log = logging.getLogger("kcl_mp.spark.kinesis")


@dataclass(frozen=True)
class TaskRead(InputPartition):
    """One Spark task's shards of a batch."""

    takes: tuple[ShardTake, ...]


def metadata_storage(options: Options) -> Storage:
    """Where the manifests are: one ``Storage`` (and S3 client) a process, not one a task."""
    if options.metadata is None:
        raise ValueError(f"{NAME}: a stream needs option metadataPath (a directory or s3://bucket/prefix, one "
                         "per query, kept with its checkpoint), where executors record where each batch ends")
    key = (options.metadata, options.s3_endpoint)
    if key not in _STORAGES:
        _STORAGES[key] = Storage(*key)
    return _STORAGES[key]


_STORAGES: dict[tuple[str, str | None], Storage] = {}


def _now_ms() -> int:
    return round(time.time() * 1000)


@dataclass
class Planner:
    """Lists, probes and plans (the I/O around :mod:`kcl_mp.spark.kinesis_plan`)."""

    options: Options
    ranges: dict[str, tuple[int, int]] = field(default_factory=dict)  # by shard key, from the last listing
    consumers: dict[str, str] = field(default_factory=dict)  # enhanced fan-out: each stream's consumer ARN
    manifests: dict[tuple[str, int], Manifest] = field(default_factory=dict)
    idle: dict[str, tuple[bytes, str, float]] = field(default_factory=dict)  # key -> (position, iterator, when)
    probed: dict[str, float] = field(default_factory=dict)  # key -> when its last probe started (monotonic)

    def __post_init__(self) -> None:
        self.kinesis = self.options.connection.kinesis()
        self.pool = ThreadPoolExecutor(PROBE_THREADS, thread_name_prefix="kclmp-probe")
        self.storage = metadata_storage(self.options) if self.options.metadata else None

    def listed(self, since: int | None) -> list[Listed]:
        """Every stream's shards (those open at ``since`` or later, when given: ListShards'
        FROM_TIMESTAMP filter; its AT_TIMESTAMP lists only the shards open *at* the time, never
        the children of a split or merge made after it)."""
        shard_filter = {"Type": "FROM_TIMESTAMP", "Timestamp": datetime.fromtimestamp(since / 1000, tz=timezone.utc)} \
            if since is not None else None
        out = []
        for stream, shards in zip(self.options.streams, self.pool.map(
                lambda s: kinesis_shards.list_shards(self.kinesis, s, shard_filter,
                                                     s if s.startswith("arn:") else None), self.options.streams)):
            for shard in shards:
                key = shard_key(stream, shard.shard_id)
                self.ranges[key] = shard.hash_range
                out.append(Listed(key, tuple(shard_key(stream, p) for p in shard.parent_shard_ids), shard.hash_range))
        return out

    def consumer(self, stream: str) -> str | None:
        """Enhanced fan-out: the stream's ACTIVE consumer, registered if missing (once a planner)."""
        if not self.options.fan_out:
            return None
        if stream not in self.consumers:
            stream_arn = stream if stream.startswith("arn:") else \
                self.kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamARN"]
            self.consumers[stream] = active_consumer(self.kinesis, stream_arn, self.options.consumer_arn,
                                                     self.options.consumer_name, log)
        return self.consumers[stream]

    def initial(self) -> dict[str, Any]:
        initial = self.options.initial
        if initial.kind == "TRIM_HORIZON":
            return initial_offset(self.listed(None), {"at": "TRIM_HORIZON"}, None)
        if initial.kind == "AT_SEQUENCE_NUMBER":
            return initial_offset(self.listed(None), {"at": "TRIM_HORIZON"}, None, dict(initial.sequence_numbers))
        since = initial.ts if initial.kind == "AT_TIMESTAMP" else _now_ms()  # LATEST: now, kept in the offset
        return initial_offset(self.listed(since), {"at": "AT_TIMESTAMP", "ts": since}, since)

    def resolved(self, offset: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        epoch = int(offset["epoch"])
        missing = [key for key in offset["active"] if (key, epoch) not in self.manifests]
        if missing:
            storage = self._storage()
            for key, manifest in zip(missing, self.pool.map(
                    lambda k: read_manifest(storage, manifest_name(*split_key(k), epoch)), missing)):
                if manifest is None:
                    raise RuntimeError(f"{NAME}: batch {epoch} read {key}, but its manifest "
                                       f"{storage.location(manifest_name(*split_key(key), epoch))} is missing: "
                                       "metadataPath must stay with the query's checkpoint")
                self.manifests[(key, epoch)] = Manifest(manifest["end"], bool(manifest["ended"]))
        return resolve(offset, {key: self.manifests[(key, epoch)] for key in offset["active"]})

    def probe(self, key: str, pos: Mapping[str, Any]) -> Probe:
        shard = Shard(self.kinesis, *split_key(key))
        self.probed[key] = time.monotonic()
        pos_id = orjson.dumps(pos, option=orjson.OPT_SORT_KEYS)
        cached = self.idle.pop(key, None)
        iterator = cached[1] if cached and cached[0] == pos_id and time.monotonic() - cached[2] < ITERATOR_REUSE_S \
            else None
        for _ in range(PROBE_HOPS + 1):
            current = iterator if iterator is not None else shard.iterator(pos)
            try:
                page = shard.page(current, 1)
            except IteratorExpired:
                iterator = None
                continue
            records = page.get("Records") or []
            if records:
                return Probe(record_arrival_ms=arrival_ms(records[0]))
            iterator = page.get("NextShardIterator")
            if iterator is None:
                return Probe(at_end=True)
            if not page.get("MillisBehindLatest"):
                self.idle[key] = (pos_id, iterator, time.monotonic())
                return Probe()
        if iterator is not None:
            self.idle[key] = (pos_id, iterator, time.monotonic())
        return Probe(behind=True)

    def plan(self, start: Mapping[str, Any], max_rows: int | None, until: int | None) -> dict[str, Any]:
        check_offset(start)
        shards, ready = admit(self.resolved(start), self.listed(start.get("since")))
        defer = until is None
        began = time.monotonic()
        order = probe_order(ready, self.probed, self.idle.keys(), began, defer)
        busy = sum(1 for key in order if key not in self.idle)
        probes = self.probe_within(order, shards, busy, began + PROBE_BUDGET_S if defer else None)
        if len(probes) < len(order):
            log.debug("%s: probed %d of %d idle shards in %.2f s; the other %d go first next trigger", NAME,
                      len(probes) - busy, len(order) - busy, time.monotonic() - began, len(order) - len(probes))
        moving = [key for key, probe in probes.items() if probe.moves(until)]
        return next_offset(start, shards, moving, max_rows, until, [k for k, p in probes.items() if p.at_end])

    def probe_within(self, order: list[str], shards: Mapping[str, dict[str, Any]], busy: int,
                     deadline: float | None) -> dict[str, Probe]:
        """Probe the shards in ``order``, PROBE_THREADS at a time: the first ``busy`` (not known
        to be idle) all; of the idle ones after them PROBE_THREADS at least (however long the
        busy took: none waits for ever), more while ``deadline`` has not passed."""
        keys = enumerate(order)
        running: dict[Future[Probe], str] = {}
        found: dict[str, Probe] = {}

        def start_next() -> None:
            n, key = next(keys, (len(order), None))
            if key is not None and (n < busy + PROBE_THREADS or deadline is None or time.monotonic() < deadline):
                running[self.pool.submit(self.probe, key, shards[key]["pos"])] = key

        for _ in range(PROBE_THREADS):
            start_next()
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                found[running.pop(future)] = future.result()
                start_next()
        return found

    def partitions(self, end: Mapping[str, Any]) -> list[TaskRead]:
        check_offset(end)
        if any(key not in self.ranges for key in end["active"]):
            self.listed(end.get("since"))
        takes = [ShardTake(*split_key(key), self.ranges.get(key, FULL_RANGE), end["shards"][key]["pos"],
                           int(end["epoch"]), end.get("cap"), end.get("until"),
                           None if key in end.get("closing", ()) else self.consumer(split_key(key)[0]))
                 for key in end["active"]]
        per = self.options.shards_per_task
        return [TaskRead(tuple(takes[i:i + per])) for i in range(0, len(takes), per)]

    def purge(self, end: Mapping[str, Any]) -> None:
        """Delete the manifests of the moved shards' epochs before ``end``'s."""
        storage = self._storage()
        epoch = int(end["epoch"])

        def purge_shard(key: str) -> None:
            folder = manifest_dir(*split_key(key))
            for name in storage.names(folder):
                if name.endswith(".json") and name[:-5].isdigit() and int(name[:-5]) < epoch:
                    storage.remove(f"{folder}/{name}")

        list(self.pool.map(purge_shard, end["active"]))
        for cached in [k for k in self.manifests if k[1] < epoch]:
            del self.manifests[cached]

    def _storage(self) -> Storage:
        return self.storage if self.storage is not None else metadata_storage(self.options)


class KinesisStreamReader(DataSourceStreamReader, AvailableNow):
    def __init__(self, options: Options):
        self.options = options
        metadata_storage(options)  # the option is checked before the query starts
        self.planner = Planner(options)
        self.first: dict[str, Any] | None = None
        self.last_end: dict[str, Any] | None = None  # for Spark < 4.2, whose latestOffset() has no start
        self.until: int | None = None
        self.freeze = options.available_now  # Spark >= 4.2 sets it in prepareForTriggerAvailableNow

    def initialOffset(self) -> dict[str, Any]:
        if self.first is None:
            self.first = self.planner.initial()
        return self.first

    def getDefaultReadLimit(self) -> Any:
        if self.options.max_rows is not None:
            return limits.ReadMaxRows(self.options.max_rows)
        return limits.ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.freeze = True

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        max_rows = self.options.max_rows
        if start is None:  # Spark 4.0 / 4.1
            start = self.last_end if self.last_end is not None else self.initialOffset()
        elif limits is not None and isinstance(limit, limits.ReadAllAvailable):
            max_rows = None
        elif limits is not None and isinstance(limit, limits.ReadMaxRows):
            max_rows = limit.max_rows
        if self.freeze and self.until is None:
            self.until = _now_ms()
        end = self.planner.plan(start, max_rows, self.until)
        self.last_end = end
        return end

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[TaskRead]:
        self.last_end = end
        if start == end:
            return []
        return self.planner.partitions(end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, TaskRead)
        kinesis = self.options.connection.kinesis()
        storage = metadata_storage(self.options)
        yield from read_takes(kinesis, storage, partition.takes, self.options.read)

    def commit(self, end: dict[str, Any]) -> None:
        self.planner.purge(end)

    def __getstate__(self) -> dict[str, Any]:
        """What executors get: the options (the planner's clients and threads stay on the driver)."""
        return {"options": self.options}


class KinesisBatchReader(DataSourceReader):
    """What the streams hold from the initial position to when the read was planned."""

    def __init__(self, options: Options):
        self.options = options

    def partitions(self) -> list[TaskRead]:
        if self.options.initial.kind == "LATEST":
            return []  # nothing has arrived after now yet
        planner = Planner(self.options)
        first = planner.initial()
        until = _now_ms()
        takes = [ShardTake(*split_key(key), planner.ranges.get(key, FULL_RANGE), entry["pos"], 0, None, until,
                           planner.consumer(split_key(key)[0])) for key, entry in sorted(first["shards"].items())]
        per = self.options.shards_per_task
        return [TaskRead(tuple(takes[i:i + per])) for i in range(0, len(takes), per)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, TaskRead)
        kinesis = self.options.connection.kinesis()
        limits_ = replace(self.options.read, fetch_duration_s=3600.0)  # to the time the read was planned
        for take in partition.takes:
            yield from rows(take, fetch(Shard(kinesis, take.stream, take.shard_id), take, limits_).records)


class KinesisSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: Any) -> KinesisBatchReader:
        return KinesisBatchReader(Options.parse(dict(self.options)))

    def streamReader(self, schema: Any) -> KinesisStreamReader:
        return KinesisStreamReader(Options.parse(dict(self.options)))

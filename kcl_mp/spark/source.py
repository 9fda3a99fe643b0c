"""``kclmp_landing``: a Spark Python data source (streaming and batch) over the sink's landing
area, exactly once by construction: no watermark, no dedup state.

    kcl_mp.spark.register(spark)
    df = spark.readStream.format("kclmp_landing").option("maxFilesPerTrigger", 100).load("s3://bucket/landing")

Options: ``path`` (the landing root: a directory, ``file://``, ``s3://`` or ``s3a://``),
``s3Endpoint`` (an S3 endpoint URL, for an emulator), ``maxFilesPerTrigger`` and
``maxRowsPerTrigger`` (whole files: a batch takes at least one file per shard that has one),
``cleanSource`` (``off``, ``delete`` or ``archive``), ``sourceArchiveDir`` (for archive) and
``availableNow`` (``true``: plan nothing past what had landed at the first plan; for Spark < 4.2).

Offsets are per shard, ``{"<stream>/<shard>": {"seq", "sub", "key", "ended", "hold", "takes"}}``:
the last position emitted (``seq`` "" before anything), the name the next listing starts after,
whether the shard's last file was emitted, for a shard that appeared while the query ran the
positions it waits for (lineage: :func:`kcl_mp.spark.layout.admitted`), and the files the batch
that moved the shard to this position read, with the position each is read after. A shard
that does not move keeps its entry as it was, so an idle trigger returns ``start`` and runs no
batch. ``partitions(start, end)``
reads exactly those files, bounded by ``start``: a batch replayed after a kill (Spark replays
it from its offset log without planning again) emits the same rows.

Lineage: a shard that appears while the query runs (a split's or a merge's child) is read only
from a batch after the one that emitted what every shard known before had landed when it
appeared, its parents' last rows included (the KCL starts a child only once its parents are
checkpointed at SHARD_END, which the sink does after their last file). The parents are not
named in the landing area (amazon_kclpy does not tell a processor), so the child waits for all
the shards known before it: a child costs a batch or two of latency. Shards already landed
when a query first starts are read from their first files together, in no order across shards.

A gap (a file that continues from later than anything emitted: its predecessor has not
landed) is waited for, with a WARNING naming the shard and both positions at every trigger;
nothing past it is emitted.

Where it runs: ``latestOffset``, ``partitions`` and ``commit`` in one Python process the
driver's JVM keeps (the footer cache lives there); ``read`` on executors, from the pickled
partition. ``commit(end)`` lags a batch (Spark commits batch N when it plans N+1), so with
``cleanSource`` files at or below the committed offsets go within two batches; a
``cleanSource`` landing area must have this one reader.

Admission control: on Spark >= 4.2 ``getDefaultReadLimit`` and ``latestOffset(start, limit)``
(with ``Trigger.AvailableNow`` through ``SupportsTriggerAvailableNow``: a run stops at what
had landed when it started, in capped batches). On 4.0 and 4.1 Spark calls ``latestOffset()``
without a start: the reader caps from the last end it planned or was told (Spark tells a
restarted query's reader its last offset through ``AcceptsLatestSeenOffset``, which calls
``partitions(latest, latest)``). Their availableNow falls back to one batch, and to the
replay alone when a batch is pending (what landed since is left unread): there, option
``availableNow`` = ``true`` holds the reader to what had landed at its first plan, and
:func:`kcl_mp.spark.tables.write_stream` runs the query on a processing-time trigger and
stops it at the first trigger that finds nothing new.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition

from kcl_mp.spark.layout import (
    SEQ_DIGITS,
    Landed,
    Position,
    ShardPlan,
    admitted,
    cleanable,
    format_position,
    landed,
    parse_position,
    plan_shard,
    shard_prefix,
)
from kcl_mp.spark.storage import Storage

limits: Any
try:  # Spark >= 4.2: admission control and availableNow for Python sources
    from pyspark.sql.streaming import datasource as limits
except ImportError:  # PySpark 4.0 / 4.1: the reader caps itself, availableNow runs one batch
    limits = None
AvailableNow: Any = limits.SupportsTriggerAvailableNow if limits is not None else object
NATIVE_AVAILABLE_NOW = limits is not None  # else availableNow is emulated (option availableNow, write_stream)

NAME = "kclmp_landing"
SCHEMA = ("stream string, shardId string, sequenceNumber string, subSequenceNumber bigint, partitionKey string, "
          "approximateArrivalTimestamp timestamp, data binary, ingestTime timestamp")
ARROW = pa.schema([  # what Spark expects of SCHEMA (its timestamps are microseconds)
    ("stream", pa.string()), ("shardId", pa.string()), ("sequenceNumber", pa.string()),
    ("subSequenceNumber", pa.int64()), ("partitionKey", pa.string()),
    ("approximateArrivalTimestamp", pa.timestamp("us", tz="UTC")), ("data", pa.binary()),
    ("ingestTime", pa.timestamp("us", tz="UTC"))])
LISTING_THREADS = 16
MAX_LINEAGE_ROUNDS = 16  # availableNow's target: generations of shards admitted one after another
CLEAN = ("off", "delete", "archive")
log = logging.getLogger("kcl_mp.spark.source")


@dataclass(frozen=True)
class Options:
    """The source's options, parsed once; errors name the option."""

    path: str
    s3_endpoint: str | None
    max_files: int | None
    max_rows: int | None
    clean: str
    archive: str | None
    available_now: bool = False

    @classmethod
    def parse(cls, options: dict[str, str]) -> Options:
        lower = {k.lower(): v for k, v in options.items()}
        if not lower.get("path"):
            raise ValueError(f"{NAME}: no landing path: .load('<directory or s3://bucket/prefix>')")

        def positive(key: str) -> int | None:
            value = lower.get(key.lower())
            if value is None:
                return None
            if not value.isdigit() or int(value) < 1:
                raise ValueError(f"{NAME}: option {key}={value!r} must be a whole number >= 1")
            return int(value)

        clean = lower.get("cleansource", "off").lower()
        if clean not in CLEAN:
            raise ValueError(f"{NAME}: option cleanSource={clean!r} must be one of {', '.join(CLEAN)}")
        archive = lower.get("sourcearchivedir")
        if clean == "archive" and not archive:
            raise ValueError(f"{NAME}: option cleanSource=archive needs sourceArchiveDir")
        available_now = lower.get("availablenow", "false").lower()
        if available_now not in ("true", "false"):
            raise ValueError(f"{NAME}: option availableNow={available_now!r} must be true or false")
        return cls(lower["path"], lower.get("s3endpoint"), positive("maxFilesPerTrigger"),
                   positive("maxRowsPerTrigger"), clean, archive, available_now == "true")


@dataclass(frozen=True)
class ShardRead(InputPartition):
    """One shard's part of a batch: its files, each read after a position."""

    prefix: str
    takes: tuple[tuple[str, Position | None], ...]


def _position(entry: dict[str, Any]) -> Position | None:
    return (int(entry["seq"]), int(entry["sub"])) if entry.get("seq") else None


def _entry(plan: ShardPlan, previous: dict[str, Any]) -> dict[str, Any]:
    """A shard's end offset (a hold is dropped once admitted: admission never reverts)."""
    covered = plan.covered
    return {"seq": str(covered[0]) if covered else "", "sub": covered[1] if covered else 0,
            "key": plan.start_after, "ended": bool(previous.get("ended")) or plan.ended,
            "takes": [[name, format_position(after) if after else ""] for name, after in
                      ((t.name, t.after) for t in plan.takes)]}


def read_rows(storage: Storage, part: ShardRead) -> Iterator[pa.RecordBatch]:
    """The rows of each file after its position: Arrow, compared as zero-padded strings."""
    import pyarrow.compute as pc  # here, on executors: the planning process starts faster without it

    for name, after in part.takes:
        table = storage.read_table(part.prefix + name)
        if after is not None:
            padded = pc.utf8_lpad(table.column("sequenceNumber"), SEQ_DIGITS, "0")
            bound = f"{after[0]:0{SEQ_DIGITS}d}"
            keep = pc.or_(pc.greater(padded, bound),
                          pc.and_(pc.equal(padded, bound), pc.greater(table.column("subSequenceNumber"), after[1])))
            table = table.filter(keep)
        yield from table.select(ARROW.names).cast(ARROW).to_batches()


class Planner:
    """Lists the landing area and plans batches (the I/O around :func:`plan_shard`)."""

    def __init__(self, options: Options):
        self.options = options
        self.storage = Storage(options.path, options.s3_endpoint)
        self.footers: dict[str, Landed] = {}  # by relative name: a file is read for its footer once
        self.cleaned: dict[str, Position] = {}  # each shard's position last cleaned up to

    def shards(self) -> list[str]:
        """``<stream>/<shard>`` of every shard that has a directory."""
        return [f"{stream}/{shard}" for stream in self.storage.children("")
                for shard in self.storage.children(f"{stream}/")]

    def listed(self, shard: str, start_after: str, upto: Position | None = None) -> list[Landed]:
        prefix = shard_prefix(*shard.split("/", 1))
        files = []
        for name in self.storage.list_files(prefix, start_after):
            relative = prefix + name
            if relative not in self.footers:
                footer = self.storage.footer(relative)
                self.footers[relative] = landed(name, footer.metadata or {}, footer.num_rows)
            file = self.footers[relative]
            if upto is None or file.last <= upto:
                files.append(file)
        return files

    def plan(self, start: dict[str, Any], max_files: int | None, max_rows: int | None,
             target: dict[str, Position | None] | None = None) -> dict[str, Any]:
        """The next end offset from ``start``. Shards are found first, then each is listed from
        its key, so a shard that appears is seen before its parents' listings (whose last
        files landed before its first). A shard that appears while the query runs (``start``
        knows others) waits for what the others had landed then (``hold``). ``target``:
        availableNow's frozen ends (nothing past them, no shard beyond them). The caps count
        over all shards."""
        end: dict[str, Any] = dict(start)  # a shard that does not move keeps its entry: an idle trigger runs no batch
        found = self.shards()
        emitted = {shard: _position(entry) for shard, entry in start.items()}
        known = [s for s in found if (s in start or not start) and (target is None or target.get(s) is not None)]
        listings = self.list_all({s: (start.get(s, {}).get("key", ""), None if target is None else target[s])
                                  for s in known})
        latest: dict[str, Position] = {}
        files_left, rows_left = max_files, max_rows
        for shard in known:
            previous = start.get(shard, {})
            files = listings[shard]
            last = max((f.last for f in files), default=emitted.get(shard))
            if last is not None:
                latest[shard] = last
            hold = previous.get("hold")
            if (hold and not admitted({k: parse_position(v) for k, v in hold.items()}, emitted)) \
                    or (files_left is not None and files_left < 1) or (rows_left is not None and rows_left < 1):
                continue
            plan = plan_shard(emitted.get(shard), files, previous.get("key", ""), files_left, rows_left)
            if plan.gap is not None:
                log.warning("%s: waiting for a landed file that continues from at or before %s; the next one "
                            "continues from %s (its predecessor has not landed)", shard,
                            format_position(plan.gap.covered) if plan.gap.covered else "the start",
                            format_position(plan.gap.waiting_from))
            if files_left is not None:
                files_left -= len(plan.takes)
            if rows_left is not None:
                rows_left -= sum(self.footers[shard + "/" + t.name].rows for t in plan.takes)
            if plan.takes or (plan.ended and not previous.get("ended")):  # an end marker moves the offset alone
                end[shard] = _entry(plan, previous)
        for shard in found:
            if shard not in start and start and (target is None or shard in target):
                hold = {k: format_position(p) for k, p in latest.items() if k in start}
                end[shard] = {"seq": "", "sub": 0, "key": "", "ended": False, "hold": hold, "takes": []}
        return end

    def list_all(self, shards: dict[str, tuple[str, Position | None]]) -> dict[str, list[Landed]]:
        """Each shard listed from its key (and capped at its target), LISTING_THREADS at a time:
        an idle trigger over a thousand shards costs a thousand LISTs, not their latencies in a row."""
        if self.storage.bucket is not None:
            self.storage.s3  # noqa: B018  (the client, made once before the threads share it)
        with ThreadPoolExecutor(LISTING_THREADS) as pool:
            found = pool.map(lambda item: self.listed(item[0], *item[1]), shards.items())
            return dict(zip(shards, found))

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[ShardRead]:
        parts = []
        for shard, entry in sorted(end.items()):
            lower = _position(start.get(shard, {}))
            if not entry.get("takes") or _position(entry) == lower:
                continue  # the shard did not move in this batch: its takes are an earlier batch's
            takes = []
            for name, after in entry["takes"]:
                bound = parse_position(after) if after else None
                if lower is not None and (bound is None or bound < lower):
                    bound = lower
                takes.append((name, bound))
            parts.append(ShardRead(shard_prefix(*shard.split("/", 1)), tuple(takes)))
        return parts

    def clean(self, end: dict[str, Any]) -> None:
        """Delete or archive the files wholly at or below the committed offsets."""
        if self.options.clean == "off":
            return
        archive = Storage(self.options.archive, self.options.s3_endpoint) if self.options.archive else None
        for shard, entry in end.items():
            covered = _position(entry)
            if covered is None or self.cleaned.get(shard) == covered:
                continue
            self.cleaned[shard] = covered
            prefix = shard_prefix(*shard.split("/", 1))
            for name in cleanable(covered, self.listed(shard, "")):
                if archive is not None:
                    self.storage.archive(prefix + name, archive)
                else:
                    self.storage.remove(prefix + name)
                self.footers.pop(prefix + name, None)


class LandingStreamReader(DataSourceStreamReader, AvailableNow):
    def __init__(self, options: Options):
        self.options = options
        self.planner = Planner(options)
        self.last_end: dict[str, Any] = {}  # for Spark < 4.2, whose latestOffset() has no start
        self.target: dict[str, Position | None] | None = None
        self.freeze = options.available_now  # Spark >= 4.2 sets it in prepareForTriggerAvailableNow

    def initialOffset(self) -> dict[str, Any]:
        return {}

    def getDefaultReadLimit(self) -> Any:
        if self.options.max_files is not None:
            return limits.ReadMaxFiles(self.options.max_files)
        if self.options.max_rows is not None:
            return limits.ReadMaxRows(self.options.max_rows)
        return limits.ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.freeze = True

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        max_files, max_rows = self.options.max_files, self.options.max_rows
        if start is None:  # Spark 4.0 / 4.1: no start given
            start = self.last_end
            if not start:  # a new planning process: only an uncapped plan is sure to end past Spark's start
                max_files = max_rows = None
        elif limits is not None and isinstance(limit, limits.ReadAllAvailable):
            max_files = max_rows = None
        if self.freeze and self.target is None:
            self.target = self.available_now_target(start)
        end = self.planner.plan(start, max_files, max_rows, self.target)
        self.last_end = end
        return end

    def available_now_target(self, start: dict[str, Any]) -> dict[str, Position | None]:
        """What has landed, shard by shard, planned without caps until nothing moves: a shard
        held for its parents' rows is admitted in a later round, as it will be in a later batch."""
        end = start
        for _ in range(MAX_LINEAGE_ROUNDS):
            following = self.planner.plan(end, None, None)
            if [(k, v.get("seq"), v.get("sub")) for k, v in sorted(following.items())] == \
                    [(k, v.get("seq"), v.get("sub")) for k, v in sorted(end.items())]:
                break
            end = following
        return {shard: _position(entry) for shard, entry in end.items()}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[ShardRead]:
        self.last_end = end
        return self.planner.partitions(start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ShardRead)
        return read_rows(self.planner.storage, partition)

    def commit(self, end: dict[str, Any]) -> None:
        self.planner.clean(end)


class LandingBatchReader(DataSourceReader):
    """What has landed, each position once (no limits, no cleaning)."""

    def __init__(self, options: Options):
        self.planner = Planner(options)

    def partitions(self) -> list[ShardRead]:
        return self.planner.partitions({}, self.planner.plan({}, None, None))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ShardRead)
        return read_rows(self.planner.storage, partition)


class LandingSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: Any) -> LandingBatchReader:
        return LandingBatchReader(Options.parse(dict(self.options)))

    def streamReader(self, schema: Any) -> LandingStreamReader:
        return LandingStreamReader(Options.parse(dict(self.options)))

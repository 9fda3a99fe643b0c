"""The ``kclmp_kinesis`` source on an executor: one shard's part of a batch, read once and
replayed the same.

The first reader of a shard's batch decides where it ends: it reads from the batch's
position (GetRecords, or SubscribeToShard with enhanced fan-out) until the shard's tip (a
short page or an event at MillisBehindLatest 0, or an empty page), the batch's share of
``maxRecordsPerTrigger``, availableNow's time, the shard's end, its share of 128 MB (a
task's shards share it; at the end of the page that reaches it, so that the next batch
starts where a GetRecords page does instead of reading the rest of one again) or
``maxFetchDuration``, whichever comes first, at whole Kinesis records. Before it yields a
row it records that end in the shard's manifest for the epoch, created only if absent
(:meth:`Storage.create_bytes`). Whoever comes after (Spark replaying the batch after a
driver kill, a retried task, a speculative twin, or the loser of that race) reads from the
same position to the recorded end: the same records, so the same rows.

A task reads its shards side by side (:func:`read_takes`, a thread each): a shard is read
at most 5 times a second (Kinesis' limit, ``fetch_interval_s``), so one after another the
shards of a task would wait out each other's pauses. Each shard's end is still recorded
before its first row, and the rows come shard by shard in the task's order.

Rows are Arrow batches (:mod:`kcl_mp.spark.kinesis_rows`).
"""

from __future__ import annotations

import logging
import random
import sys
import time
from collections.abc import Generator, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import quote

import orjson
import pyarrow as pa

from kcl_mp.aws.errors import AWS_ERRORS, error_code, translate
from kcl_mp.backoff import Backoff
from kcl_mp.errors import DependencyError, ThrottledError
from kcl_mp.retrieval.deaggregate import is_aggregate, user_record_runs
from kcl_mp.retrieval.stream import IteratorExpired
from kcl_mp.spark.kinesis_rows import arrival_ms, rows
from kcl_mp.spark.storage import Storage

MAX_BATCH_BYTES = 128 * 1024 * 1024  # a task's part of a batch (+ a page a shard), held until its manifests are written
REPLAY_WAIT_S = 300.0  # a replay reads to a recorded end: slower than the first read only when throttled
THROTTLED_TRIES = 12
BACKOFF = Backoff(base_s=0.2, cap_s=5.0)
_EXPIRED = "ExpiredIteratorException"
_IN_USE = "ResourceInUseException"
log = logging.getLogger("kcl_mp.spark.kinesis")


class ReplayError(DependencyError):
    """A batch's recorded records cannot be read again (past the stream's retention)."""

    def __init__(self, message: str):
        super().__init__(message, retriable=False)


@dataclass(frozen=True)
class Connection:
    """How executors and the planner reach Kinesis (picklable; each process makes its client)."""

    region: str | None
    endpoint: str | None
    role_arn: str | None = None
    role_session: str = "kcl-mp-spark"

    def kinesis(self) -> Any:
        made = _CLIENTS.get(self)
        if made is None:
            from kcl_mp.aws.clients import ClientLimits, client
            from kcl_mp.config import ClientSettings, CredentialProvider

            chain = (CredentialProvider("StsAssumeRoleCredentialsProvider", (self.role_arn, self.role_session)),) \
                if self.role_arn else (CredentialProvider("DefaultCredentialsProvider"),)
            made = _CLIENTS[self] = client("kinesis", ClientSettings(self.region, self.endpoint, chain),
                                           raw_records=True, limits=ClientLimits(max_pool_connections=64))
        return made


_CLIENTS: dict[Connection, Any] = {}


@dataclass(frozen=True)
class ReadLimits:
    records_per_fetch: int = 10_000  # GetRecords' Limit
    fetch_duration_s: float = 10.0  # how long a shard's first read of a batch may go on
    fetch_interval_s: float = 0.2  # between a shard's GetRecords: Kinesis allows 5 a second a shard
    fetch_rate_bytes: float | None = None  # bytes a second a shard is read at most (maxFetchRate)
    batch_bytes: int = MAX_BATCH_BYTES  # a shard's first read stops past this much record data


@dataclass(frozen=True)
class ShardTake:
    """One shard's part of one batch: from ``pos`` (an offset position), at most ``cap`` user
    records and nothing that arrived after ``until`` (epoch ms) when first read."""

    stream: str
    shard_id: str
    hash_range: tuple[int, int]
    pos: Mapping[str, Any]
    epoch: int
    cap: int | None = None
    until: int | None = None
    consumer_arn: str | None = None  # enhanced fan-out through this consumer; None: polling

    @property
    def manifest(self) -> str:
        return manifest_name(self.stream, self.shard_id, self.epoch)


def manifest_name(stream: str, shard_id: str, epoch: int) -> str:
    return f"{manifest_dir(stream, shard_id)}/{epoch:012d}.json"


def manifest_dir(stream: str, shard_id: str) -> str:
    return f"{quote(stream, safe='')}/{shard_id}"


def address(stream: str) -> dict[str, str]:
    """A stream named by ARN or by name, as Kinesis' requests take it."""
    return {"StreamARN": stream} if stream.startswith("arn:") else {"StreamName": stream}


def iterator_request(stream: str, shard_id: str, pos: Mapping[str, Any]) -> dict[str, Any]:
    """GetShardIterator's arguments for an offset position."""
    request: dict[str, Any] = {**address(stream), "ShardId": shard_id}
    if "after" in pos:
        return {**request, "ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "StartingSequenceNumber": pos["after"]}
    kind = pos["at"]
    if kind == "AT_TIMESTAMP":
        return {**request, "ShardIteratorType": kind, "Timestamp": pos["ts"] / 1000}
    if kind == "AT_SEQUENCE_NUMBER":
        return {**request, "ShardIteratorType": kind, "StartingSequenceNumber": pos["seq"]}
    return {**request, "ShardIteratorType": kind}


class Shard:
    """GetShardIterator and GetRecords on one shard, with throttling waited out (bounded) and
    an expired iterator renewed from the last record read."""

    def __init__(self, kinesis: Any, stream: str, shard_id: str):
        self.kinesis, self.stream, self.shard_id = kinesis, stream, shard_id
        self.rng = random.Random()

    def _call(self, what: str, request: Any, **kwargs: Any) -> Any:
        for attempt in range(THROTTLED_TRIES):
            try:
                return request(**kwargs)
            except AWS_ERRORS as exc:
                if error_code(exc) == _EXPIRED:
                    raise IteratorExpired() from exc
                error = translate(exc, f"{what} on {self.stream}/{self.shard_id}")
                if not isinstance(error, ThrottledError) or attempt == THROTTLED_TRIES - 1:
                    raise error from exc
                time.sleep(BACKOFF.next_delay(attempt, self.rng))
        raise AssertionError("unreachable")

    def iterator(self, pos: Mapping[str, Any]) -> str:
        return str(self._call("GetShardIterator", self.kinesis.get_shard_iterator,
                              **iterator_request(self.stream, self.shard_id, pos))["ShardIterator"])

    def page(self, iterator: str, limit: int) -> dict[str, Any]:
        extra = {"StreamARN": self.stream} if self.stream.startswith("arn:") else {}
        return dict(self._call("GetRecords", self.kinesis.get_records, ShardIterator=iterator, Limit=limit, **extra))


@dataclass
class Fetched:
    records: list[dict[str, Any]] = field(default_factory=list)
    rows: int = 0
    ended: bool = False

    @property
    def end(self) -> str | None:
        return self.records[-1]["SequenceNumber"] if self.records else None


def user_count(record: dict[str, Any], hash_range: tuple[int, int]) -> int:
    """How many rows a Kinesis record makes (a KPL aggregate: its user records in range)."""
    if not is_aggregate(record["Data"]):
        return 1
    return sum(len(run) for run in user_record_runs([record], None, sys.maxsize, hash_range))


@dataclass(frozen=True)
class Step:
    """One read of a shard, by GetRecords or an event of a subscription: its records, whether
    the shard is read to its end, and whether the reading reached the shard's tip."""

    records: list[dict[str, Any]]
    ended: bool
    caught_up: bool


def polled(shard: Shard, pos: Mapping[str, Any], limits: ReadLimits, got: Fetched) -> Generator[Step, None, None]:
    """GetRecords from ``pos`` (5 a second a shard at most, or slower for ``maxFetchRate``); an
    expired iterator is renewed after the last record ``got`` holds."""
    iterator = shard.iterator(pos)
    last_call, last_bytes = 0.0, 0
    while True:
        pause = limits.fetch_interval_s if limits.fetch_rate_bytes is None else \
            max(limits.fetch_interval_s, last_bytes / limits.fetch_rate_bytes)
        time.sleep(max(0.0, last_call + pause - time.monotonic()))
        last_call = time.monotonic()
        try:
            page = shard.page(iterator, limits.records_per_fetch)
        except IteratorExpired:
            iterator = shard.iterator({"after": got.end} if got.end else pos)
            log.info("%s/%s: shard iterator expired; renewed", shard.stream, shard.shard_id)
            continue
        records = page.get("Records") or []
        last_bytes = sum(len(record["Data"]) for record in records) * 3 // 4 if limits.fetch_rate_bytes else 0
        behind = page.get("MillisBehindLatest")
        following = page.get("NextShardIterator")
        yield Step(records, following is None,
                   (not records and not behind) or (behind == 0 and len(records) < limits.records_per_fetch))
        if following is None:
            return
        iterator = following


def starting_position(pos: Mapping[str, Any]) -> dict[str, Any]:
    """SubscribeToShard's StartingPosition for an offset position."""
    request = iterator_request("", "", pos)
    out: dict[str, Any] = {"Type": request["ShardIteratorType"]}
    if "StartingSequenceNumber" in request:
        out["SequenceNumber"] = request["StartingSequenceNumber"]
    if "Timestamp" in request:
        out["Timestamp"] = request["Timestamp"]
    return out


def subscribed(shard: Shard, consumer_arn: str, pos: Mapping[str, Any]) -> Generator[Step, None, None]:
    """The events of SubscribeToShard from ``pos``, subscribing again after the last
    ContinuationSequenceNumber when a subscription ends (AWS ends each after five minutes) or
    breaks. ResourceInUse (the shard's last subscription of this consumer is still open: a
    speculative twin's, or the batch before's), throttling and broken connections are waited
    out, bounded; any other error is raised."""
    position = starting_position(pos)
    failures = 0
    while True:
        try:
            response = shard.kinesis.subscribe_to_shard(ConsumerARN=consumer_arn, ShardId=shard.shard_id,
                                                        StartingPosition=position)
            events = response["EventStream"]
            try:
                for event in events:  # an error event (ResourceInUse among them) raises here
                    body = event.get("SubscribeToShardEvent")
                    if body is None:
                        continue
                    failures = 0
                    continuation = body.get("ContinuationSequenceNumber")
                    yield Step(body.get("Records") or [], not continuation, body.get("MillisBehindLatest") == 0)
                    if not continuation:
                        return
                    position = {"Type": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": continuation}
            finally:
                events.close()
        except AWS_ERRORS as exc:
            error = translate(exc, f"SubscribeToShard on {shard.stream}/{shard.shard_id}")
            if (error_code(exc) != _IN_USE and not error.retriable) or failures == THROTTLED_TRIES - 1:
                raise error from exc
            time.sleep(BACKOFF.next_delay(failures, shard.rng))
            failures += 1


def fetch(shard: Shard, take: ShardTake, limits: ReadLimits, to: str | None = None) -> Fetched:
    """The records of ``take``: to the recorded end ``to`` (a replay), else decided here."""
    got = Fetched()
    size = 0
    deadline = time.monotonic() + (REPLAY_WAIT_S if to is not None else limits.fetch_duration_s)
    steps = subscribed(shard, take.consumer_arn, take.pos) if take.consumer_arn else \
        polled(shard, take.pos, limits, got)
    try:
        for step in steps:
            for record in step.records:
                if to is not None:
                    if int(record["SequenceNumber"]) > int(to):
                        raise ReplayError(f"{take.stream}/{take.shard_id}: batch {take.epoch} ended at {to}, which "
                                          f"the stream no longer has (next: {record['SequenceNumber']}); past its "
                                          "retention?")
                    got.records.append(record)
                    if record["SequenceNumber"] == to:
                        return got
                    continue
                if take.until is not None and arrival_ms(record) > take.until:
                    return got
                rows = user_count(record, take.hash_range)
                if take.cap is not None and got.records and got.rows + rows > take.cap:
                    return got
                got.records.append(record)
                got.rows += rows
                size += len(record["Data"])
            if step.ended:
                if to is not None:
                    raise ReplayError(f"{take.stream}/{take.shard_id}: batch {take.epoch} ended at {to}, but the "
                                      "shard ended before it")
                got.ended = True
                return got
            if to is not None:
                if step.caught_up or time.monotonic() > deadline:
                    raise ReplayError(f"{take.stream}/{take.shard_id}: batch {take.epoch} ended at {to}; reading "
                                      f"again reached {got.end or 'nothing'} and no further (past the stream's "
                                      "retention?)")
            elif step.caught_up or size >= limits.batch_bytes or time.monotonic() > deadline:
                return got
        return got  # a subscription's events ran out without a step to stop at (not expected)
    finally:
        steps.close()


def manifest_body(take: ShardTake, got: Fetched) -> bytes:
    return orjson.dumps({"v": 1, "stream": take.stream, "shard": take.shard_id, "epoch": take.epoch,
                         "after": take.pos, "end": got.end, "ended": got.ended, "records": len(got.records),
                         "rows": got.rows})


def read_manifest(storage: Storage, name: str) -> dict[str, Any] | None:
    body = storage.read_if_there(name)
    if body is None:
        return None
    try:
        manifest = orjson.loads(body)
        if not isinstance(manifest, dict) or "end" not in manifest or "ended" not in manifest:
            raise ValueError("no end")
        return manifest
    except ValueError as exc:
        raise DependencyError(f"manifest {storage.location(name)} is not one this source wrote ({exc}); "
                              "is metadataPath another query's?", retriable=False) from exc


def take_records(kinesis: Any, storage: Storage, take: ShardTake, limits: ReadLimits) -> list[dict[str, Any]]:
    """One shard's records of a batch: decided and recorded by the first reader, read again
    to the recorded end after."""
    shard = Shard(kinesis, take.stream, take.shard_id)
    manifest = read_manifest(storage, take.manifest)
    if manifest is None:
        got = fetch(shard, take, limits)
        if storage.create_bytes(take.manifest, manifest_body(take, got)):
            log.debug("%s/%s batch %d: %d records, %d rows, ended %s", take.stream, take.shard_id, take.epoch,
                      len(got.records), got.rows, got.ended)
            return got.records
        manifest = read_manifest(storage, take.manifest)  # another reader recorded it first: read as it did
        assert manifest is not None
    if manifest.get("after") != dict(take.pos):
        raise DependencyError(f"manifest {storage.location(take.manifest)} is of a batch from {manifest.get('after')}, "
                              f"not {dict(take.pos)}: two queries share metadataPath (give each its own)",
                              retriable=False)
    if manifest["end"] is None:
        return []
    return fetch(shard, take, limits, to=manifest["end"]).records


def read_take(kinesis: Any, storage: Storage, take: ShardTake, limits: ReadLimits) -> Iterator[pa.RecordBatch]:
    """One shard's rows of a batch: decided and recorded by the first reader, replayed after."""
    yield from rows(take, take_records(kinesis, storage, take, limits))


def read_takes(kinesis: Any, storage: Storage, takes: Sequence[ShardTake],
               limits: ReadLimits) -> Iterator[pa.RecordBatch]:
    """A task's rows: each shard's records read on a thread of its own, each shard's rows
    yielded in ``takes``' order once its records are in (and its end recorded). A first read
    of a shard stops at ``limits.batch_bytes / len(takes)``, so the task holds no more than
    one shard read alone did. A shard's error is raised when its turn comes; a task closed
    early waits for the reads under way (``maxFetchDuration`` at most)."""
    if len(takes) < 2:
        for take in takes:
            yield from read_take(kinesis, storage, take, limits)
        return
    shared = replace(limits, batch_bytes=max(1, limits.batch_bytes // len(takes)))
    if storage.bucket is not None:
        storage.s3  # noqa: B018  (made here, once: boto3 is not safe making a client on several threads)
    pool = ThreadPoolExecutor(len(takes), thread_name_prefix="kclmp-read")
    try:
        reads = [pool.submit(take_records, kinesis, storage, take, shared) for take in takes]
        for take, read in zip(takes, reads):
            yield from rows(take, read.result())
    finally:
        pool.shutdown(wait=True, cancel_futures=True)

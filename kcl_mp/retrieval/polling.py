"""GetRecords polling for one shard, on a thread, with a bounded prefetch.

The fetcher runs ahead of the processor within Java's prefetch bounds (``prefetch``: 3
batches, 8 MiB of processRecords lines, 30,000 user records, and its pool process's budget),
so Kinesis latency overlaps processing without unbounded memory. A page is handed over in
batches of at most ``maxRecordsCount`` user records and about ``maxByteSize`` bytes of line
each (``deaggregate.page_slices``), made only as the queue takes them: a page of KPL
aggregates (170,000 user records in 1 MB) is several processRecords calls, in order, each
with its records' sub-sequence numbers, and the processor may checkpoint between them. It
owns the shard iterator and
recovers by itself from expired iterators (re-positioned after the last record read),
throttling and transient errors (backoff). What it hands over, in order:

    Positioned()                           the first iterator was obtained: the shard
                                           exists, its processor may start
    Fetched(batch, millis_behind_latest)   records to deliver (maybe empty, see config)
    ShardEnded(children)                   the shard is closed and fully read; its
                                           ChildShards, as the last GetRecords gave them
    ShardEnded((), gone=True)              GetShardIterator said ResourceNotFound and
                                           ListShards does not list the shard: it aged out
                                           of the stream (or never was in it). Java takes the
                                           error alone as the shard's end
                                           (KinesisDataFetcher.advanceIteratorTo); kcl-mp
                                           first confirms it, so a throttled or half-created
                                           stream never ends a live shard
    FetchFailed(error)                     a non-retriable error; the fetcher has stopped

Starting position (the lease's checkpoint): TRIM_HORIZON, LATEST, AT_TIMESTAMP map to
the iterator types of the same name; a sequence number starts AT_SEQUENCE_NUMBER and the
records at or below the checkpoint are dropped. AT (not AFTER) because a checkpoint can
sit inside a KPL aggregate, whose later sub-records AFTER would skip.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Protocol

from kcl_mp.aws.errors import AWS_ERRORS, error_code, translate
from kcl_mp.backoff import Backoff
from kcl_mp.config import InitialPosition, RetrievalSettings
from kcl_mp.errors import DependencyError, KclMpError
from kcl_mp.leases.shard_syncer import list_shards
from kcl_mp.retrieval.deaggregate import UserRecord, data_bytes, page_slices
from kcl_mp.retrieval.prefetch import PoolBudget, PrefetchQueue
from kcl_mp.sequence import AT_TIMESTAMP, LATEST, SHARD_END, TRIM_HORIZON, ExtendedSequenceNumber


class Encoded(Protocol):
    """What ``encode`` makes of user records (a wire.Batch): the line, counted by the prefetch."""

    @property
    def line(self) -> bytes: ...


@dataclass(frozen=True)
class Fetched:
    batch: Encoded
    count: int
    millis_behind_latest: int | None
    data_bytes: int = 0  # of the user records' data (from its base64 length, exact within 2 bytes a record)


@dataclass(frozen=True)
class Positioned:
    """The first shard iterator (or subscription) was obtained."""


@dataclass(frozen=True)
class ShardEnded:
    children: tuple[dict, ...] = ()  # the ChildShards of the last GetRecords (empty if not given)
    gone: bool = False  # not in the stream any more (ResourceNotFound, confirmed by ListShards)


@dataclass(frozen=True)
class FetchFailed:
    error: KclMpError


FetchResult = Positioned | Fetched | ShardEnded | FetchFailed
Encoder = Callable[[list[UserRecord], "int | None"], Encoded]

_EXPIRED = frozenset({"ExpiredIteratorException"})
_NOT_FOUND = "ResourceNotFoundException"


class _Gone(Exception):
    """The shard is not in the stream (confirmed): the fetcher hands over its end."""
FETCH_BACKOFF = Backoff(base_s=0.2, cap_s=10.0)  # frozen: one shared default


class Fetcher:
    def __init__(
        self,
        kinesis: Any,
        stream_name: str,
        shard_id: str,
        start: ExtendedSequenceNumber,
        initial: InitialPosition,
        settings: RetrievalSettings,
        encode: Encoder,
        log: logging.LoggerAdapter | logging.Logger,
        *,
        pool: PoolBudget | None = None,
        backoff: Backoff = FETCH_BACKOFF,
        rng: random.Random | None = None,
    ):
        self.kinesis = kinesis
        self.stream_name = stream_name
        self.shard_id = shard_id
        self.start_position = start
        self.initial = initial
        self.settings = settings
        self.encode = encode
        self.log = log
        self.backoff = backoff
        self.rng = rng or random.Random()
        self.results: PrefetchQueue[FetchResult] = PrefetchQueue(settings, pool)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"fetch-{shard_id}", daemon=True)
        self._last_read: str | None = None  # sequence number of the last Kinesis record read
        # the first records read start at the checkpoint: those at or below it are dropped
        self._after: ExtendedSequenceNumber | None = None if start.is_sentinel else start
        self.get_records_calls = 0

    # -- the consumer's side -----------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def next(self, timeout: float) -> FetchResult | None:
        return self.results.get(timeout)

    def stop(self, wait_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(wait_s)
        self.results.clear()  # what it read ahead goes back to its pool process's budget

    # -- the thread --------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._poll()
        except _Gone:
            self._put(ShardEnded(gone=True))
        except KclMpError as exc:
            self._put(FetchFailed(exc))
        except Exception as exc:  # a bug must not leave the worker waiting forever
            self.log.exception("fetcher for %s failed", self.shard_id)
            self._put(FetchFailed(DependencyError(f"fetcher crashed: {exc!r}", retriable=False)))

    def _put(self, item: FetchResult) -> bool:
        """Queue ``item`` once the prefetch bounds allow (the backpressure); False when stopping."""
        if isinstance(item, Fetched):
            return self.results.put(item, len(item.batch.line), item.count, self._stop)
        return self.results.put(item, 0, 0, self._stop)

    def _sleep(self, seconds: float) -> bool:
        """Sleep unless stopped; False when stopping."""
        return not self._stop.wait(max(0.0, seconds))

    def _hand_over(self, records: list[dict[str, Any]], behind: int | None) -> bool:
        """Queue one page of records for the processor, a batch at a time (each waits while
        the queue is full: the backpressure); False when stopping."""
        after, settings = self._after, self.settings
        if records:
            self._last_read = records[-1]["SequenceNumber"]
            self._after = None
        handed = False
        for users in page_slices(records, after, settings.max_records_count, settings.max_byte_size):
            if not self._put(Fetched(self.encode(users, behind), len(users), behind, data_bytes(users))):
                return False
            handed = True
        if not handed and settings.call_process_records_even_for_empty_record_list:
            return self._put(Fetched(self.encode([], behind), 0, behind))
        return True

    def _check_gone(self, exc: BaseException) -> None:
        """Raise ``_Gone`` when ``exc`` is ResourceNotFound and ListShards confirms that the
        shard is not in the stream; a listing that fails raises its own error."""
        if error_code(exc) == _NOT_FOUND and self.shard_id not in {
                shard.shard_id for shard in list_shards(self.kinesis, self.stream_name)}:
            self.log.warning("shard %s is not in stream %s (%s, and ListShards does not list it): its end",
                             self.shard_id, self.stream_name, _NOT_FOUND)
            raise _Gone() from exc

    def _poll(self) -> None:
        iterator = self._iterator()
        if not self._put(Positioned()):
            return
        idle_s = self.settings.idle_time_between_reads_ms / 1000.0
        threshold = self.settings.millis_behind_latest_threshold_for_reduced_tps_ms
        attempt = 0
        next_call = 0.0
        while not self._stop.is_set():
            if not self._sleep(next_call - time.monotonic()):
                return
            call_started = time.monotonic()
            try:
                response = self.kinesis.get_records(ShardIterator=iterator, Limit=self.settings.max_records)
                self.get_records_calls += 1
            except AWS_ERRORS as exc:
                error = translate(exc, f"GetRecords on {self.shard_id}")
                if error_code(exc) in _EXPIRED:
                    self.log.info("shard iterator expired; re-positioning after %s",
                                  self._last_read or "the checkpoint")
                    iterator = self._iterator()
                    continue
                if not error.retriable:
                    raise error from exc
                delay = self.backoff.next_delay(attempt, self.rng)
                attempt += 1
                self.log.warning("%s; retrying in %.2f s (attempt %d)", error, delay, attempt)
                next_call = time.monotonic() + delay
                continue
            attempt = 0
            behind = response.get("MillisBehindLatest")
            if not self._hand_over(response.get("Records") or [], behind):
                return
            iterator = response.get("NextShardIterator")
            if iterator is None:
                self._put(ShardEnded(tuple(response.get("ChildShards") or ())))  # raw JSON may say null
                return
            wait = idle_s
            if threshold and behind is not None and behind < threshold:
                wait += idle_s  # near the tip: read less often (millisBehindLatestThresholdForReducedTps)
            next_call = call_started + wait

    def _position(self) -> tuple[str, str | None, datetime | None]:
        """Where to read from: (type, sequence number, timestamp), after the last record
        read if any, else at the lease's checkpoint (GetShardIterator's and SubscribeToShard's
        position types have the same names)."""
        if self._last_read is not None:
            return "AFTER_SEQUENCE_NUMBER", self._last_read, None
        position = self.start_position.sequence_number
        if position in (TRIM_HORIZON, LATEST):
            return position, None, None
        if position == AT_TIMESTAMP:
            if self.initial.timestamp is None:
                raise DependencyError(
                    f"lease {self.shard_id} is at AT_TIMESTAMP but no initialPositionInStreamExtended is configured",
                    retriable=False,
                )
            return "AT_TIMESTAMP", None, datetime.fromtimestamp(self.initial.timestamp, tz=timezone.utc)
        if position == SHARD_END:
            raise DependencyError(f"lease {self.shard_id} is already at SHARD_END", retriable=False)
        return "AT_SEQUENCE_NUMBER", position, None

    def _iterator(self) -> str:
        kind, sequence, stamp = self._position()
        kwargs: dict[str, Any] = {"StreamName": self.stream_name, "ShardId": self.shard_id, "ShardIteratorType": kind}
        if sequence is not None:
            kwargs["StartingSequenceNumber"] = sequence
        if stamp is not None:
            kwargs["Timestamp"] = stamp
        attempt = 0
        for _ in range(1000):  # bounded: about an hour at the backoff cap
            try:
                return self.kinesis.get_shard_iterator(**kwargs)["ShardIterator"]
            except AWS_ERRORS as exc:
                error = translate(exc, f"GetShardIterator on {self.shard_id}")
                self._check_gone(exc)
                if not error.retriable:
                    raise error from exc
                delay = self.backoff.next_delay(attempt, self.rng)
                attempt += 1
                self.log.warning("%s; retrying in %.2f s", error, delay)
                if not self._sleep(delay):
                    raise DependencyError("stopped while getting a shard iterator") from exc
        raise DependencyError(f"GetShardIterator on {self.shard_id} kept failing", retriable=True)

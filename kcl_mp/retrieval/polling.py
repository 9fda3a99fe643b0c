"""GetRecords polling for one shard of any stream (``stream.Stream``), on a thread, with a
bounded prefetch.

The fetcher runs ahead of the processor within Java's prefetch bounds (``prefetch``: 3
batches, 8 MiB of processRecords lines, 30,000 user records, and its pool process's budget),
so Kinesis latency overlaps processing without unbounded memory. A page is handed over in
batches of at most ``maxRecordsCount`` user records and about ``maxByteSize`` bytes of line
each (``deaggregate.page_slices``), made only as the queue takes them: a page of KPL
aggregates (170,000 user records in 1 MB) is several processRecords calls, in order, each
with its records' sub-sequence numbers, and the processor may checkpoint between them. It
owns the shard iterator and
recovers by itself from expired iterators (re-positioned after the last record read),
throttling and transient errors (backoff), and a position the stream has trimmed (DynamoDB
Streams: TRIM_HORIZON, logged and counted, or retried: ``Stream.skip_trimmed``). What it
hands over, in order:

    Positioned()                           the first iterator was obtained: the shard
                                           exists, its processor may start
    Fetched(batch, millis_behind_latest)   records to deliver (maybe empty, see config)
    ShardEnded(children)                   the shard is closed and fully read; its
                                           children, as the stream found them at the end
    ShardEnded((), gone=True)              the stream says the shard is not in it (``ShardGone``):
                                           it aged out of the stream (or never was in it)
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Protocol

from kcl_mp.backoff import Backoff
from kcl_mp.config import InitialPosition, RetrievalSettings
from kcl_mp.errors import DependencyError, KclMpError
from kcl_mp.retrieval.deaggregate import UserRecord, data_bytes, page_slices
from kcl_mp.retrieval.prefetch import PoolBudget, PrefetchQueue
from kcl_mp.retrieval.stream import DataTrimmed, IteratorExpired, Position, ShardGone, Stream
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
    children: tuple[dict, ...] = ()  # ChildShards entries, as the stream found them (empty if none)
    gone: bool = False  # not in the stream any more (ResourceNotFound; Kinesis: confirmed by ListShards)


@dataclass(frozen=True)
class FetchFailed:
    error: KclMpError


FetchResult = Positioned | Fetched | ShardEnded | FetchFailed
Encoder = Callable[[list[UserRecord], "int | None"], Encoded]
FETCH_BACKOFF = Backoff(base_s=0.2, cap_s=10.0)  # frozen: one shared default


class Fetcher:
    def __init__(
        self,
        stream: Stream,
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
        hash_range: tuple[int, int] | None = None,
    ):
        self.stream = stream
        self.shard_id = shard_id
        self.start_position = start
        self.initial = initial
        self.settings = settings
        self.encode = encode
        self.log = log
        self.backoff = backoff
        self.rng = rng or random.Random()
        self.hash_range = hash_range  # the shard's: KPL user records outside it are dropped (deaggregate)
        self.results: PrefetchQueue[FetchResult] = PrefetchQueue(settings, pool)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"fetch-{shard_id}", daemon=True)
        self._last_read: str | None = None  # sequence number of the last record read
        # the first records read start at the checkpoint: those at or below it are dropped
        self._after: ExtendedSequenceNumber | None = None if start.is_sentinel else start
        self.get_records_calls = 0
        self.iterators_expired = 0
        self.reads_retried = 0  # throttled or failed reads, retried after a backoff
        self.trimmed_skips = 0  # positions the stream had trimmed, skipped to TRIM_HORIZON
        self.trim_retries = 0  # with kclmp.skipRecordsBehavior = KCL_RETRY
        self._skipped_after: str | None = None  # where the last skip left off, until records come again

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
        except ShardGone as gone:
            self.log.warning("%s: its end", gone)
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

    def _hand_over(self, records: Sequence[dict[str, Any]], behind: int | None) -> bool:
        """Queue one page of records for the processor, a batch at a time (each waits while
        the queue is full: the backpressure); False when stopping."""
        after, settings = self._after, self.settings
        if records:
            if self._skipped_after is not None:
                self.log.warning("shard %s: records after %s up to %s were trimmed before they were read: lost",
                                 self.shard_id, self._skipped_after, records[0]["SequenceNumber"])
                self._skipped_after = None
            self._last_read = records[-1]["SequenceNumber"]
            self._after = None
        handed = False
        for users in page_slices(records, after, settings.max_records_count, settings.max_byte_size,
                                 self.hash_range):
            if not self._put(Fetched(self.encode(users, behind), len(users), behind, data_bytes(users))):
                return False
            handed = True
        if not handed and settings.call_process_records_even_for_empty_record_list:
            return self._put(Fetched(self.encode([], behind), 0, behind))
        return True

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
                page = self.stream.get_records(self.shard_id, iterator, self.settings.max_records)
                self.get_records_calls += 1
            except IteratorExpired:
                self.iterators_expired += 1
                self.log.info("shard iterator expired; re-positioning after %s", self._last_read or "the checkpoint")
                iterator = self._iterator()
                continue
            except DataTrimmed as trimmed:
                self._after_trim(trimmed)
                iterator = self._iterator()
                continue
            except DependencyError as error:
                if not error.retriable:
                    raise
                delay = self.backoff.next_delay(attempt, self.rng)
                attempt += 1
                self.reads_retried += 1
                self.log.warning("%s; retrying in %.2f s (attempt %d)", error, delay, attempt)
                next_call = time.monotonic() + delay
                continue
            attempt = 0
            behind = page.millis_behind_latest
            if not self._hand_over(page.records, behind):
                return
            if page.next_iterator is None:
                self._put(ShardEnded(page.children))
                return
            iterator = page.next_iterator
            wait = idle_s if page.records else idle_s * self.stream.empty_read_wait
            if threshold and behind is not None and behind < threshold:
                wait += idle_s  # near the tip: read less often (millisBehindLatestThresholdForReducedTps)
            next_call = call_started + wait

    def _after_trim(self, trimmed: DataTrimmed) -> None:
        """A position the stream no longer keeps: move to TRIM_HORIZON (the records between are
        lost: logged and counted), or, where the user's key says so, wait to try the same
        position again (until it reads, or the lease moves)."""
        at = self._last_read or str(self.start_position)
        if not self.stream.skip_trimmed:
            delay = self.backoff.next_delay(self.trim_retries, self.rng)
            self.trim_retries += 1
            self.log.warning("shard %s: the position after %s is trimmed (%s); retrying in %.2f s (attempt %d, "
                             "kclmp.skipRecordsBehavior = KCL_RETRY)", self.shard_id, at, trimmed, delay,
                             self.trim_retries)
            if not self._sleep(delay):
                raise DependencyError("stopped while retrying a trimmed position") from trimmed
            return
        self.trimmed_skips += 1
        self.log.warning("shard %s: the position after %s is trimmed (%s); skipping to TRIM_HORIZON (skip %d on "
                         "this shard)", self.shard_id, at, trimmed, self.trimmed_skips)
        self._skipped_after = at
        self._last_read, self._after = None, None
        self.start_position = ExtendedSequenceNumber(TRIM_HORIZON)

    def _position(self) -> Position:
        """Where to read from: after the last record read if any, else at the lease's
        checkpoint (GetShardIterator's and SubscribeToShard's position types have the same names)."""
        if self._last_read is not None:
            return Position("AFTER_SEQUENCE_NUMBER", self._last_read)
        position = self.start_position.sequence_number
        if position in (TRIM_HORIZON, LATEST):
            return Position(position)
        if position == AT_TIMESTAMP:
            if self.initial.timestamp is None:
                raise DependencyError(
                    f"lease {self.shard_id} is at AT_TIMESTAMP but no initialPositionInStreamExtended is configured",
                    retriable=False,
                )
            return Position("AT_TIMESTAMP", timestamp=datetime.fromtimestamp(self.initial.timestamp, tz=timezone.utc))
        if position == SHARD_END:
            raise DependencyError(f"lease {self.shard_id} is already at SHARD_END", retriable=False)
        return Position("AT_SEQUENCE_NUMBER", position)

    def _iterator(self) -> str:
        attempt = 0
        for _ in range(1000):  # bounded: about an hour at the backoff cap
            try:
                return self.stream.shard_iterator(self.shard_id, self._position())
            except DataTrimmed as trimmed:
                self._after_trim(trimmed)
                continue
            except DependencyError as error:
                if not error.retriable:
                    raise
                delay = self.backoff.next_delay(attempt, self.rng)
                attempt += 1
                self.log.warning("%s; retrying in %.2f s", error, delay)
                if not self._sleep(delay):
                    raise DependencyError("stopped while getting a shard iterator") from error
        raise DependencyError(f"GetShardIterator on {self.shard_id} kept failing", retriable=True)

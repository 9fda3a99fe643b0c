"""The read-ahead between a shard's fetcher and its processor, bounded as Java bounds it.

Java's ``PrefetchRecordsPublisher`` fetches again only while its cache holds fewer than
``maxPendingProcessRecordsInput`` batches (3), fewer than ``maxByteSize`` bytes (8 MiB) and
fewer than ``maxRecordsCount`` records (30,000), or nothing at all (so one batch larger than
every bound still goes through). kcl-mp applies the same rule to what it queues: processRecords
lines ready to write, counted by their bytes and their user records, after de-aggregation (a
KPL aggregate of 1 MB can become a 30 MB line: Java's count of Kinesis records and data bytes
would not see that). The fetcher splits a larger batch (``wire.make_batches``), so a queue
holds at most the bounds plus one batch of at most ``maxByteSize`` (plus one record) and
``maxRecordsCount`` records.

One budget more, kcl-mp's: every shard of a pool process together queues at most
``kclmp.workerProcessMaxByteSize`` (plus the one batch admitted last), so a pool process
driving many shards stays within a stated budget. A shard waits for it even when its own queue
is empty; the budget always frees, since only the shards' own threads take from the queues.

A batch leaves the count when the shard's thread takes it (the line it is then writing is
one more batch of at most the bounds, per shard). ``admits`` decides; ``PrefetchQueue`` and
``PoolBudget`` do the waiting.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Generic, TypeVar

from kcl_mp.config import RetrievalSettings

T = TypeVar("T")


@dataclass(frozen=True)
class Queued:
    """What one shard's queue holds."""

    batches: int = 0
    bytes: int = 0
    records: int = 0


def admits(shard: Queued, pool_bytes: int, size: int, bounds: RetrievalSettings) -> bool:
    """May a batch of ``size`` line bytes join a shard's queue? Java's rule per shard (below
    every bound, or empty), then the pool's budget (below it). A batch of no bytes (the
    shard's end, a failure) needs only room in the shard's queue.

    >>> bounds = RetrievalSettings(max_pending_process_records_input=3, max_byte_size=100, max_records_count=10,
    ...                            worker_process_max_byte_size=1000)
    >>> admits(Queued(0, 0, 0), 0, 5000, bounds)  # empty: one batch over every bound goes through
    True
    >>> admits(Queued(1, 100, 1), 0, 5, bounds)  # the shard holds maxByteSize already
    False
    >>> admits(Queued(1, 10, 1), 1000, 5, bounds)  # the pool's shards hold their budget
    False
    >>> admits(Queued(1, 10, 1), 1000, 0, bounds)  # the shard's end is never held back by bytes
    True
    """
    empty = shard.batches == 0
    if not empty and not (shard.batches < bounds.max_pending_process_records_input
                          and shard.bytes < bounds.max_byte_size and shard.records < bounds.max_records_count):
        return False
    return size == 0 or pool_bytes < bounds.worker_process_max_byte_size


class PoolBudget:
    """The bytes queued by every shard of one pool process, and the lock their queues share."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.space = threading.Condition(self.lock)  # producers wait here for any queue to shrink
        self.bytes = 0


class PrefetchQueue(Generic[T]):
    """One shard's queue: ``put`` waits (in steps, so a stop is seen) until ``admits``; ``get``
    takes the oldest item."""

    def __init__(self, bounds: RetrievalSettings, pool: PoolBudget | None = None):
        self.bounds = bounds
        self.pool = pool or PoolBudget()
        self._items: deque[tuple[T, int, int]] = deque()
        self._ready = threading.Condition(self.pool.lock)
        self._bytes = 0
        self._records = 0

    @property
    def queued(self) -> Queued:
        with self.pool.lock:
            return Queued(len(self._items), self._bytes, self._records)

    def put(self, item: T, size: int, records: int, stop: threading.Event) -> bool:
        """Queue ``item`` (``size`` line bytes, ``records`` user records) once admitted; False
        if ``stop`` was set first."""
        pool = self.pool
        with pool.lock:
            if stop.is_set():
                return False
            while not admits(Queued(len(self._items), self._bytes, self._records), pool.bytes, size, self.bounds):
                if stop.is_set():
                    return False
                pool.space.wait(0.2)
            self._items.append((item, size, records))
            self._bytes += size
            self._records += records
            pool.bytes += size
            self._ready.notify()
        return True

    def get(self, timeout: float) -> T | None:
        """The oldest item, waiting up to ``timeout`` for one; None if none came."""
        pool = self.pool
        deadline = time.monotonic() + timeout
        with pool.lock:
            while not self._items:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._ready.wait(remaining)
            item, size, records = self._items.popleft()
            self._bytes -= size
            self._records -= records
            pool.bytes -= size
            pool.space.notify_all()
        return item

    def clear(self) -> None:
        """Give back what is queued (the shard is done with it: its budget goes to the others)."""
        pool = self.pool
        with pool.lock:
            pool.bytes -= self._bytes
            self._items.clear()
            self._bytes = self._records = 0
            pool.space.notify_all()

"""The stream seam: what kcl-mp asks of a stream, whatever kind it is.

A ``Stream`` lists its shards and reads a shard through iterators, its children found at its end;
``kinesis_stream`` and ``dynamodb_stream`` implement it, ``streams.open_stream`` picks one
from the configuration (``Config.stream_kind``, decided once where it is parsed). Above the
seam nothing knows which API answered: the shard syncer plans leases from ``Shard`` values
(``leases.shard_sync``), the polling fetcher reads ``Page`` values, and what a kind of stream
does differently stays in its implementation:

    Kinesis            ListShards (filtered at the initial position on an empty table);
                       children in the last GetRecords' ChildShards; ResourceNotFound on a
                       shard is its end only once ListShards confirms it
    DynamoDB Streams   DescribeStream pages of 100 (no filter by position); children by
                       ShardFilter CHILD_SHARDS, falling back to the full listing; at most
                       1,000 records a read; ResourceNotFound on a shard is its end;
                       a trimmed position raises ``DataTrimmed``; records as the adapter
                       shapes them (``dynamodb_record``)

The reading errors a fetcher must tell apart are exceptions of their own (``IteratorExpired``,
``DataTrimmed``, ``ShardGone``); everything else arrives as ``errors.DependencyError``
(``ThrottledError`` for throttling), retriable or not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from kcl_mp.config import InitialPosition
from kcl_mp.config.settings import StreamKind
from kcl_mp.leases.shard_sync import Shard


class IteratorExpired(Exception):
    """The shard iterator is older than the service keeps it (Kinesis 5 min, DynamoDB Streams 15)."""


class DataTrimmed(Exception):
    """The position asked for is older than the stream keeps records (DynamoDB Streams: 24 h)."""


class ShardGone(Exception):
    """The shard is not in the stream (any more): its end, with nothing more to read."""


@dataclass(frozen=True)
class Page:
    """One read of a shard: records in the Kinesis shape the fetcher hands on (``SequenceNumber``,
    ``Data`` as base64 text or bytes, ``PartitionKey``, ``ApproximateArrivalTimestamp``), the next
    iterator (None: the shard is closed and read to its end) and, at the end, its children as
    Kinesis' ChildShards entries (``ShardId``, ``ParentShards``, ``HashKeyRange``)."""

    records: Sequence[dict[str, Any]]
    next_iterator: str | None
    millis_behind_latest: int | None = None
    children: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class Position:
    """Where a shard iterator starts: GetShardIterator's type, with its sequence number or time."""

    kind: str  # TRIM_HORIZON, LATEST, AT_SEQUENCE_NUMBER, AFTER_SEQUENCE_NUMBER, AT_TIMESTAMP
    sequence_number: str | None = None
    timestamp: datetime | None = None


class Stream(Protocol):
    """One stream, as the shard syncer and the fetchers use it (see the module docstring)."""

    @property
    def kind(self) -> StreamKind: ...

    @property
    def name(self) -> str:
        """The stream's name or ARN, for messages."""

    @property
    def max_hash_key(self) -> int:
        """The top of the hash key space its shards' ranges cover (the lease audit's bound)."""

    @property
    def skip_trimmed(self) -> bool:
        """A trimmed position moves the reader to TRIM_HORIZON (True) or is retried (False)."""

    @property
    def empty_read_wait(self) -> int:
        """After a read that returned no records, the next waits this many idle times
        (idleTimeBetweenReadsInMillis): DynamoDB Streams 2, as the adapter's sleep controller."""

    @property
    def filters_at_position(self) -> bool:
        """``list_shards(at)`` lists only the shards open at ``at`` (else every shard: the
        shard sync then plans an empty table from the whole tree)."""

    def describe(self) -> str:
        """The stream's ARN, checked at start-up: a ConfigError when it does not exist or cannot be read."""

    def list_shards(self, at: InitialPosition | None = None) -> list[Shard]:
        """Every shard (or, where the stream can filter, those open at ``at``)."""

    def shard_iterator(self, shard_id: str, position: Position) -> str:
        """Raises ``ShardGone``, ``DataTrimmed`` or a DependencyError."""

    def get_records(self, shard_id: str, iterator: str, limit: int) -> Page:
        """Up to ``limit`` records; at the shard's end, its children (found as the stream finds
        them). Raises ``IteratorExpired``, ``DataTrimmed``, ``ShardGone`` or a DependencyError."""

"""A multi-stream application's lease keys, as the Java KCL writes them, and the creation epoch
each stream's keys carry. Pure data, no I/O.

Java (amazon-kinesis-client 3.x; facts only, no code)::

    StreamIdentifier.serialize()   account:streamName:creationEpoch   (common/StreamIdentifier.java 101-115 at v3.5.1;
                                   parsed by (?<accountId>[0-9]+):(?<streamName>[^:]+):(?<creationEpoch>[0-9]+),
                                   the epoch > 0 and otherwise opaque: never checked against the stream)
    MultiStreamLease.getLeaseKey   <identifier>:<shardId>
    DynamoDBMultiStreamLeaseSerializer   the single-stream item, plus
                                   streamName S = the serialized identifier ("for legacy reasons")
                                   shardId    S = the bare shard id

``parentShardId`` and ``childShardIds`` keep bare shard ids: a lease's family is found within its
stream. A single-stream key (a bare shard id) and a multi-stream key never name the same lease,
so an application that changes mode starts again from its initial position (Java's FAQ says
so too); ``lease.not_a_lease`` keeps the two apart.

The epoch of a stream's keys (``choose_epoch``): the one its leases already carry, else
``stream.<name>.creationEpoch``, else the stream's creation time in ms (DescribeStreamSummary's
StreamCreationTimestamp, as Java's own integration tests derive it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

# The attributes DynamoDBMultiStreamLeaseSerializer adds to a lease item.
STREAM_ID = "streamName"
SHARD_ID_ATTRIBUTE = "shardId"
_IDENTIFIER = re.compile(r"([0-9]+):([^:]+):([0-9]+)")
ADAPTER_EPOCH = 1  # a DynamoDB stream's: the adapter's StreamsSchedulerFactory.createMultiStreamTracker
_MS_2001 = 10**12  # 2001-09-09 in ms since 1970: an epoch at least this is a creation time in ms


@dataclass(frozen=True, order=True)
class StreamIdentifier:
    """One stream of a multi-stream application, as Java names it in the lease table.

    >>> stream = StreamIdentifier("123456789012", "orders", 1700000000000)
    >>> stream.serialized, stream.lease_key("shardId-000000000001")
    ('123456789012:orders:1700000000000', '123456789012:orders:1700000000000:shardId-000000000001')
    >>> StreamIdentifier.parse("123456789012:orders:1700000000000") == stream
    True
    >>> [StreamIdentifier.parse(text) for text in ("orders", "1:a:0", "x1:a:1", "1:a:b:1")]
    [None, None, None, None]
    """

    account: str
    name: str
    creation_epoch: int

    @property
    def serialized(self) -> str:
        return f"{self.account}:{self.name}:{self.creation_epoch}"

    def lease_key(self, shard_id: str) -> str:
        return f"{self.serialized}:{shard_id}"

    @classmethod
    def parse(cls, text: str) -> StreamIdentifier | None:
        """Java's parse of a serialized identifier; None where Java would refuse it (epoch 0 too)."""
        match = _IDENTIFIER.fullmatch(text)
        if match is None or int(match.group(3)) <= 0:
            return None
        return cls(match.group(1), match.group(2), int(match.group(3)))


def split_key(key: str) -> tuple[StreamIdentifier, str] | None:
    """A multi-stream lease key's stream and shard id, or None (a single-stream key, or neither).

    >>> split_key("123456789012:orders:1:shardId-000000000001")
    (StreamIdentifier(account='123456789012', name='orders', creation_epoch=1), 'shardId-000000000001')
    >>> split_key("shardId-000000000001") is None
    True
    """
    identifier, sep, shard_id = key.rpartition(":")
    stream = StreamIdentifier.parse(identifier) if sep and shard_id else None
    return None if stream is None else (stream, shard_id)


def shard_of(key: str) -> str:
    """The shard id a lease key names: the key itself for one stream, after its stream for many.

    >>> shard_of("1:orders:7:shardId-000000000001"), shard_of("shardId-000000000001")
    ('shardId-000000000001', 'shardId-000000000001')
    """
    return key.rpartition(":")[2]


@dataclass(frozen=True)
class EpochChoice:
    """The epoch a stream's lease keys carry, where it came from, and a warning when the stream's
    creation time says the stream was recreated since its leases were written."""

    epoch: int
    source: str  # "its leases", "stream.<name>.creationEpoch", "its creation time"
    warning: str | None = None


def choose_epoch(account: str, name: str, lease_keys: Iterable[str], configured: int | None,
                 created_ms: int | None) -> EpochChoice | None:
    """The creation epoch of stream ``account``/``name``: its leases' (the newest, when the table
    holds several), else ``configured``, else ``created_ms``; None when none is known.

    The leases win so their checkpoints are found: a ``configured`` epoch they contradict is
    not used, with a warning. A stream deleted and created again under the same name has a
    new creation time while its old leases remain: Java, whose epoch is whatever the
    application supplies, would go on with the old keys; so does kcl-mp, with a warning (its
    checkpoints belong to the old stream). That is said only of an epoch that is a time in ms
    (from 2001 on): an opaque one (Java's tests and the DynamoDB adapter use 1) tells nothing.

    >>> t = 1700000000000
    >>> keys = [f"1:orders:{t}:shardId-000000000000", f"1:orders:{t + 5}:shardId-000000000001", "1:other:9:shardId-1"]
    >>> choose_epoch("1", "orders", keys, None, t + 5)
    EpochChoice(epoch=1700000000005, source='its leases', warning=None)
    >>> choose_epoch("1", "new", keys, 3, t), choose_epoch("1", "new", keys, None, t)
    (EpochChoice(epoch=3, source='stream.new.creationEpoch', warning=None), EpochChoice(epoch=1700000000000, \
source='its creation time', warning=None))
    >>> print(choose_epoch("1", "orders", keys, None, t + 9).warning)
    stream orders was created at 1700000000009 (ms), after the epoch 1700000000005 its leases carry: it was \
recreated, and those leases hold the old stream's checkpoints; delete them to read the new stream from its initial \
position
    >>> print(choose_epoch("1", "orders", keys, 3, t).warning)
    stream.orders.creationEpoch = 3 is not used: the stream's leases carry the epoch 1700000000005
    >>> choose_epoch("1", "new", keys, None, None) is None
    True
    """
    found = sorted({split[0].creation_epoch for key in lease_keys if (split := split_key(key))
                    and split[0].account == account and split[0].name == name})
    if found:
        epoch = found[-1]
        warning = None
        if configured is not None and configured != epoch:
            warning = (f"stream.{name}.creationEpoch = {configured} is not used: the stream's leases carry the "
                       f"epoch {epoch}")
        elif created_ms is not None and created_ms > epoch >= _MS_2001:
            warning = (f"stream {name} was created at {created_ms} (ms), after the epoch {epoch} its leases carry: it "
                       "was recreated, and those leases hold the old stream's checkpoints; delete them to read the "
                       "new stream from its initial position")
        return EpochChoice(epoch, "its leases", warning)
    if configured is not None:
        return EpochChoice(configured, f"stream.{name}.creationEpoch")
    if created_ms is not None:
        return EpochChoice(created_ms, "its creation time")
    return None

"""The lease: one shard's binding to a worker, in the Java KCL's item schema.

Pure data, no I/O. ``Lease.from_item`` / ``Lease.to_item`` map to and from DynamoDB's
attribute-value JSON with the Java KCL 2.x/3.x attribute names and types:

    leaseKey S, leaseOwner S, leaseCounter N, ownerSwitchesSinceCheckpoint N,
    checkpoint S, checkpointSubSequenceNumber N, pendingCheckpoint S,
    pendingCheckpointSubSequenceNumber N, pendingCheckpointState B, parentShardId SS,
    childShardIds SS, startingHashKey S, endingHashKey S, throughputKBps N, checkpointOwner S

Attributes kcl-mp does not model are kept verbatim in ``extra`` and written back, so an
item written by a Java worker survives a round trip through kcl-mp unchanged.

Not every row of a lease table is a lease: KCL 3.5 keeps its coordinator state and worker
metrics there too (``leases.rows``), and anyone with PutItem can write any row. ``not_a_lease``
decides, before anything is read as one, and checks every value ``from_item`` reads, so
``from_item`` never fails on a row ``not_a_lease`` passed.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kcl_mp.leases.multi_stream import SHARD_ID_ATTRIBUTE, STREAM_ID, StreamIdentifier, shard_of, split_key
from kcl_mp.sequence import SHARD_END, ExtendedSequenceNumber, is_valid_sequence_number

# Attribute names, as the Java KCL's DynamoDBLeaseSerializer writes them.
LEASE_KEY = "leaseKey"
LEASE_OWNER = "leaseOwner"
LEASE_COUNTER = "leaseCounter"
OWNER_SWITCHES = "ownerSwitchesSinceCheckpoint"
CHECKPOINT = "checkpoint"
CHECKPOINT_SUB = "checkpointSubSequenceNumber"
PENDING_CHECKPOINT = "pendingCheckpoint"
PENDING_CHECKPOINT_SUB = "pendingCheckpointSubSequenceNumber"
PENDING_CHECKPOINT_STATE = "pendingCheckpointState"
PARENT_SHARD_IDS = "parentShardId"
CHILD_SHARD_IDS = "childShardIds"
STARTING_HASH_KEY = "startingHashKey"
ENDING_HASH_KEY = "endingHashKey"
CHECKPOINT_OWNER = "checkpointOwner"
THROUGHPUT_KBPS = "throughputKBps"
# kcl-mp's own, written by a host that gave a lease up after kclmp.processorMaxRestarts failures
# (``table.give_up``); a Java worker ignores them, a 3.x leader reads them (``released_by``).
RELEASED_BY = "kclmpReleasedBy"
RELEASED_UNTIL = "kclmpReleasedUntilMillis"
# kcl-mp's own, written on renewals: the lease's measured CPU (% of a core, ``leases/cost.py``)
CPU_PERCENT = "kclmpCpuPercent"

# KCL 3.5 (EntityType) marks every row of the lease table with its kind; a lease's is LEASE,
# and a row without one is a lease written before 3.5.
ENTITY_TYPE = "entityType"
LEASE_ENTITY = "LEASE"

# The type DynamoDBLeaseSerializer gives each attribute kcl-mp reads or writes.
_TYPES = {
    LEASE_KEY: "S", LEASE_OWNER: "S", LEASE_COUNTER: "N", OWNER_SWITCHES: "N", CHECKPOINT: "S",
    CHECKPOINT_SUB: "N", PENDING_CHECKPOINT: "S", PENDING_CHECKPOINT_SUB: "N", PARENT_SHARD_IDS: "SS",
    CHILD_SHARD_IDS: "SS", STARTING_HASH_KEY: "S", ENDING_HASH_KEY: "S", CHECKPOINT_OWNER: "S",
}
_MODELLED = frozenset(_TYPES)
# A lease's key is its shard's id: Kinesis names every shard "shardId-" and 12 digits, DynamoDB
# Streams "shardId-", 20 digits, "-" and 8 hex digits (shardId-00000001414562045508-2bac9cd2).
# Java's multi-stream keys ("<account>:<stream>:<epoch>:shardId-...") belong to a multi-stream
# application (``not_a_lease``'s ``streams``), a bare shard id to a single-stream one; any other key names no
# shard of any stream.
SHARD_ID = re.compile(r"shardId-(?:[0-9]{12}|[0-9]{20}-[0-9a-f]{8})")
_WHOLE = {LEASE_COUNTER: 2**63 - 1, OWNER_SWITCHES: 2**63 - 1, CHECKPOINT_SUB: 2**63 - 1,
          PENDING_CHECKPOINT_SUB: 2**63 - 1, STARTING_HASH_KEY: 2**128 - 1, ENDING_HASH_KEY: 2**128 - 1}


KEY_SHOWN = 128  # characters of a key shown in a message: the longest ShardId Kinesis allows
_SEQUENCE_DIGITS = 129  # Kinesis's SequenceNumber pattern: 0|([1-9]\d{0,128})


def _not_whole(value: str, limit: int) -> bool:
    """Not a whole number from 0 to ``limit`` (Java's long, or a 128-bit hash key), checked on
    the text first: ``int`` of 5,000 digits is itself an error."""
    return not (value.isascii() and value.isdigit() and len(value) <= len(str(limit)) and int(value) <= limit)


def not_a_lease(item: Mapping[str, Mapping[str, Any]], streams: Collection[str] = ()) -> str | None:
    """Why the lease table's ``item`` is not a lease, or None when it is one.

    ``streams``: the names of a multi-stream application's streams. Its leases are the Java
    multi-stream serializer's (``leases.multi_stream``): ``account:stream:epoch:shardId`` keys
    with ``streamName`` and ``shardId`` saying the same, of one of these streams (the leases of
    other streams sharing the table are left alone: kcl-mp adopts no stream it was not given,
    where Java does, KCL#1112); a bare shard id's lease is another mode's. Without them (one
    stream), a multi-stream key is not a shard id.

    A lease is an item whose ``entityType`` is absent or the string LEASE (Java's own rule),
    with a non-empty ``leaseKey`` string, a whole-number ``leaseCounter``, and every other
    attribute kcl-mp reads or writes of the type Java's serializer gives it. Stricter than
    Java, on purpose: kcl-mp takes, renews and rewrites leases, so a row it cannot read
    exactly as a lease is left alone (and shown apart), never written over.

    >>> not_a_lease({"leaseKey": {"S": "shardId-000000000000"}, "leaseCounter": {"N": "4"},
    ...              "entityType": {"S": "LEASE"}})
    >>> not_a_lease({"leaseKey": {"S": "shardId-00000001414562045508-2bac9cd2"}, "leaseCounter": {"N": "4"}})
    >>> not_a_lease({"leaseKey": {"S": "Leader"}, "ownerName": {"S": "w1"}, "entityType": {"S": "LEADER"}})
    'entityType LEADER'
    >>> not_a_lease({"leaseKey": {"S": "Leader"}, "ownerName": {"S": "w1"}})
    'no leaseCounter'
    >>> not_a_lease({"leaseKey": {"S": "shardId-000000000000"}, "leaseCounter": {"N": "4"}, "leaseOwner": {"N": "7"}})
    'leaseOwner is N, not S'
    >>> not_a_lease({"leaseKey": {"S": "shardId-000000000000"}, "leaseCounter": {"N": "4"},
    ...              "checkpointSubSequenceNumber": {"N": "1.5"}})
    "checkpointSubSequenceNumber '1.5' is not a whole number"
    >>> not_a_lease({"leaseKey": {"S": "bogus-001"}, "leaseCounter": {"N": "4"}})
    "leaseKey 'bogus-001' is not a shard id (shardId- and 12 digits)"
    """
    entity = item.get(ENTITY_TYPE)
    if entity is not None and dict(entity) != {"S": LEASE_ENTITY}:
        kind, value = next(iter(entity.items()), ("", ""))
        return f"entityType {value}" if kind == "S" else f"entityType is {kind or 'empty'}, not S"
    for name, kind in _TYPES.items():
        value = item.get(name)
        if value is not None and list(value) != [kind]:
            return f"{name} is {','.join(value) or 'empty'}, not {kind}"
    if not item.get(LEASE_KEY, {}).get("S"):
        return "no leaseKey"
    if LEASE_COUNTER not in item:
        return "no leaseCounter"
    for name, limit in _WHOLE.items():
        if name in item and _not_whole(text := next(iter(item[name].values())), limit):
            return f"{name} {quoted(text)} is not a whole number" + (
                f" up to {limit}" if text.isascii() and text.isdigit() else "")
    for name in (CHECKPOINT, PENDING_CHECKPOINT):
        text = item[name]["S"] if name in item else SHARD_END
        if not is_valid_sequence_number(text) or len(text) > _SEQUENCE_DIGITS:
            return f"{name} {quoted(text)} is not a sequence number"
    key = item[LEASE_KEY]["S"]
    if streams:
        return _not_a_multi_stream_lease(item, key, streams)
    if not SHARD_ID.fullmatch(key):
        return f"leaseKey {quoted(key, KEY_SHOWN)} is not a shard id (shardId- and 12 digits)"
    return None


def _not_a_multi_stream_lease(item: Mapping[str, Mapping[str, Any]], key: str, streams: Collection[str]
                              ) -> str | None:
    """``not_a_lease``'s key rule for a multi-stream application.

    >>> item = {"streamName": {"S": "1:a:7"}, "shardId": {"S": "shardId-000000000000"}}
    >>> _not_a_multi_stream_lease(item, "1:a:7:shardId-000000000000", {"a"})
    >>> _not_a_multi_stream_lease(item, "1:a:7:shardId-000000000000", {"b", "c"})
    "a lease of stream 'a', which this application does not read"
    >>> _not_a_multi_stream_lease(item, "shardId-000000000000", {"a"})
    "leaseKey 'shardId-000000000000' is a single-stream lease's (this application reads many streams)"
    >>> _not_a_multi_stream_lease(item, "1:b:7:shardId-000000000000", {"b"})
    "streamName '1:a:7' is not the stream of leaseKey '1:b:7:shardId-000000000000'"
    >>> _not_a_multi_stream_lease({}, "1:a:7:shardId-000000000000", {"a"})
    "no streamName (Java's multi-stream serializer writes it)"
    """
    split = split_key(key)
    if split is None or not SHARD_ID.fullmatch(split[1]):
        if SHARD_ID.fullmatch(key):
            return f"leaseKey {quoted(key, KEY_SHOWN)} is a single-stream lease's (this application reads many streams)"
        return f"leaseKey {quoted(key, KEY_SHOWN)} is not a multi-stream lease key (account:stream:epoch:shardId-...)"
    for name, expected in ((STREAM_ID, split[0].serialized), (SHARD_ID_ATTRIBUTE, split[1])):
        value = item.get(name)
        if value is None:
            return f"no {name} (Java's multi-stream serializer writes it)"
        if dict(value) != {"S": expected}:
            shown = quoted(str(value.get("S", value)), KEY_SHOWN)
            return f"{name} {shown} is not the {'stream' if name == STREAM_ID else 'shard'} of leaseKey " \
                   f"{quoted(key, KEY_SHOWN)}"
    if split[0].name not in streams:
        return f"a lease of stream {quoted(split[0].name, KEY_SHOWN)}, which this application does not read"
    return None


def quoted(text: str, limit: int = 60) -> str:
    """``text`` for a message about a row: quoted with its control characters escaped (``repr``), cut at ``limit``."""
    return repr(text[:limit]) + ("..." if len(text) > limit else "")


@dataclass(frozen=True)
class Lease:
    key: str
    owner: str | None = None
    counter: int = 0
    checkpoint: ExtendedSequenceNumber | None = None
    pending_checkpoint: ExtendedSequenceNumber | None = None
    owner_switches_since_checkpoint: int = 0
    parent_shard_ids: tuple[str, ...] = ()
    child_shard_ids: tuple[str, ...] = ()
    hash_range: tuple[int, int] | None = None
    checkpoint_owner: str | None = None
    # A multi-stream application's lease: its stream (key "<stream>:<shard id>", Java's two extra attributes).
    stream: StreamIdentifier | None = None
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @property
    def is_shard_end(self) -> bool:
        return self.checkpoint is not None and self.checkpoint.sequence_number == SHARD_END

    @property
    def holder(self) -> str | None:
        """Who processes the shard: during a KCL 3.x handoff the old owner (checkpointOwner)
        until it has checkpointed, then the new one (leaseOwner)."""
        return self.checkpoint_owner or self.owner

    @property
    def parent_keys(self) -> tuple[str, ...]:
        """Its parents' lease keys: their shard ids, within its stream for a multi-stream lease.

        >>> Lease("1:a:7:shardId-000000000002", parent_shard_ids=("shardId-000000000000",),
        ...       stream=StreamIdentifier("1", "a", 7)).parent_keys
        ('1:a:7:shardId-000000000000',)
        """
        if self.stream is None:
            return self.parent_shard_ids
        return tuple(self.stream.lease_key(parent) for parent in self.parent_shard_ids)

    def with_(self, **changes: Any) -> Lease:
        return replace(self, **changes)

    @classmethod
    def from_item(cls, item: Mapping[str, Mapping[str, Any]]) -> Lease:
        def s(name: str) -> str | None:
            value = item.get(name)
            return None if value is None else value.get("S")

        def n(name: str) -> int | None:
            value = item.get(name)
            return None if value is None or "N" not in value else int(value["N"])

        checkpoint = None
        if s(CHECKPOINT) is not None:
            checkpoint = ExtendedSequenceNumber(s(CHECKPOINT) or "", n(CHECKPOINT_SUB) or 0)
        pending = None
        if s(PENDING_CHECKPOINT):
            pending = ExtendedSequenceNumber(s(PENDING_CHECKPOINT) or "", n(PENDING_CHECKPOINT_SUB) or 0)
        split = split_key(s(LEASE_KEY) or "")
        modelled = _MODELLED | {STREAM_ID, SHARD_ID_ATTRIBUTE} if split else _MODELLED
        hash_range = None
        if s(STARTING_HASH_KEY) and s(ENDING_HASH_KEY):
            hash_range = (int(s(STARTING_HASH_KEY) or 0), int(s(ENDING_HASH_KEY) or 0))
        return cls(
            key=s(LEASE_KEY) or "",
            owner=s(LEASE_OWNER),
            counter=n(LEASE_COUNTER) or 0,
            checkpoint=checkpoint,
            pending_checkpoint=pending,
            owner_switches_since_checkpoint=n(OWNER_SWITCHES) or 0,
            parent_shard_ids=tuple(sorted(item.get(PARENT_SHARD_IDS, {}).get("SS", ()))),
            child_shard_ids=tuple(sorted(item.get(CHILD_SHARD_IDS, {}).get("SS", ()))),
            hash_range=hash_range,
            checkpoint_owner=s(CHECKPOINT_OWNER),
            stream=split[0] if split else None,
            extra={k: v for k, v in item.items() if k not in modelled},
        )

    def new_item(self) -> dict[str, dict[str, Any]]:
        """The item a new lease is created as: ``to_item`` marked a lease, as Java 3.5's
        ``DynamoDBLeaseSerializer.toDynamoRecord`` marks every lease it writes (``entityType``
        LEASE, in every mode; a real 3.5.1 worker's leases carry it). 3.1-3.4 write none and
        read past it, as they read past any attribute they do not know.

        >>> Lease("shardId-000000000000").new_item()["entityType"]
        {'S': 'LEASE'}
        """
        return {**self.to_item(), ENTITY_TYPE: {"S": LEASE_ENTITY}}

    def to_item(self) -> dict[str, dict[str, Any]]:
        """The whole item, as Java's ``toDynamoRecord`` would write it (plus ``extra``)."""
        item: dict[str, dict[str, Any]] = dict(self.extra)
        item[LEASE_KEY] = {"S": self.key}
        item[LEASE_COUNTER] = {"N": str(self.counter)}
        if self.owner is not None:
            item[LEASE_OWNER] = {"S": self.owner}
        item[OWNER_SWITCHES] = {"N": str(self.owner_switches_since_checkpoint)}
        if self.checkpoint is not None:
            item[CHECKPOINT] = {"S": self.checkpoint.sequence_number}
            item[CHECKPOINT_SUB] = {"N": str(self.checkpoint.sub_sequence_number)}
        if self.parent_shard_ids:
            item[PARENT_SHARD_IDS] = {"SS": list(self.parent_shard_ids)}
        if self.child_shard_ids:
            item[CHILD_SHARD_IDS] = {"SS": list(self.child_shard_ids)}
        if self.pending_checkpoint is not None:
            item[PENDING_CHECKPOINT] = {"S": self.pending_checkpoint.sequence_number}
            item[PENDING_CHECKPOINT_SUB] = {"N": str(self.pending_checkpoint.sub_sequence_number)}
        if self.hash_range is not None:
            item[STARTING_HASH_KEY] = {"S": str(self.hash_range[0])}
            item[ENDING_HASH_KEY] = {"S": str(self.hash_range[1])}
        if self.checkpoint_owner is not None:
            item[CHECKPOINT_OWNER] = {"S": self.checkpoint_owner}
        if self.stream is not None:  # DynamoDBMultiStreamLeaseSerializer's two attributes
            item[STREAM_ID] = {"S": self.stream.serialized}
            item[SHARD_ID_ATTRIBUTE] = {"S": shard_of(self.key)}
        return item


def released_by(lease: Lease, now_ms: int) -> str | None:
    """The worker that gave ``lease`` up and asked to be left out of it until a time not yet
    passed (epoch ms; ``table.give_up``), or None.

    >>> lease = Lease("s0", None, 3, extra={RELEASED_BY: {"S": "a"}, RELEASED_UNTIL: {"N": "2000"}})
    >>> released_by(lease, 1000), released_by(lease, 2000)
    ('a', None)
    """
    by, until = lease.extra.get(RELEASED_BY), lease.extra.get(RELEASED_UNTIL)
    if not (isinstance(by, Mapping) and isinstance(until, Mapping)):
        return None
    try:
        return str(by["S"]) if int(until["N"]) > now_ms else None
    except (KeyError, ValueError):
        return None

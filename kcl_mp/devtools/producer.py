"""A test-and-demo producer: puts records, a share of them KPL-aggregated.

Each user record's data is ``{"id": n}`` so a consumer can prove every record arrived
exactly once. Returns what it put (shard, sequence number, sub-sequence, key, data) as
Kinesis reported it, the ground truth a test compares deliveries with.

Like the KPL, an aggregate holds only user records whose partition keys hash into the
shard the aggregate goes to: a KCL (Java's, and kcl-mp) drops user records of an aggregate
that fall outside its shard's range. When a stale shard map (around a reshard) put some
there anyway, they are put again alone, as the KPL's retrier does, and the aggregated
copy's ``Put`` says ``dropped``.

``misplaced_share``: the KPL with a stale shard map. That share of the aggregates holds a user
record of another shard besides those of the shard it goes to, and (as the KPL's retrier,
whose wrong-shard rule puts again what landed on a shard that does not own it) each user
record of *any* aggregate that landed outside the hash range of the shard that took it is
put again on its own, so Kinesis routes it to the shard that owns it. The aggregated copy's
``Put`` says ``dropped``: a reader that drops out-of-range user records (the Java KCL,
kcl-mp) delivers each id once, from the copy put alone. Aggregates put with ranges listed
before a reshard are put right the same way.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from aws_kinesis_agg.aggregator import RecordAggregator

PUT_RECORDS_MAX = 500


@dataclass(frozen=True)
class Put:
    id: int
    partition_key: str
    data: str
    shard_id: str
    sequence_number: str
    sub_sequence_number: int
    dropped: bool = False  # a user record of an aggregate on a shard not owning its key: the copy a KCL drops


def _payload(n: int) -> str:
    return f'{{"id": {n}}}'


def produce(
    kinesis: Any,
    stream_name: str,
    count: int,
    *,
    first_id: int = 0,
    aggregated_share: float = 0.1,
    per_aggregate: int = 5,
    keys: int = 64,
    seed: int = 0,
    misplaced_share: float = 0.0,
) -> list[Put]:
    """Put ``count`` user records; ``aggregated_share`` of the puts carry ``per_aggregate`` each,
    and ``misplaced_share`` of those aggregates hold a user record of another shard (see the
    module's doc: then each user record that landed on a shard not owning it is put again
    alone, and the returned list holds both copies, the aggregated one ``dropped``)."""
    if not 0 <= misplaced_share <= 1:
        raise ValueError(f"misplaced_share is a share, 0 to 1: {misplaced_share}")
    rng = random.Random(seed)
    puts: list[Put] = []
    pending: list[tuple[dict[str, Any], list[tuple[int, str, str]]]] = []
    ranges = _open_ranges(kinesis, stream_name) if aggregated_share > 0 else []
    # as the KPL's retrier: any aggregate that landed on a shard not owning some of its user
    # records (a stale shard map around a reshard) has those put again alone; a reader that
    # drops them from the aggregate (the Java KCL, kcl-mp) then delivers each id once
    resend = _Resender(kinesis, stream_name) if aggregated_share > 0 else None
    for entry in _entries(rng, count, first_id, aggregated_share, per_aggregate, keys, ranges, misplaced_share):
        pending.append(entry)
        if len(pending) == PUT_RECORDS_MAX:
            puts.extend(_flush(kinesis, stream_name, pending, resend))
            pending = []
    if pending:
        puts.extend(_flush(kinesis, stream_name, pending, resend))
    return puts


@dataclass(frozen=True)
class _Listing:
    at: float  # time.monotonic() of the listing
    open: list[tuple[int, int]]  # the open shards' hash key ranges
    ranges: dict[str, tuple[int, int]]  # every listed shard's, by id


_LISTINGS: dict[tuple[int, str], _Listing] = {}
RANGES_TTL_S = 10.0  # a producer called every 0.1 s lists the shards once in a while, not each time


def _list(kinesis: Any, stream: str) -> _Listing:
    ranges: dict[str, tuple[int, int]] = {}
    open_ranges = []
    kwargs: dict[str, Any] = {"StreamName": stream}
    for _ in range(100):  # bounded paging
        page = kinesis.list_shards(**kwargs)
        for shard in page["Shards"]:
            hash_range = (int(shard["HashKeyRange"]["StartingHashKey"]), int(shard["HashKeyRange"]["EndingHashKey"]))
            ranges[shard["ShardId"]] = hash_range
            if "EndingSequenceNumber" not in shard["SequenceNumberRange"]:
                open_ranges.append(hash_range)
        if not page.get("NextToken"):
            break
        kwargs = {"NextToken": page["NextToken"]}
    listing = _Listing(time.monotonic(), open_ranges, ranges)
    _LISTINGS[(id(kinesis), stream)] = listing
    return listing


def _open_ranges(kinesis: Any, stream: str) -> list[tuple[int, int]]:
    """The hash key ranges of the stream's open shards (listed at most every RANGES_TTL_S:
    stale ranges around a reshard only mix two shards' keys in an aggregate, as the KPL can)."""
    cached = _LISTINGS.get((id(kinesis), stream))
    if cached is not None and time.monotonic() - cached.at < RANGES_TTL_S:
        return cached.open
    return _list(kinesis, stream).open


def _hash(key: str) -> int:
    """Where Kinesis routes a record without an explicit hash key: the MD5 of its partition key."""
    return int(hashlib.md5(key.encode()).hexdigest(), 16)


def _shard_of(key: str, ranges: list[tuple[int, int]]) -> int:
    hashed = _hash(key)
    return next((i for i, (low, high) in enumerate(ranges) if low <= hashed <= high), -1)


class _Resender:
    """The KPL retrier's wrong-shard rule: which user records of an aggregate landed on a
    shard whose hash key range does not hold their key (a shard the listing does not know,
    a reshard's child, is looked up by listing again)."""

    def __init__(self, kinesis: Any, stream: str):
        self.kinesis, self.stream = kinesis, stream

    def range_of(self, shard_id: str) -> tuple[int, int]:
        cached = _LISTINGS.get((id(self.kinesis), self.stream))
        if cached is None or shard_id not in cached.ranges:
            cached = _list(self.kinesis, self.stream)
        if shard_id not in cached.ranges:
            raise RuntimeError(f"PutRecords put to {shard_id}, which ListShards of {self.stream} does not show")
        return cached.ranges[shard_id]

    def misplaced(self, shard_id: str, users: list[tuple[int, str, str]]) -> list[bool]:
        low, high = self.range_of(shard_id)
        return [not low <= _hash(key) <= high for _, key, _ in users]


def _keys_for_one_shard(rng: random.Random, keys: int, n: int, ranges: list[tuple[int, int]]) -> list[str]:
    """``n`` random keys that hash into the shard of the first (bounded draws; the first
    key again when the key space has too few)."""
    first = f"key-{rng.randrange(keys)}"
    shard = _shard_of(first, ranges)
    out = [first]
    for _ in range(200 * n):
        if len(out) == n:
            break
        key = f"key-{rng.randrange(keys)}"
        if not ranges or _shard_of(key, ranges) == shard:
            out.append(key)
    return out + [first] * (n - len(out))


def _keys_across_shards(rng: random.Random, keys: int, n: int, ranges: list[tuple[int, int]]) -> list[str]:
    """``n`` keys of one shard but one, at a random place after the first, of another shard
    when the stream has another (bounded draws): an aggregate the KPL put with a stale shard
    map, one of whose user records is put again."""
    out = _keys_for_one_shard(rng, keys, n, ranges)
    if n >= 2 and len(ranges) > 1:
        shard = _shard_of(out[0], ranges)
        for _ in range(200):
            key = f"key-{rng.randrange(keys)}"
            if _shard_of(key, ranges) != shard:
                out[rng.randrange(1, n)] = key
                break
    return out


def _entries(rng: random.Random, count: int, first_id: int, share: float, per: int, keys: int,
             ranges: list[tuple[int, int]], misplaced_share: float = 0.0,
             ) -> Iterator[tuple[dict[str, Any], list[tuple[int, str, str]]]]:
    n = first_id
    end = first_id + count
    while n < end:
        if rng.random() < share and end - n >= 2:
            ids = range(n, min(end, n + per))
            # the draw is made only when asked for, so the default's puts stay what they were
            pick = _keys_across_shards if misplaced_share and rng.random() < misplaced_share else _keys_for_one_shard
            users = [(i, key, _payload(i)) for i, key in zip(ids, pick(rng, keys, len(ids), ranges))]
            agg = RecordAggregator()
            for _, key, data in users:
                agg.add_user_record(key, data.encode())
            key, ehk, blob = agg.clear_and_get().get_contents()
            entry: dict[str, Any] = {"Data": blob, "PartitionKey": key}
            if ehk:
                entry["ExplicitHashKey"] = ehk
            yield entry, users
            n += len(users)
        else:
            key = f"key-{rng.randrange(keys)}"
            yield {"Data": _payload(n).encode(), "PartitionKey": key}, [(n, key, _payload(n))]
            n += 1


def _flush(kinesis: Any, stream: str, batch: list[tuple[dict[str, Any], list[tuple[int, str, str]]]],
           resend: _Resender | None = None) -> list[Put]:
    """PutRecords, retrying only the failed entries (bounded), in order; with ``resend``, then
    each user record an aggregate put on a shard not owning it, alone (plain records: Kinesis
    routes each to the shard that owns its key, and a reader never drops a plain record)."""
    out: list[Put] = []
    again: list[tuple[dict[str, Any], list[tuple[int, str, str]]]] = []
    todo = batch
    for _ in range(20):
        response = kinesis.put_records(StreamName=stream, Records=[e for e, _ in todo])
        retry = []
        for (entry, users), result in zip(todo, response["Records"]):
            if "ErrorCode" in result:
                retry.append((entry, users))
                continue
            aggregated = len(users) > 1
            wrong = resend.misplaced(result["ShardId"], users) if resend and aggregated else [False] * len(users)
            for sub, ((i, key, data), dropped) in enumerate(zip(users, wrong)):
                out.append(Put(i, key, data, result["ShardId"], result["SequenceNumber"],
                               sub if aggregated else 0, dropped))
                if dropped:
                    again.append(({"Data": data.encode(), "PartitionKey": key}, [(i, key, data)]))
        if not retry:
            for start in range(0, len(again), PUT_RECORDS_MAX):
                out += _flush(kinesis, stream, again[start:start + PUT_RECORDS_MAX])
            return out
        todo = retry
    raise RuntimeError(f"PutRecords kept failing for {len(todo)} entries")

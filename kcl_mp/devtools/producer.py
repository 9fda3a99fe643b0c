"""A test-and-demo producer: puts records, a share of them KPL-aggregated.

Each user record's data is ``{"id": n}`` so a consumer can prove every record arrived
exactly once. Returns what it put (shard, sequence number, sub-sequence, key, data) as
Kinesis reported it, the ground truth a test compares deliveries with.

Like the KPL, an aggregate holds only user records whose partition keys hash into the
shard the aggregate goes to: a KCL (Java's, and any that filters by hash range) drops
user records of an aggregate that fall outside its shard's range.
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
) -> list[Put]:
    """Put ``count`` user records; ``aggregated_share`` of the puts carry ``per_aggregate`` each."""
    rng = random.Random(seed)
    puts: list[Put] = []
    pending: list[tuple[dict[str, Any], list[tuple[int, str, str]]]] = []
    ranges = _open_ranges(kinesis, stream_name) if aggregated_share > 0 else []
    for entry in _entries(rng, count, first_id, aggregated_share, per_aggregate, keys, ranges):
        pending.append(entry)
        if len(pending) == PUT_RECORDS_MAX:
            puts.extend(_flush(kinesis, stream_name, pending))
            pending = []
    if pending:
        puts.extend(_flush(kinesis, stream_name, pending))
    return puts


_RANGES: dict[tuple[int, str], tuple[float, list[tuple[int, int]]]] = {}
RANGES_TTL_S = 10.0  # a producer called every 0.1 s lists the shards once in a while, not each time


def _open_ranges(kinesis: Any, stream: str) -> list[tuple[int, int]]:
    """The hash key ranges of the stream's open shards (listed at most every RANGES_TTL_S:
    stale ranges around a reshard only mix two shards' keys in an aggregate, as the KPL can)."""
    cached = _RANGES.get((id(kinesis), stream))
    if cached is not None and time.monotonic() - cached[0] < RANGES_TTL_S:
        return cached[1]
    ranges, kwargs = [], {"StreamName": stream}
    for _ in range(100):  # bounded paging
        page = kinesis.list_shards(**kwargs)
        ranges += [(int(s["HashKeyRange"]["StartingHashKey"]), int(s["HashKeyRange"]["EndingHashKey"]))
                   for s in page["Shards"] if "EndingSequenceNumber" not in s["SequenceNumberRange"]]
        if not page.get("NextToken"):
            break
        kwargs = {"NextToken": page["NextToken"]}
    _RANGES[(id(kinesis), stream)] = (time.monotonic(), ranges)
    return ranges


def _shard_of(key: str, ranges: list[tuple[int, int]]) -> int:
    hashed = int(hashlib.md5(key.encode()).hexdigest(), 16)
    return next((i for i, (low, high) in enumerate(ranges) if low <= hashed <= high), -1)


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


def _entries(rng: random.Random, count: int, first_id: int, share: float, per: int, keys: int,
             ranges: list[tuple[int, int]]) -> Iterator[tuple[dict[str, Any], list[tuple[int, str, str]]]]:
    n = first_id
    end = first_id + count
    while n < end:
        if rng.random() < share and end - n >= 2:
            ids = range(n, min(end, n + per))
            users = [(i, key, _payload(i)) for i, key in zip(ids, _keys_for_one_shard(rng, keys, len(ids), ranges))]
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


def _flush(kinesis: Any, stream: str, batch: list[tuple[dict[str, Any], list[tuple[int, str, str]]]]) -> list[Put]:
    """PutRecords, retrying only the failed entries (bounded), in order."""
    out: list[Put] = []
    todo = batch
    for _ in range(20):
        response = kinesis.put_records(StreamName=stream, Records=[e for e, _ in todo])
        retry = []
        for (entry, users), result in zip(todo, response["Records"]):
            if "ErrorCode" in result:
                retry.append((entry, users))
                continue
            for sub, (i, key, data) in enumerate(users):
                out.append(Put(i, key, data, result["ShardId"], result["SequenceNumber"],
                               sub if len(users) > 1 else 0))
        if not retry:
            return out
        todo = retry
    raise RuntimeError(f"PutRecords kept failing for {len(todo)} entries")

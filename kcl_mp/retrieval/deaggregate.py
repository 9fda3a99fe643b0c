"""Kinesis records to multilang user records, de-aggregating KPL containers.

A KPL aggregated record is ``MAGIC + protobuf(AggregatedRecord) + md5(protobuf)``
(aws_kinesis_agg's format and schema). Each inner record becomes one user record with the
container's sequence number and arrival time, its own partition key and data, and
sub-sequence numbers 0, 1, 2... in container order. A record with the magic bytes but a
bad digest or body is delivered as an ordinary record, as the Java daemon does.

User records are plain tuples in the order of the multilang record object:
``(data_base64, partition_key, sequence_number, arrival_ms, sub_sequence_number)``.

The fast path: the shard worker's Kinesis client leaves ``Data`` as the base64 text of the
wire and ``ApproximateArrivalTimestamp`` as its epoch-seconds number
(``aws.clients.client(..., raw_records=True)``: GetRecords answers and SubscribeToShard
events as orjson decodes them, see ``aws.raw_records``), and the multilang protocol wants base64
too, so an ordinary record goes through untouched: no decode, no re-encode. Only a record
whose text starts like the KPL magic (``84maw``: every base64 of ``F3 89 9A C2 ...`` does)
is decoded. Pages with bytes and datetimes (boto3's defaults) are handled as well.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import operator
import sys
from bisect import bisect_right
from collections.abc import Iterable, Iterator
from itertools import accumulate, repeat
from typing import Any

import aws_kinesis_agg
from aws_kinesis_agg.deaggregator import messages_pb2  # the import that makes the schema loadable

from kcl_mp.sequence import ExtendedSequenceNumber

MAGIC = aws_kinesis_agg.MAGIC
DIGEST_SIZE = aws_kinesis_agg.DIGEST_SIZE
MAGIC_BASE64 = base64.b64encode(MAGIC)[:5].decode()  # "84maw": fixed for any data after the magic

UserRecord = tuple[str, str, str, int, int]

log = logging.getLogger("kcl_mp.deaggregate")


def _arrival_ms(stamp: Any) -> int:
    """Epoch milliseconds; kclpy and .NET need an integer, never null (PROTOCOL.md 3.2)."""
    if stamp is None:
        return 0
    if isinstance(stamp, (int, float)):  # the wire's epoch seconds (the fast path)
        return round(stamp * 1000)
    return round(stamp.timestamp() * 1000)  # boto3's datetime


def is_aggregate(data: str | bytes) -> bool:
    """Whether a record's ``Data`` (the wire's base64, or bytes) starts as a KPL aggregate does
    (``user_record_runs`` tells the two apart inline, on the daemon's hot path)."""
    return data.startswith(MAGIC_BASE64) if isinstance(data, str) else data[:4] == MAGIC


def _inner_records(data: bytes) -> Any | None:
    if len(data) <= len(MAGIC) + DIGEST_SIZE or not data.startswith(MAGIC):
        return None
    body = data[len(MAGIC) : -DIGEST_SIZE]
    if hashlib.md5(body).digest() != data[-DIGEST_SIZE:]:
        return None
    aggregated = messages_pb2.AggregatedRecord()
    try:
        aggregated.ParseFromString(body)
    except Exception:  # protobuf's DecodeError and friends: deliver the bytes as they are
        return None
    return aggregated


def user_records(records: Iterable[dict[str, Any]], after: ExtendedSequenceNumber | None = None) -> list[UserRecord]:
    """The user records of a GetRecords page, dropping those at or below ``after``.

    ``after`` is the checkpoint a worker resumed from (AT_SEQUENCE_NUMBER re-reads the
    checkpointed container, so its already-processed sub-records must go).
    """
    return next(user_record_runs(records, after, sys.maxsize), [])


def _in_range(aggregated: Any, inner: Any, key: str, hash_range: tuple[int, int]) -> bool:
    """Whether a KPL user record hashes into ``hash_range``: its explicit hash key if it has
    one, else the MD5 of its partition key (as Kinesis routes a record)."""
    if inner.HasField("explicit_hash_key_index"):
        try:
            hashed = int(aggregated.explicit_hash_key_table[inner.explicit_hash_key_index])
        except (IndexError, ValueError):
            return True  # a malformed table: deliver rather than drop
    else:
        hashed = int.from_bytes(hashlib.md5(key.encode()).digest(), "big")
    return hash_range[0] <= hashed <= hash_range[1]


def user_record_runs(records: Iterable[dict[str, Any]], after: ExtendedSequenceNumber | None,
                     run: int, hash_range: tuple[int, int] | None = None) -> Iterator[list[UserRecord]]:
    """``user_records`` in order, as lists of at most ``run``, each made only when the one
    before was taken: one 1 MB aggregate may hold 170,000 user records (6 bytes each), a page
    of ten such a list of 1.7 million tuples (about 300 MB) if made at once.

    ``hash_range``: the shard's; a KPL user record outside it is dropped, as the Java KCL does
    (AggregatorUtil.deaggregate): the KPL put its aggregate with a stale shard map, and sends
    the records that landed on the wrong shard again to the right one (its retrier's
    wrong-shard rule), so the dropped copy is a duplicate. Logged at DEBUG with the count.

    >>> page = [{"SequenceNumber": str(n), "Data": "YQ==", "PartitionKey": "k"} for n in range(5)]
    >>> [len(users) for users in user_record_runs(page, None, 2)]
    [2, 2, 1]
    """
    out: list[UserRecord] = []
    b64 = base64.b64encode
    floor = None if after is None or after.is_sentinel else after.sort_key()
    for record in records:
        seq = record["SequenceNumber"]
        data = record["Data"]
        arrival = _arrival_ms(record.get("ApproximateArrivalTimestamp"))
        if isinstance(data, str):  # base64 from the wire
            aggregated = _inner_records(base64.b64decode(data)) if data.startswith(MAGIC_BASE64) else None
            text = data
        else:
            aggregated = _inner_records(data) if data[:4] == MAGIC else None
            text = None
        if aggregated is None:
            if floor is not None and (int(seq), 0) <= floor:
                continue
            out.append((text if text is not None else b64(data).decode("ascii"), record["PartitionKey"], seq,
                        arrival, 0))
            if len(out) >= run:
                yield out
                out = []
            continue
        keys = aggregated.partition_key_table
        dropped = 0
        for sub, inner in enumerate(aggregated.records):
            if floor is not None and (int(seq), sub) <= floor:
                continue
            try:
                key = keys[inner.partition_key_index]
            except IndexError:
                log.warning("KPL record %s/%d names partition key index %d of %d; using the container's key",
                            seq, sub, inner.partition_key_index, len(keys))
                key = record["PartitionKey"]
            if hash_range is not None and not _in_range(aggregated, inner, key, hash_range):
                dropped += 1
                continue
            out.append((b64(inner.data).decode("ascii"), key, seq, arrival, sub))
            if len(out) >= run:
                yield out
                out = []
        if dropped:
            log.debug("KPL record %s: %d user records outside the shard's hash range dropped", seq, dropped)
    if out:
        yield out


# What a user record adds to its processRecords line besides its data, partition key and
# sequence number: the record object's keys and separators, an arrival time of 13 digits and a
# sub-sequence number of up to 6 (the format multilang.wire writes; a unit test holds the two
# together). Control characters in a partition key (escaped) and multi-byte ones count more.
LINE_OVERHEAD = len(b'{"data":"","partitionKey":"","sequenceNumber":"","approximateArrivalTimestamp":1700000000000,'
                    b'"subSequenceNumber":100000,"action":"record"},')


def line_slices(users: list[UserRecord], max_bytes: int) -> Iterator[list[UserRecord]]:
    """``users`` in slices whose processRecords lines stay within about ``max_bytes`` (a
    record longer than that alone in its slice), by the length of each record's text.

    >>> users = [("YWJj", "k", "1", 0, 0)] * 5
    >>> [len(part) for part in line_slices(users, 2 * (LINE_OVERHEAD + 6))]
    [2, 2, 1]
    """
    if sum(sum(map(len, map(field, users))) for field in _TEXTS) + LINE_OVERHEAD * len(users) <= max_bytes:
        yield users  # the common case: one line
        return
    data, keys, sequences = (map(len, map(field, users)) for field in _TEXTS)
    ends = list(accumulate(map(_add, map(_add, map(_add, data, keys), sequences), repeat(LINE_OVERHEAD))))
    start, before = 0, 0
    while start < len(users):
        end = max(start + 1, bisect_right(ends, before + max_bytes, start))
        yield users[start:end]
        start, before = end, ends[end - 1]


def page_slices(records: Iterable[dict[str, Any]], after: ExtendedSequenceNumber | None, max_records: int,
                max_bytes: int, hash_range: tuple[int, int] | None = None) -> Iterator[list[UserRecord]]:
    """A page's user records (``user_records``) in the slices of one processRecords line
    each: at most ``max_records`` records and about ``max_bytes`` bytes; made as they are
    taken (``user_record_runs``, which drops KPL user records outside ``hash_range``)."""
    for run in user_record_runs(records, after, max_records, hash_range):
        yield from line_slices(run, max_bytes)


_DATA = operator.itemgetter(0)
_TEXTS = (_DATA, operator.itemgetter(1), operator.itemgetter(2))  # data, partition key, sequence number
_add = operator.add


def data_bytes(users: list[UserRecord]) -> int:
    """Bytes of data in these user records, from the base64 text (no decoding): 3 bytes per 4
    characters, so at most 2 bytes a record over (its padding).

    >>> data_bytes([("YWJj", "k", "1", 0, 0), ("YQ==", "k", "2", 0, 0)])
    6
    """
    return sum(map(len, map(_DATA, users))) * 3 // 4

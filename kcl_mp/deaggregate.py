"""Kinesis records to multilang user records, de-aggregating KPL containers.

A KPL aggregated record is ``MAGIC + protobuf(AggregatedRecord) + md5(protobuf)``
(aws_kinesis_agg's format and schema). Each inner record becomes one user record with the
container's sequence number and arrival time, its own partition key and data, and
sub-sequence numbers 0, 1, 2... in container order. A record with the magic bytes but a
bad digest or body is delivered as an ordinary record, as the Java daemon does.

User records are plain tuples in the order of the multilang record object:
``(data_base64, partition_key, sequence_number, arrival_ms, sub_sequence_number)``.
"""

from __future__ import annotations

import base64
import hashlib
import logging
from typing import Any, Iterable

import aws_kinesis_agg
from aws_kinesis_agg.deaggregator import messages_pb2  # the import that makes the schema loadable

from .lease import ExtendedSequenceNumber

MAGIC = aws_kinesis_agg.MAGIC
DIGEST_SIZE = aws_kinesis_agg.DIGEST_SIZE

UserRecord = tuple[str, str, str, int, int]

log = logging.getLogger(__name__)


def _arrival_ms(record: dict[str, Any]) -> int:
    # boto3 gives a datetime; kclpy and .NET need an integer, never null (PROTOCOL.md 3.2).
    stamp = record.get("ApproximateArrivalTimestamp")
    return int(stamp.timestamp() * 1000) if stamp is not None else 0


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
    out: list[UserRecord] = []
    b64 = base64.b64encode
    floor = None if after is None or after.is_sentinel else after.sort_key()
    for record in records:
        seq = record["SequenceNumber"]
        data = record["Data"]
        arrival = _arrival_ms(record)
        aggregated = _inner_records(data) if data[:4] == MAGIC else None
        if aggregated is None:
            if floor is not None and (int(seq), 0) <= floor:
                continue
            out.append((b64(data).decode("ascii"), record["PartitionKey"], seq, arrival, 0))
            continue
        keys = aggregated.partition_key_table
        for sub, inner in enumerate(aggregated.records):
            if floor is not None and (int(seq), sub) <= floor:
                continue
            try:
                key = keys[inner.partition_key_index]
            except IndexError:
                log.warning("KPL record %s/%d names partition key index %d of %d; using the container's key",
                            seq, sub, inner.partition_key_index, len(keys))
                key = record["PartitionKey"]
            out.append((b64(inner.data).decode("ascii"), key, seq, arrival, sub))
    return out

"""A DynamoDB Streams record as the Kinesis adapter hands it to a processor: the bytes of ``data``.

The DynamoDB Streams Kinesis Adapter (2.x: ``DynamoDBStreamsClientRecord``; 1.x the same JSON)
gives a KCL processor a Kinesis-shaped record whose data is its Jackson JSON of the stream
record. Processors written for it parse that JSON, and some compare or hash it, so kcl-mp
writes the same bytes:

- fields in the adapter's order (eventID, eventName, eventVersion, eventSource, awsRegion,
  dynamodb{ApproximateCreationDateTime, Keys, NewImage, OldImage, SequenceNumber, SizeBytes,
  StreamViewType}, userIdentity{principalId, type}), nulls left out, no spaces;
- ApproximateCreationDateTime in epoch *milliseconds* (the API and Lambda use seconds);
- attribute values in DynamoDB JSON (S, N, B as base64, BOOL, NULL, SS, NS, BS, M, L, in that
  order of kinds), the attributes of a map in the order the service sent them, and an image
  the record lacks (no OldImage on an INSERT, no NewImage on a REMOVE) as ``{}``: what the
  adapter 2.0.1 on the AWS SDK for Java 2.32 writes, seen by running it beside kcl-mp
  (tests/e2e/test_dynamodb_streams_java_adapter.py); its own serializer tests build their
  records from ``HashMap`` s, whose order they then show;
- for the 1.x daemon's records (``v1``): maps in the order ``new HashMap<>(size)`` iterates
  them and a missing image left out, as read from the 1.x source (SDK for Java 1), not run;
- strings escaped as Jackson escapes them (control characters as ``\\u00XX`` in upper case,
  everything else as UTF-8).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

TTL_PRINCIPAL = "dynamodb.amazonaws.com"
# an escaped backslash (kept), or a control character's escape (upper-cased): left to right, so
# a user's backslash followed by "u00ab" is never read as an escape
_ESCAPES = re.compile(r"\\\\|\\u00([0-9a-f]{2})")


def java_string_hash(text: str) -> int:
    """``String.hashCode()``: over UTF-16 code units, in 32-bit two's complement."""
    h = 0
    units = text.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h


def _table_size_for(n: int) -> int:
    size = 1
    while size < n:
        size <<= 1
    return size


def java_hashmap_order(keys: Iterable[str]) -> list[str]:
    """The order ``new HashMap<>(len(keys))`` iterates ``keys`` put in this order: by bucket at
    the final capacity (the hash XOR its upper 16 bits, masked), ties in insertion order
    (buckets keep it through resizes).

    >>> java_hashmap_order(["id", "name", "age"])
    ['name', 'age', 'id']
    """
    keys = list(keys)
    capacity = _table_size_for(len(keys))
    threshold = int(capacity * 0.75)
    for size in range(1, len(keys) + 1):
        if size > threshold:
            capacity <<= 1
            threshold = int(capacity * 0.75)

    def bucket(key: str) -> int:
        h = java_string_hash(key)
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(keys, key=bucket)  # sorted() is stable: insertion order within a bucket


def _binary(value: bytes | bytearray | memoryview | str) -> str:
    return value if isinstance(value, str) else base64.b64encode(bytes(value)).decode("ascii")


Order = Callable[[Iterable[str]], list[str]]  # the order a map's attributes are written in


def attribute_value(value: Mapping[str, Any], order: Order) -> dict[str, Any]:
    """One AttributeValue in the adapter's order of kinds; binary as base64 (boto3 gives bytes)."""
    out: dict[str, Any] = {}
    if "S" in value:
        out["S"] = value["S"]
    if "N" in value:
        out["N"] = str(value["N"])
    if "B" in value:
        out["B"] = _binary(value["B"])
    if "BOOL" in value:
        out["BOOL"] = bool(value["BOOL"])
    if "NULL" in value:
        out["NULL"] = bool(value["NULL"])
    if "SS" in value:
        out["SS"] = list(value["SS"])
    if "NS" in value:
        out["NS"] = [str(n) for n in value["NS"]]
    if "BS" in value:
        out["BS"] = [_binary(b) for b in value["BS"]]
    if "M" in value:
        out["M"] = attribute_map(value["M"], order)
    if "L" in value:
        out["L"] = [attribute_value(v, order) for v in value["L"]]
    return out


def attribute_map(values: Mapping[str, Any], order: Order) -> dict[str, Any]:
    return {key: attribute_value(values[key], order) for key in order(values)}


def epoch_millis(value: Any) -> int:
    """ApproximateCreationDateTime (a datetime from boto3, or epoch seconds from the wire) in ms."""
    if isinstance(value, datetime):
        return int(Decimal(str(value.timestamp())) * 1000)
    return int(Decimal(str(value)) * 1000)


def adapter_record(record: Mapping[str, Any], v1: bool = False) -> dict[str, Any]:
    """The adapter's JSON object of one GetRecords record, as a dict in its field order (``v1``:
    the 1.x daemon's)."""
    order: Order = java_hashmap_order if v1 else list
    out: dict[str, Any] = {}
    for name in ("eventID", "eventName", "eventVersion", "eventSource", "awsRegion"):
        if record.get(name) is not None:
            out[name] = record[name]
    stream = record.get("dynamodb")
    if stream is not None:
        body: dict[str, Any] = {}
        if stream.get("ApproximateCreationDateTime") is not None:
            body["ApproximateCreationDateTime"] = epoch_millis(stream["ApproximateCreationDateTime"])
        for name in ("Keys", "NewImage", "OldImage"):
            if stream.get(name) is not None:
                body[name] = attribute_map(stream[name], order)
            elif not v1:
                body[name] = {}  # the SDK for Java 2's empty map for a missing one, which Jackson writes
        if stream.get("SequenceNumber") is not None:
            body["SequenceNumber"] = stream["SequenceNumber"]
        if stream.get("SizeBytes") is not None:
            body["SizeBytes"] = int(stream["SizeBytes"])
        if stream.get("StreamViewType") is not None:
            body["StreamViewType"] = stream["StreamViewType"]
        out["dynamodb"] = body
    identity = record.get("userIdentity")
    if identity is not None:  # the API says PrincipalId and Type, the adapter writes them as Lambda does
        found = {"principalId": identity.get("PrincipalId", identity.get("principalId")),
                 "type": identity.get("Type", identity.get("type"))}
        out["userIdentity"] = {k: v for k, v in found.items() if v is not None}
    return out


def adapter_json(record: Mapping[str, Any], v1: bool = False) -> bytes:
    """The bytes the adapter puts in ``data`` for this record (Jackson's compact UTF-8 JSON)."""
    text = json.dumps(adapter_record(record, v1), ensure_ascii=False, separators=(",", ":"))
    return _ESCAPES.sub(lambda m: m.group(0) if m.group(1) is None else "\\u00" + m.group(1).upper(),
                        text).encode("utf-8")

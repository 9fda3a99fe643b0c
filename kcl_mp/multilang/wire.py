"""The multilang protocol's wire format, pure: the bytes the daemon writes (multilang/PROTOCOL.md;
the lines the child writes are ``child_lines``'). ``protocol`` holds the conversation.

Daemon -> child lines are byte-identical to the Java daemon's (Jackson): compact JSON, keys
in Java's order, ``null`` never omitted, UTF-8 written raw, control characters escaped as
``\\b \\f \\n \\r \\t`` or ``\\u00XX`` with upper-case hex, ``/`` and DEL not escaped, one
``\\n`` after each message. orjson does all of that except the hex case, which
``_java_case`` fixes; a lone surrogate (invalid in UTF-8) becomes ``?`` as Java's encoder
writes it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from kcl_mp.errors import CheckpointOutcome, ThrottledError
from kcl_mp.sequence import ExtendedSequenceNumber

# The checkpoint errors the client libraries understand (PROTOCOL.md section 5.3).
ILLEGAL_ARGUMENT = "IllegalArgumentException"
INVALID_STATE = "InvalidStateException"
LEASE_MOVED = "ShutdownException"  # the lease is no longer this worker's
THROTTLED = "ThrottlingException"
DEPENDENCY = "KinesisClientLibDependencyException"
_CHECKPOINT_ERRORS = {
    CheckpointOutcome.LEASE_MOVED: LEASE_MOVED,
    CheckpointOutcome.INVALID_STATE: INVALID_STATE,
    CheckpointOutcome.THROTTLED: THROTTLED,
    CheckpointOutcome.FAILED: DEPENDENCY,
}


def checkpoint_error(outcome: CheckpointOutcome | BaseException | None) -> str | None:
    """The Java exception name a processor gets for a checkpoint that was not stored: the
    one mapping from the lease table's outcome (or a checkpointer's exception) to the
    protocol. None when it was stored.

    >>> checkpoint_error(CheckpointOutcome.LEASE_MOVED), checkpoint_error(None)
    ('ShutdownException', None)
    """
    if outcome is None:
        return None
    if isinstance(outcome, CheckpointOutcome):
        return _CHECKPOINT_ERRORS[outcome]
    return THROTTLED if isinstance(outcome, ThrottledError) else DEPENDENCY

INITIALIZE = "initialize"
PROCESS_RECORDS = "processRecords"
SHUTDOWN_REQUESTED = "shutdownRequested"
LEASE_LOST = "leaseLost"
SHARD_ENDED = "shardEnded"
CHECKPOINT = "checkpoint"
STATUS = "status"

# ---------------------------------------------------------------------------------------
# Encoding (daemon -> child)

_LOWER_HEX = re.compile(rb"\\(?:\\|u00[01][0-9a-f])")
_NEWLINE = orjson.OPT_APPEND_NEWLINE


def _upper(match: re.Match[bytes]) -> bytes:
    text = match.group(0)
    return text if text == b"\\\\" else b"\\u00" + text[4:].upper()


def _java_case(line: bytes) -> bytes:
    # The regex also consumes escaped backslashes, so "\\u001f" in the text (a backslash
    # followed by "u001f") is left alone. Most lines have no escape at all, and looking
    # for one byte is a memchr (a multi-byte search costs ~1 ms per MB of digits).
    return _LOWER_HEX.sub(_upper, line) if b"\\" in line else line


def _without_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, dict):
        return {k: _without_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_surrogates(v) for v in value]
    return value


def encode(message: dict[str, Any]) -> bytes:
    """One message as Java writes it, with its ``\\n``; ``message``'s key order is kept."""
    try:
        line = orjson.dumps(message, option=_NEWLINE)
    except TypeError:  # a lone surrogate: Java's UTF-8 writer puts '?' in its place
        line = orjson.dumps(_without_surrogates(message), option=_NEWLINE)
    return _java_case(line)


def encode_initialize(shard_id: str, checkpoint: ExtendedSequenceNumber | None,
                      stream: Mapping[str, str] | None = None) -> bytes:
    """``{"action":"initialize","shardId":...,"sequenceNumber":...,"subSequenceNumber":...}``, then
    a multi-stream lease's ``stream`` keys (``streamName``, ``streamArn``, ``streamIdentifier``:
    kcl-mp's, PROTOCOL.md section 3.1).

    >>> encode_initialize("shardId-000000000001", None, {"streamName": "b", "streamIdentifier": "1:b:7"})[103:]
    b'"streamName":"b","streamIdentifier":"1:b:7"}\\n'
    """
    seq = None if checkpoint is None else checkpoint.sequence_number
    sub = None if checkpoint is None else checkpoint.sub_sequence_number
    return encode({"action": INITIALIZE, "shardId": shard_id, "sequenceNumber": seq, "subSequenceNumber": sub,
                   **(stream or {})})


def encode_checkpoint_reply(sequence_number: str | None, sub_sequence_number: int | None, error: str | None) -> bytes:
    """The answer to a checkpoint request: the request echoed, and null or the error name."""
    return encode({"action": CHECKPOINT, "sequenceNumber": sequence_number,
                   "subSequenceNumber": sub_sequence_number, "error": error})


LEASE_LOST_LINE = encode({"action": LEASE_LOST})
SHARD_ENDED_LINE = encode({"action": SHARD_ENDED})
SHUTDOWN_REQUESTED_LINE = encode({"action": SHUTDOWN_REQUESTED})


@dataclass(frozen=True, slots=True)
class Batch:
    """A processRecords line ready to write, and the position its last record reaches."""

    line: bytes
    count: int
    last: ExtendedSequenceNumber | None
    millis_behind_latest: int | None


def make_batch(users: list[tuple[str, str, str, int, int]], millis_behind_latest: int | None, *,
               keyless: bool = False) -> Batch:
    """The processRecords message for de-aggregated user records (``deaggregate.user_records``).
    ``keyless``: partitionKey and subSequenceNumber written as null, as the DynamoDB Streams
    adapter 1.x's daemon wrote its records (``kclmp.dynamodbRecordFormat = ADAPTER_V1``).

    This is the data path (up to 10,000 records a call), so the work per record is one dict
    built by a comprehension; orjson writes the keys in insertion order, which is Java's.
    Records come in stream order, so the last one is the batch's largest position.

    >>> make_batch([("YQ==", "p", "7", 1700000000123, 0)], 5).line
    b'{"action":"processRecords","records":[{"data":"YQ==","partitionKey":"p","sequenceNumber":"7","approximateArrivalTimestamp":1700000000123,"subSequenceNumber":0,"action":"record"}],"millisBehindLatest":5}\\n'
    """
    records: list[dict[str, Any]]
    if keyless:
        records = [{"data": d, "partitionKey": None, "sequenceNumber": s, "approximateArrivalTimestamp": t,
                    "subSequenceNumber": None, "action": "record"} for d, _, s, t, _ in users]
    else:
        records = [
            {"data": d, "partitionKey": k, "sequenceNumber": s, "approximateArrivalTimestamp": t,
             "subSequenceNumber": u, "action": "record"}
            for d, k, s, t, u in users
        ]
    line = encode({"action": PROCESS_RECORDS, "records": records, "millisBehindLatest": millis_behind_latest})
    last = ExtendedSequenceNumber(users[-1][2], users[-1][4] or 0) if users else None
    return Batch(line, len(users), last, millis_behind_latest)

"""The multilang protocol, pure: bytes the daemon writes, lines the child writes, and the
conversation between them (../shared/multilang/PROTOCOL.md). No I/O: ``driver`` does that.

Daemon -> child lines are byte-identical to the Java daemon's (Jackson): compact JSON, keys
in Java's order, ``null`` never omitted, UTF-8 written raw, control characters escaped as
``\\b \\f \\n \\r \\t`` or ``\\u00XX`` with upper-case hex, ``/`` and DEL not escaped, one
``\\n`` after each message. orjson does all of that except the hex case, which
``_java_case`` fixes; a lone surrogate (invalid in UTF-8) becomes ``?`` as Java's encoder
writes it.

The conversation with one child is a state machine. The daemon sends an action, then
takes the child's messages until the ``status`` for it; checkpoint requests in between are
validated here and either answered at once (``Reply``) or handed out to be stored
(``Store``, then ``stored()`` gives the reply)::

      NEW --initialize--> INITIALIZING --status--> READY
      READY --processRecords--> PROCESSING --status--> READY
      READY --shutdownRequested--> SHUTTING_DOWN --status--> SHUTDOWN_REQUESTED
      READY, SHUTDOWN_REQUESTED --leaseLost--> LOSING_LEASE --status--> FINISHED
      READY, SHUTDOWN_REQUESTED --shardEnded--> ENDING_SHARD --status--> FINISHED
      any awaiting state --status for another action--> FAILED   (ProtocolError)
      any state --fail() (the driver saw an exit, a timeout, a broken pipe)--> FAILED

Nothing is sent after FINISHED or FAILED; sending out of order is a bug (RuntimeError).

Checkpoints (PROTOCOL.md 5.2, 5.3) while awaiting: INITIALIZING and LOSING_LEASE have no
checkpointer (``InvalidStateException``); PROCESSING and SHUTTING_DOWN may checkpoint up to
the last record delivered; ENDING_SHARD up to ``SHARD_END``, and checkpointing the shard's
final record stores ``SHARD_END``. A value below the last successful checkpoint, above the
limit, malformed, or with a negative sub-sequence gets ``IllegalArgumentException``; the
same value again succeeds without a write.
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass, field
from typing import Any

import orjson

from .errors import ProtocolError
from .lease import SHARD_END, ExtendedSequenceNumber, is_valid_sequence_number

ILLEGAL_ARGUMENT = "IllegalArgumentException"
INVALID_STATE = "InvalidStateException"

INITIALIZE = "initialize"
PROCESS_RECORDS = "processRecords"
SHUTDOWN_REQUESTED = "shutdownRequested"
LEASE_LOST = "leaseLost"
SHARD_ENDED = "shardEnded"
CHECKPOINT = "checkpoint"
STATUS = "status"

# The keys Java's message classes define; a line with any other key is skipped (2).
_FIELDS: dict[str, frozenset[str]] = {
    CHECKPOINT: frozenset({"action", "sequenceNumber", "subSequenceNumber", "error"}),
    STATUS: frozenset({"action", "responseFor"}),
    INITIALIZE: frozenset({"action", "shardId", "sequenceNumber", "subSequenceNumber"}),
    PROCESS_RECORDS: frozenset({"action", "records", "millisBehindLatest"}),
    "shutdown": frozenset({"action", "reason"}),
    SHUTDOWN_REQUESTED: frozenset({"action"}),
    LEASE_LOST: frozenset({"action"}),
    SHARD_ENDED: frozenset({"action"}),
}

_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1

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


def encode_initialize(shard_id: str, checkpoint: ExtendedSequenceNumber | None) -> bytes:
    """``{"action":"initialize","shardId":...,"sequenceNumber":...,"subSequenceNumber":...}``"""
    seq = None if checkpoint is None else checkpoint.sequence_number
    sub = None if checkpoint is None else checkpoint.sub_sequence_number
    return encode({"action": INITIALIZE, "shardId": shard_id, "sequenceNumber": seq, "subSequenceNumber": sub})


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


def make_batch(users: list[tuple[str, str, str, int, int]], millis_behind_latest: int | None) -> Batch:
    """The processRecords message for de-aggregated user records (``deaggregate.user_records``).

    This is the data path (up to 10,000 records a call), so the work per record is one dict
    built by a comprehension; orjson writes the keys in insertion order, which is Java's.
    Records come in stream order, so the last one is the batch's largest position.

    >>> make_batch([("YQ==", "p", "7", 1700000000123, 0)], 5).line
    b'{"action":"processRecords","records":[{"data":"YQ==","partitionKey":"p","sequenceNumber":"7","approximateArrivalTimestamp":1700000000123,"subSequenceNumber":0,"action":"record"}],"millisBehindLatest":5}\\n'
    """
    records = [
        {"data": d, "partitionKey": k, "sequenceNumber": s, "approximateArrivalTimestamp": t,
         "subSequenceNumber": u, "action": "record"}
        for d, k, s, t, u in users
    ]
    line = encode({"action": PROCESS_RECORDS, "records": records, "millisBehindLatest": millis_behind_latest})
    last = ExtendedSequenceNumber(users[-1][2], users[-1][4] or 0) if users else None
    return Batch(line, len(users), last, millis_behind_latest)


# ---------------------------------------------------------------------------------------
# Framing and parsing (child -> daemon)


class LineSplitter:
    """Cuts a byte stream into lines the way Java's BufferedReader does: at ``\\n``, ``\\r``
    or ``\\r\\n``, a final unterminated line included. A line longer than ``max_bytes`` is
    cut there (no protocol line is that long; it only bounds memory for a runaway child).
    """

    _BREAK = re.compile(rb"\r\n|\r|\n")

    def __init__(self, max_bytes: int = 16 << 20):
        self.max_bytes = max_bytes
        self._parts: list[bytes] = []  # an unfinished line, kept in pieces (no quadratic joins)
        self._size = 0
        self._after_cr = False

    def feed(self, chunk: bytes) -> list[bytes]:
        if self._after_cr and chunk[:1] == b"\n":
            chunk = chunk[1:]  # the \n of a \r\n split across two reads
        if not chunk:
            return []
        self._after_cr = chunk[-1:] == b"\r"
        lines = self._BREAK.split(chunk)
        rest = lines.pop()
        if lines and self._parts:
            lines[0] = b"".join(self._parts) + lines[0]
            self._parts, self._size = [], 0
        if rest:
            self._parts.append(rest)
            self._size += len(rest)
            if self._size > self.max_bytes:
                lines.append(b"".join(self._parts)[: self.max_bytes])
                self._parts, self._size = [], 0
        return lines

    def end(self) -> list[bytes]:
        rest = b"".join(self._parts)
        self._parts, self._size = [], 0
        return [rest] if rest else []


@dataclass(frozen=True)
class Status:
    response_for: str | None
    line: str = field(default="", compare=False)


@dataclass(frozen=True)
class CheckpointRequest:
    sequence_number: str | None
    sub_sequence_number: int | None
    line: str = field(default="", compare=False)


@dataclass(frozen=True)
class Other:
    """A known message type the daemon has no use for (a child echoing ``initialize``)."""

    action: str
    line: str = field(default="", compare=False)


@dataclass(frozen=True)
class Skip:
    """A line Java would skip, logging ``Skipping unexpected line on STDOUT``."""

    line: str
    reason: str


Message = Status | CheckpointRequest | Other


class _IntText(str):
    """A JSON integer kept as its text (Jackson coerces numbers to text for String fields)."""


class _FloatText(str):
    pass


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # Jackson rejects NaN and Infinity


_DECODER = json.JSONDecoder(parse_int=_IntText, parse_float=_FloatText, parse_constant=_no_constants)
_LONG_TEXT = re.compile(r"[+-]?[0-9]+")
_NOT_MAPPED = object()


def _as_text(value: Any) -> Any:
    """A String field's value: JSON numbers and booleans become their text, as in Jackson."""
    if value is None or isinstance(value, str):
        return None if value is None else str(value)
    return ("true" if value else "false") if isinstance(value, bool) else _NOT_MAPPED


def _as_long(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, _IntText):
        number = int(value)
    elif isinstance(value, _FloatText):
        number = int(float(value))  # Jackson truncates floats into a Long field
    elif isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        if not _LONG_TEXT.fullmatch(text):
            return _NOT_MAPPED
        number = int(text)
    else:
        return _NOT_MAPPED
    return number if _LONG_MIN <= number <= _LONG_MAX else _NOT_MAPPED


def parse_line(line: str) -> Message | Skip | None:
    """A child's stdout line (without terminator) as Java's reader sees it: None for an
    empty line (ignored silently), ``Skip`` for anything Java's mapper rejects, else the
    message. Lenient as Java: keys in any order, blanks around, trailing text after the
    first JSON value, numbers as sequence numbers and numeric strings as sub-sequences.
    """
    if not line:
        return None
    text = line.lstrip(" \t")
    try:
        value, _ = _DECODER.raw_decode(text)
    except ValueError:
        return Skip(line, "not JSON")
    if not isinstance(value, dict):
        return Skip(line, "not a JSON object")
    action = value.get("action")
    allowed = _FIELDS.get(action) if isinstance(action, str) else None
    if allowed is None:
        return Skip(line, "no known action")
    if not allowed.issuperset(value):
        return Skip(line, f"unknown property for {action}")
    if action == STATUS:
        response_for = _as_text(value.get("responseFor"))
        if response_for is _NOT_MAPPED:
            return Skip(line, "responseFor is not text")
        return Status(response_for, line)
    if action == CHECKPOINT:
        seq = _as_text(value.get("sequenceNumber"))
        sub = _as_long(value.get("subSequenceNumber"))
        if seq is _NOT_MAPPED or sub is _NOT_MAPPED:
            return Skip(line, "checkpoint fields of the wrong type")
        return CheckpointRequest(seq, sub, line)
    return Other(str(action), line)


# ---------------------------------------------------------------------------------------
# The conversation


class ChildState(enum.Enum):
    NEW = "new"
    INITIALIZING = "initializing"
    READY = "ready"
    PROCESSING = "processing"
    SHUTTING_DOWN = "shutting down"
    SHUTDOWN_REQUESTED = "shutdown requested"
    LOSING_LEASE = "losing lease"
    ENDING_SHARD = "ending shard"
    FINISHED = "finished"
    FAILED = "failed"


S = ChildState
# (state, action sent) -> state while its status is awaited
SEND: dict[tuple[ChildState, str], ChildState] = {
    (S.NEW, INITIALIZE): S.INITIALIZING,
    (S.READY, PROCESS_RECORDS): S.PROCESSING,
    (S.READY, SHUTDOWN_REQUESTED): S.SHUTTING_DOWN,
    (S.READY, LEASE_LOST): S.LOSING_LEASE,
    (S.READY, SHARD_ENDED): S.ENDING_SHARD,
    (S.SHUTDOWN_REQUESTED, LEASE_LOST): S.LOSING_LEASE,
    (S.SHUTDOWN_REQUESTED, SHARD_ENDED): S.ENDING_SHARD,
}
# awaiting state -> (the responseFor it needs, the state once it arrives)
AWAIT: dict[ChildState, tuple[str, ChildState]] = {
    S.INITIALIZING: (INITIALIZE, S.READY),
    S.PROCESSING: (PROCESS_RECORDS, S.READY),
    S.SHUTTING_DOWN: (SHUTDOWN_REQUESTED, S.SHUTDOWN_REQUESTED),
    S.LOSING_LEASE: (LEASE_LOST, S.FINISHED),
    S.ENDING_SHARD: (SHARD_ENDED, S.FINISHED),
}
_CHECKPOINTABLE = frozenset({S.PROCESSING, S.SHUTTING_DOWN, S.ENDING_SHARD})
_SHARD_END = ExtendedSequenceNumber(SHARD_END)
del S


@dataclass(frozen=True)
class Reply:
    """Write ``line`` to the child now (a checkpoint answered without storing anything)."""

    line: bytes


@dataclass(frozen=True)
class Store:
    """Store ``position`` in the lease table, then write ``Conversation.stored(...)``."""

    position: ExtendedSequenceNumber
    request: CheckpointRequest


@dataclass(frozen=True)
class Done:
    """The status for ``action`` arrived; the next action may be sent."""

    action: str


@dataclass(frozen=True)
class Ignored:
    """A known message that is not a reply (Java accepts and drops it)."""

    action: str


Outcome = Reply | Store | Done | Ignored


class Conversation:
    """The daemon's side of one child's protocol, as the transition table above.

    ``last_checkpoint`` starts at the lease checkpoint given to ``initialize`` and moves
    only when a ``Store`` is reported successful; ``largest`` is the highest position the
    child may checkpoint (its last delivered record, or SHARD_END at shard end).
    """

    def __init__(self, shard_id: str):
        self.shard_id = shard_id
        self.state = ChildState.NEW
        self.last_checkpoint: ExtendedSequenceNumber | None = None
        self.largest: ExtendedSequenceNumber | None = None
        self._at_shard_end: ExtendedSequenceNumber | None = None  # the final record, at shard end
        self._storing: Store | None = None

    @property
    def awaiting(self) -> str | None:
        """The action whose status is awaited, if any."""
        entry = AWAIT.get(self.state)
        return entry[0] if entry else None

    def _send(self, action: str) -> None:
        after = SEND.get((self.state, action))
        if after is None:
            raise RuntimeError(f"cannot send {action} to the processor for {self.shard_id} in state {self.state.value}")
        self.state = after

    # -- actions out ---------------------------------------------------------------------

    def initialize(self, checkpoint: ExtendedSequenceNumber | None) -> bytes:
        self._send(INITIALIZE)
        self.last_checkpoint = self.largest = checkpoint
        return encode_initialize(self.shard_id, checkpoint)

    def process_records(self, batch: Batch) -> bytes:
        self._send(PROCESS_RECORDS)
        if batch.last is not None:
            self.largest = batch.last
        return batch.line

    def shutdown_requested(self) -> bytes:
        self._send(SHUTDOWN_REQUESTED)
        return SHUTDOWN_REQUESTED_LINE

    def lease_lost(self) -> bytes:
        self._send(LEASE_LOST)
        return LEASE_LOST_LINE

    def shard_ended(self) -> bytes:
        self._send(SHARD_ENDED)
        self._at_shard_end, self.largest = self.largest, _SHARD_END
        return SHARD_ENDED_LINE

    def fail(self) -> None:
        """The child broke the conversation (exit, timeout, broken pipe): nothing more is sent."""
        self.state = ChildState.FAILED

    @property
    def checkpointed_shard_end(self) -> bool:
        return self.last_checkpoint == _SHARD_END

    # -- messages in ---------------------------------------------------------------------

    def receive(self, message: Message) -> Outcome:
        """What to do about one message from the child while an action is outstanding."""
        if self._storing is not None:
            raise RuntimeError("receive() before the pending checkpoint was reported with stored()")
        entry = AWAIT.get(self.state)
        if entry is None:
            raise RuntimeError(f"no action is outstanding (state {self.state.value})")
        if isinstance(message, CheckpointRequest):
            return self._checkpoint(message)
        if isinstance(message, Status):
            expected, after = entry
            if message.response_for != expected:
                self.state = ChildState.FAILED
                raise ProtocolError(
                    f"processor for {self.shard_id} sent a status for {message.response_for!r} "
                    f"while {expected} was awaited: {message.line.strip()[:200]!r}")
            self.state = after
            return Done(expected)
        return Ignored(message.action)

    def stored(self, store: Store, error: str | None) -> bytes:
        """The reply once ``store.position`` was written (``error`` None) or refused."""
        if store is not self._storing:
            raise RuntimeError("stored() for a checkpoint that is not pending")
        self._storing = None
        if error is None:
            self.last_checkpoint = store.position
        return encode_checkpoint_reply(store.request.sequence_number, store.request.sub_sequence_number, error)

    def _checkpoint(self, request: CheckpointRequest) -> Outcome:
        seq, sub = request.sequence_number, request.sub_sequence_number

        def refuse(error: str) -> Reply:
            return Reply(encode_checkpoint_reply(seq, sub, error))

        if self.state not in _CHECKPOINTABLE:
            return refuse(INVALID_STATE)  # initialize and leaseLost have no checkpointer
        if seq is None:
            target = self.largest
            if target is None:  # no position known at all: Java's advancePosition(null) is a no-op
                return Reply(encode_checkpoint_reply(seq, sub, None))
        else:
            if sub is not None and sub < 0:
                return refuse(ILLEGAL_ARGUMENT)
            if not is_valid_sequence_number(seq):
                return refuse(ILLEGAL_ARGUMENT)
            target = ExtendedSequenceNumber(seq, sub or 0)
            last, largest = self.last_checkpoint, self.largest
            if (last is not None and target < last) or largest is None or target > largest:
                return refuse(ILLEGAL_ARGUMENT)
        if target == self.last_checkpoint:
            return Reply(encode_checkpoint_reply(seq, sub, None))  # already stored: no write
        position = _SHARD_END if target == self._at_shard_end else target
        self._storing = Store(position, request)
        return self._storing


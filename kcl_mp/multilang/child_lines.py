"""The lines a processor child writes, pure: cut from its stdout as Java's reader cuts them and
parsed as Java's mapper reads them (multilang/PROTOCOL.md), each a message or a ``Skip`` that says
why Java would not take it. ``wire`` writes the daemon's side.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from kcl_mp.multilang.stdout_notes import NOTE_CHARS
from kcl_mp.multilang.wire import (
    CHECKPOINT,
    INITIALIZE,
    LEASE_LOST,
    PROCESS_RECORDS,
    SHARD_ENDED,
    SHUTDOWN_REQUESTED,
    STATUS,
)

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

    @property
    def pending(self) -> bytes:
        """The unfinished line: bytes after the last line break (Java waits for its end)."""
        return b"".join(self._parts)


@dataclass(frozen=True)
class Status:
    action: ClassVar[str] = "status"
    response_for: str | None
    line: str = field(default="", compare=False)
    ignored: str = field(default="", compare=False)  # why the rest of the line went unread, if it mattered


@dataclass(frozen=True)
class CheckpointRequest:
    action: ClassVar[str] = "checkpoint"
    sequence_number: str | None
    sub_sequence_number: int | None
    line: str = field(default="", compare=False)
    ignored: str = field(default="", compare=False)


@dataclass(frozen=True)
class Other:
    """A known message type the daemon has no use for (a child echoing ``initialize``)."""

    action: str
    line: str = field(default="", compare=False)
    ignored: str = field(default="", compare=False)


@dataclass(frozen=True)
class Skip:
    """A line Java would skip, logging ``Skipping unexpected line on STDOUT``; ``meant``: it
    has an ``action``, so its writer meant a message (plain text and JSON logs are not)."""

    line: str
    reason: str
    meant: bool = False


Message = Status | CheckpointRequest | Other

class _IntText(str):
    """A JSON integer kept as its text (Jackson coerces numbers to text for String fields)."""


class _FloatText(str):
    pass


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # Jackson rejects NaN and Infinity


_DECODER = json.JSONDecoder(parse_int=_IntText, parse_float=_FloatText, parse_constant=_no_constants)

# A child's stdout line is judged by its size and its first character before it is decoded:
# decoding costs about 75 times a line's bytes in memory (a 16 MiB line of numbers: 1.2 GB and
# seconds holding the GIL, in the pool process every shard of it shares). No message is near
# MAX_MESSAGE_BYTES (a status or checkpoint is well under 1 KB), and a line that does not start
# with ``{`` is decoded only when short, for the reason it is not a message.
MAX_MESSAGE_BYTES = 1 << 20
SHAPE_CHARS = NOTE_CHARS


def oversized(raw: bytes) -> Skip | None:
    """A line too long to be a message, skipped before it is even decoded to text (Java skips
    what its mapper cannot take; kcl-mp does not hand it to the mapper).

    >>> oversized(b"[" + b"0," * (1 << 20)).reason
    'a line of 2097153 bytes: too long for a message (at most 1048576 bytes), not decoded'
    """
    if len(raw) <= MAX_MESSAGE_BYTES:
        return None
    head = raw[:NOTE_CHARS * 4].decode("utf-8", "replace")[:NOTE_CHARS]
    return Skip(head, f"a line of {len(raw)} bytes: too long for a message (at most {MAX_MESSAGE_BYTES} bytes), "
                      "not decoded", meant=head.lstrip(" \t").startswith("{") and "action" in head)
_LONG_TEXT = re.compile(r"[+-]?[0-9]+")
_NOT_MAPPED = object()


def _as_text(value: Any) -> Any:
    """A String field's value: JSON numbers and booleans become their text, as in Jackson."""
    if value is None or isinstance(value, str):
        return None if value is None else str(value)
    return ("true" if value else "false") if isinstance(value, bool) else _NOT_MAPPED


def _as_long(value: Any) -> Any:
    try:
        return _long(value)
    except (OverflowError, ValueError):  # 1e999 (infinite), or more digits than int() reads (4,300)
        return _NOT_MAPPED  # no Long either: Jackson skips the line


def _long(value: Any) -> Any:
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


_JSON_KINDS: dict[type, str] = {list: "an array", str: "a string", dict: "an object"}


def _json_kind(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    return _JSON_KINDS.get(type(value), "a number")


def _rest_ignored(first: str, rest: str) -> str:
    """Why text after the first JSON value matters: Java ignores it, so a second message is lost."""
    rest = rest.strip(" \t")
    if not rest.startswith("{"):
        return ""  # trailing junk: ignored, and nothing was meant by it
    try:
        second, _ = _DECODER.raw_decode(rest)
    except (ValueError, RecursionError):
        second = None
    what = f"the second ({second['action']})" if isinstance(second, dict) and "action" in second else "the rest"
    return f"two JSON messages on one line: Java reads only the first ({first}); {what} is ignored"


def _unknown_action(action: str) -> str:
    if action == "record":
        return "unknown action 'record' (records exist only inside processRecords)"
    same = [known for known in _FIELDS if known.lower() == action.lower()]
    return f"unknown action {action!r}" + (f" (actions are case-sensitive: {same[0]!r})" if same else "")


def parse_line(line: str) -> Message | Skip | None:
    """A child's stdout line (without terminator) as Java's reader sees it: None for an
    empty line (ignored silently), ``Skip`` with the reason for anything Java's mapper
    rejects, else the message. Lenient as Java: keys in any order, blanks around, trailing
    text after the first JSON value (a second message there is lost: ``ignored`` says so),
    numbers as sequence numbers and numeric strings as sub-sequences.

    >>> parse_line('{"action":"status","responseFor":"initialize","foo":1}').reason
    "status with an extra key 'foo' (Java skips it)"
    """
    if not line:
        return None
    text = line.lstrip(" \t")
    if len(text) > SHAPE_CHARS and not text.startswith("{"):
        return Skip(line, f"a line of {len(line)} characters that does not start with '{{': not a message "
                          "(not decoded)")
    try:
        value, end = _DECODER.raw_decode(text)
    except json.JSONDecodeError as exc:
        where = "a line of blanks" if not text.strip() else f"{exc.msg} at column {exc.colno + len(line) - len(text)}"
        return Skip(line, f"not JSON ({where})", meant=text.startswith("{") and "action" in text)
    except ValueError as exc:  # NaN, Infinity
        return Skip(line, f"not JSON ({exc})", meant="action" in text)
    except RecursionError:  # ~1,000 levels of [ or {: Python's decoder gives up where Jackson reads on
        return Skip(line, "JSON nested too deeply to decode (not a message)", meant="action" in text)
    if not isinstance(value, dict):
        return Skip(line, f"{_json_kind(value)}, not a JSON object")
    if "action" not in value:
        return Skip(line, 'a JSON object without an "action" key')
    action = value["action"]
    if not isinstance(action, str):
        return Skip(line, f'"action" is {_json_kind(action)}, not text', meant=True)
    allowed = _FIELDS.get(action)
    if allowed is None:
        return Skip(line, _unknown_action(action), meant=True)
    extra = sorted(set(value) - allowed)
    if extra:
        keys = ", ".join(map(repr, extra))
        what = f"extra keys {keys}" if len(extra) > 1 else f"an extra key {keys}"
        return Skip(line, f"{action} with {what} (Java skips it)", meant=True)
    ignored = _rest_ignored(action, text[end:])
    if action == STATUS:
        response_for = _as_text(value.get("responseFor"))
        if response_for is _NOT_MAPPED:
            return Skip(line, f"status whose responseFor is {_json_kind(value['responseFor'])}, not text "
                              "(Java skips it)", meant=True)
        return Status(response_for, line, ignored)
    if action == CHECKPOINT:
        seq = _as_text(value.get("sequenceNumber"))
        if seq is _NOT_MAPPED:
            return Skip(line, f"checkpoint whose sequenceNumber is {_json_kind(value['sequenceNumber'])}, not text "
                              "or a number (Java skips it)", meant=True)
        sub = _as_long(value.get("subSequenceNumber"))
        if sub is _NOT_MAPPED:
            return Skip(line, "checkpoint whose subSequenceNumber is not a whole number in a Java long's range "
                              "(Java skips it)", meant=True)
        return CheckpointRequest(seq, sub, line, ignored)
    return Other(action, line, ignored)

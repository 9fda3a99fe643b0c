"""Logging: every line names the worker and, where there is one, the shard.

Text lines read ``time level worker=... shard=... message``; ``--log-format json`` writes
one JSON object a line (``ts, level, logger, worker, shard, pid, msg``), and on the lines
that record a change of a lease's holder, ``event`` (a ``LeaseEvent``'s stable name),
``lease`` (its key) and ``from`` (who held it before a take, a steal or a forced handoff) or,
for a leader's moves, ``to`` and ``from``; a 2.x taker's round has ``taker_plan``
(``taker_event``), the table migration's end ``table_migration_complete`` (``why``): what a
program reading the log keys on, where the message is prose.

No credentials in logs: kcl-mp never formats them into a message, and as a second line of
defence every line is scrubbed of every credential this process knows: the AWS keys in its
environment, and those its clients resolve (profiles, IMDS, containers, STS), added as they
are used (``add_secrets``, from ``aws.clients``). A processor that prints them to stderr is
logged without them, also written JSON-escaped (``\\/``) or URL-encoded, and also cut: any run
of 12 or more characters that begins a secret is removed wherever a line was cut (a
secret's first 12 characters name it), and a line cut at a limit loses any start of a
secret at its end (``redact_cut``). Python warnings go through logging too, so with
``--log-format json`` every line kcl-mp writes is JSON.

One line is one record: text lines escape control characters (C0, DEL, C1, U+2028/9) as
``repr`` does, in the message and in the worker and shard fields (a lease key is table
data), so a lease key or a processor's line with a newline cannot forge a log line and ESC
sequences never reach a terminal; a traceback keeps its lines, each indented. JSON lines
escape the same characters as ``\\uXXXX`` (orjson escapes only C0).

>>> escape("shardId-1\\n2026-11-25 ERROR forged\\x1b]0;title\\x07")
'shardId-1\\\\n2026-11-25 ERROR forged\\\\x1b]0;title\\\\x07'
"""

from __future__ import annotations

import copy
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable, MutableMapping
from enum import Enum
from typing import Any
from urllib.parse import quote

import orjson

_WORKER = "-"
SECRET_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_ACCESS_KEY_ID",
              "AWS_CONTAINER_AUTHORIZATION_TOKEN")
REDACTED = "[redacted]"
MIN_SECRET_LEN = 8  # shorter values (test placeholders like "x") would blank out ordinary words
NAMING_PREFIX = 12  # characters that begin a secret and name it: removed wherever they appear
MAX_SECRETS = 64  # values kept, the most recently used: refreshed credentials replace old ones

_TEXT_ESCAPES = {**{c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))},
                 ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t", 0x2028: "\\u2028", 0x2029: "\\u2029"}
_JSON_ESCAPES = {c: f"\\u{c:04x}" for c in (0x7F, *range(0x80, 0xA0), 0x2028, 0x2029)}
_PERCENT = re.compile(r"%[0-9A-F]{2}")


def escape(text: str) -> str:
    """``text`` with its control characters written as ``repr`` writes them."""
    return text.translate(_TEXT_ESCAPES)


def secrets_of(environ: dict[str, str]) -> tuple[str, ...]:
    """The credential values to scrub from log lines, longest first."""
    found = {environ[name] for name in SECRET_ENV if len(environ.get(name, "")) >= MIN_SECRET_LEN}
    return tuple(sorted(found, key=len, reverse=True))


def secret_forms(secret: str) -> set[str]:
    """How ``secret`` can appear in a line: as is, JSON-escaped, URL-encoded (either case of
    hex), and each of those as a JSON log line writes it.

    >>> sorted(secret_forms("ab/cd+ef"))
    ['ab%2Fcd%2Bef', 'ab%2fcd%2bef', 'ab/cd+ef', 'ab\\\\/cd+ef', 'ab\\\\\\\\/cd+ef']
    """
    encoded = quote(secret, safe="")
    forms = {secret, secret.replace("/", "\\/"), encoded, _PERCENT.sub(lambda m: m.group().lower(), encoded)}
    return forms | {orjson.dumps(form).decode()[1:-1] for form in forms}


def redact(line: str, forms: tuple[str, ...]) -> str:
    """``line`` without any secret of ``forms``, nor any run of at least ``NAMING_PREFIX``
    characters that begins one (a secret cut short by a line limit). The forms of one secret
    share their first characters, so every match is found on the line as it came, the
    longest wins, and overlapping matches are removed as one."""
    spans: list[tuple[int, int]] = []
    for form in forms:
        head = form[:NAMING_PREFIX]
        start = line.find(head)
        while start >= 0:
            end, limit = start + len(head), min(len(line), start + len(form))
            while end < limit and line[end] == form[end - start]:
                end += 1
            spans.append((start, end))
            start = line.find(head, start + 1)
    if not spans:
        return line
    pieces: list[str] = []
    at = 0
    for start, end in sorted(spans):
        if start > at or not pieces:
            pieces += [line[at:start], REDACTED]
        at = max(at, end)
    return "".join(pieces) + line[at:]


class _Secrets:
    """The credentials this process knows, and their forms to scrub, longest first: those in
    its environment for good, the ``MAX_SECRETS`` its clients signed with last."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pinned: frozenset[str] = frozenset()
        self.values: list[str] = []  # the most recently added last
        self.last: list[str] = []
        self.forms: tuple[str, ...] = ()

    def pin(self, values: tuple[str, ...]) -> None:
        with self.lock:
            self.pinned |= frozenset(values)
            self._rebuild()

    def add(self, values: tuple[str | None, ...]) -> None:
        fresh = [v for v in values if v and len(v) >= MIN_SECRET_LEN]
        if fresh == self.last:
            return  # the credentials added last time: each signed request asks
        with self.lock:
            self.last = fresh
            self.values = ([v for v in self.values if v not in fresh] + fresh)[-MAX_SECRETS:]
            self._rebuild()

    def _rebuild(self) -> None:
        known = {*self.pinned, *self.values}
        self.forms = tuple(sorted({f for v in known for f in secret_forms(v)}, key=len, reverse=True))


_SECRETS = _Secrets()


def add_secrets(*values: str | None) -> None:
    """Scrub these credential values (and their forms) from every later line of this process."""
    _SECRETS.add(values)


def redact_cut(text: str) -> str:
    """``text``, which a limit cut, without any start of a secret at its end (and none inside).

    >>> add_secrets("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
    >>> redact_cut("password=wJal")
    'password=[redacted]'
    """
    forms = _SECRETS.forms
    tail = max((size for form in forms for size in range(1, min(len(form), len(text) + 1))
                if text.endswith(form[:size])), default=0)
    return redact(text[:len(text) - tail], forms) + (REDACTED if tail else "")


class _Scrubbed(logging.Formatter):
    """Formats with ``inner``, then removes every secret this process knows from the line."""

    def __init__(self, inner: logging.Formatter):
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        return redact(self.inner.format(record), _SECRETS.forms)


class _Text(logging.Formatter):
    """``time level worker=... shard=... message``: one line a record, control characters escaped."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        shown = copy.copy(record)
        shown.message = escape(record.message)
        shown.worker = escape(str(getattr(record, "worker", _WORKER)))
        shown.shard = escape(str(getattr(record, "shard", "-")))
        return super().formatMessage(shown)

    def formatException(self, ei: Any) -> str:
        return _indented(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:
        return _indented(super().formatStack(stack_info))


def _indented(text: str) -> str:
    """A traceback's lines, each indented and escaped: none can pass for a record's line."""
    return "\n".join("  " + escape(line) for line in text.split("\n"))


class _Context(logging.Filter):
    """Fills ``worker`` and ``shard`` on records that did not come through a ShardLog."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "worker"):
            record.worker = _WORKER
        if not hasattr(record, "shard"):
            record.shard = "-"
        return True


class LeaseEvent(str, Enum):
    """A change of who holds a lease, as this worker logs it (the JSON log's ``event``)."""

    TAKEN = "lease_taken"  # an expired, unowned or abandoned lease (a 2.x taker's choice)
    RESCUED = "lease_rescued"  # taken by a 3.x follower: nobody renewed or assigned it (fleet/role.py)
    STOLEN = "lease_stolen"  # taken from a live owner (2.x balancing without graceful handoff)
    ASKED = "lease_asked"  # a handoff asked of its live owner (2.x balancing with graceful handoff)
    FORCED = "lease_forced"  # handed to this worker, taken without the old owner's last checkpoint
    HANDED_IN = "lease_handed_in"  # its old owner checkpointed and let go
    KEPT = "lease_kept"  # held already in the table: an earlier run's, or assigned by a 3.x leader
    HANDED_OFF = "lease_handed_off"  # let go to the worker that asked for it
    RELEASED = "lease_released"  # let go at shutdown
    GIVEN_UP = "lease_given_up"  # let go for another host: its processor kept failing here
    LOST = "lease_lost"  # found held by another worker, or not renewable
    ASSIGNED = "lease_assigned"  # a 3.x leader wrote another owner (``to``; ``from``: the one it had)
    HANDOFF_STARTED = "lease_handoff_started"  # a 3.x leader asked ``from`` to hand it to ``to``


def lease_event(event: LeaseEvent, key: str, **fields: str | None) -> dict[str, Any]:
    """The ``extra`` of a log call recording ``event`` for lease ``key`` (``fields``: more
    JSON fields, e.g. a leader's ``to``)."""
    return {"event": event.value, "lease": key, "event_fields": fields}


TAKER_PLAN = "taker_plan"  # a 2.x taker's round that takes or steals (``taker_event``)
# KCL 3.5's table migration read or made COMPLETE: everything in the lease table from now on (``why``)
TABLE_MIGRATION_COMPLETE = "table_migration_complete"


def taker_event(leases: int, workers: int, target: int, take: tuple[str, ...],
                steal: tuple[str, ...]) -> dict[str, Any]:
    """The ``extra`` of a 2.x taker's line: the unfinished leases it counted, the live workers,
    its target, and the keys it chose to take and steal."""
    return {"event": TAKER_PLAN, "event_fields": {"leases": leases, "workers": workers, "target": target,
                                                  "take": list(take), "steal": list(steal)}}


class StreamEvent(str, Enum):
    """A change of a multi-stream application's streams (the JSON log's ``event``, with ``stream``)."""

    ADDED = "stream_added"  # appended to the list: synced and consumed
    DRAINING = "stream_draining"  # removed from the list: its shards here told shutdownRequested
    DRAINED = "stream_drained"  # nothing of it is held here any more
    SCHEDULED = "stream_deletion_scheduled"  # a former stream: its leases are deleted at ``at``
    REVIVED = "stream_revived"  # back in the list before its leases were deleted: they are kept
    DELETED = "stream_deleted"  # its leases deleted (``leases``: how many)
    LIST_REFUSED = "stream_list_refused"  # the list file could not be read or holds a bad line: the last good kept


def stream_event(event: StreamEvent, stream: str, **fields: str | int | None) -> dict[str, Any]:
    """The ``extra`` of a log call recording ``event`` for ``stream`` (a name; the list file for
    LIST_REFUSED)."""
    return {"event": event.value, "event_fields": {"stream": stream, **fields}}


class _Json(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}",
            "level": record.levelname,
            "logger": record.name,
            "worker": getattr(record, "worker", _WORKER),
            "shard": getattr(record, "shard", "-"),
            "pid": record.process,
            "msg": record.getMessage(),
        }
        if hasattr(record, "event"):
            entry["event"], entry["lease"] = record.event, getattr(record, "lease", None)
            entry.update(getattr(record, "event_fields", {}))
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(entry).decode().translate(_JSON_ESCAPES)


class ShardLog(logging.LoggerAdapter):
    """A logger that stamps the worker id and shard id on every line."""

    def __init__(self, logger: logging.Logger, worker: str, shard: str = "-"):
        super().__init__(logger, {"worker": worker, "shard": shard})

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        kwargs["extra"] = {**self.extra, **kwargs.get("extra", {})}  # type: ignore[dict-item]
        return msg, kwargs


def setup(level: str = "INFO", fmt: str = "text", worker_id: str = "-") -> None:
    """Configure the root logger once per process (the supervisor, and each pool process)."""
    global _WORKER
    _WORKER = worker_id
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_Context())
    formatter: logging.Formatter = _Json() if fmt == "json" else _Text(
        "%(asctime)s.%(msecs)03d %(levelname)-7s worker=%(worker)s shard=%(shard)s %(message)s",
        "%Y-%m-%dT%H:%M:%S",
    )
    _SECRETS.pin(secrets_of(dict(os.environ)))
    handler.setFormatter(_Scrubbed(formatter))
    logging.captureWarnings(True)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for noisy in ("botocore", "boto3", "urllib3"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))


class LineBudget:
    """At most ``per_window`` lines logged per ``window_s``; the rest are counted.

    ``allow()`` gives (log this line?, lines dropped in earlier windows to report now), so
    a summary is logged at most once a window, before the first line of the next one.
    """

    def __init__(self, per_window: int, window_s: float,
                 clock: Callable[[], float] = time.monotonic):
        self.per_window, self.window_s, self.clock = per_window, window_s, clock
        self.started = clock()
        self.count = 0
        self.dropped = 0

    def allow(self) -> tuple[bool, int]:
        now = self.clock()
        report = 0
        if now - self.started >= self.window_s:
            report, self.dropped = self.dropped, 0
            self.started, self.count = now, 0
        self.count += 1
        if self.count > self.per_window:
            self.dropped += 1
            return False, 0
        return True, report

    def flush(self) -> int:
        dropped, self.dropped = self.dropped, 0
        return dropped

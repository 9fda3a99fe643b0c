"""Logging: every line names the worker and, where there is one, the shard.

Text lines read ``time level worker=... shard=... message``; ``--log-format json`` writes
one JSON object a line (``ts, level, logger, worker, shard, pid, msg``).

No credentials in logs: kcl-mp never formats them into a message, and as a second line of
defence every line is scrubbed of the AWS keys in this process's environment (a processor
that prints its environment to stderr is logged without them). Python warnings go through
logging too, so with ``--log-format json`` every line kcl-mp writes is JSON.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, MutableMapping
from typing import Any

import orjson

_WORKER = "-"
SECRET_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_ACCESS_KEY_ID")
REDACTED = "[redacted]"
MIN_SECRET_LEN = 8  # shorter values (test placeholders like "x") would blank out ordinary words


def secrets_of(environ: dict[str, str]) -> tuple[str, ...]:
    """The credential values to scrub from log lines, longest first."""
    found = {environ[name] for name in SECRET_ENV if len(environ.get(name, "")) >= MIN_SECRET_LEN}
    return tuple(sorted(found, key=len, reverse=True))


class _Scrubbed(logging.Formatter):
    """Formats with ``inner``, then removes every secret from the line."""

    def __init__(self, inner: logging.Formatter, secrets: tuple[str, ...]):
        super().__init__()
        self.inner, self.secrets = inner, secrets

    def format(self, record: logging.LogRecord) -> str:
        line = self.inner.format(record)
        for secret in self.secrets:
            if secret in line:
                line = line.replace(secret, REDACTED)
        return line


class _Context(logging.Filter):
    """Fills ``worker`` and ``shard`` on records that did not come through a ShardLog."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "worker"):
            record.worker = _WORKER
        if not hasattr(record, "shard"):
            record.shard = "-"
        return True


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
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(entry).decode()


class ShardLog(logging.LoggerAdapter):
    """A logger that stamps the worker id and shard id on every line."""

    def __init__(self, logger: logging.Logger, worker: str, shard: str = "-"):
        super().__init__(logger, {"worker": worker, "shard": shard})

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        kwargs["extra"] = {**self.extra, **kwargs.get("extra", {})}  # type: ignore[dict-item]
        return msg, kwargs


def setup(level: str = "INFO", fmt: str = "text", worker_id: str = "-") -> None:
    """Configure the root logger once per process (the supervisor, and each shard worker)."""
    global _WORKER
    _WORKER = worker_id
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_Context())
    formatter: logging.Formatter = _Json() if fmt == "json" else logging.Formatter(
        "%(asctime)s.%(msecs)03d %(levelname)-7s worker=%(worker)s shard=%(shard)s %(message)s",
        "%Y-%m-%dT%H:%M:%S",
    )
    secrets = secrets_of(dict(os.environ))
    handler.setFormatter(_Scrubbed(formatter, secrets) if secrets else formatter)
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

"""The supervisor loop's steps, each run so that an unexpected exception costs it one turn.

A step (renew, scan, sync, parents, read, reap, spawn, ...) that raises what no code path
expects (a bug, or input no check caught) is logged through logging with its name and
traceback, counted (``loop_step_errors``, and ``Supervisor.counters``), and the loop goes
on: the next turn runs the step again. A retriable error (``errors.KclMpError.retriable``:
AWS throttled or did not answer) is logged as a warning, without a traceback, and never
stops the host. The same step failing otherwise ``MAX_FAILURES`` turns in a row means the
supervisor cannot go on (a renewal that always fails lets every lease expire under running
processors): ``failed`` names it, and the supervisor stops as gracefully as it still can,
with ``errors.EXIT_INTERNAL``.

Renewals are a step of the same loop, so a step that takes long (a scan DynamoDB answers
slowly, a leader's round of many writes) delays the next renewal round: a step longer than
half the renewal interval is logged as a warning with its duration, at most once every
SLOW_LOG_EVERY_S a step, so an operator sees which step made renewals late.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from kcl_mp.errors import KclMpError
from kcl_mp.metrics.catalogue import Recorder

MAX_FAILURES = 5  # turns in a row one step may fail before the supervisor stops
SLOW_LOG_EVERY_S = 60.0  # a step's "took long" warning at most this often
WAITS = frozenset({"read"})  # steps that wait on purpose (for messages, until the next step is due)


class Steps:
    def __init__(self, log: logging.Logger | logging.LoggerAdapter[Any], metrics: Recorder | None,
                 counters: Counter[str], renew_interval_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.log, self.metrics, self.counters = log, metrics, counters
        self.failures: dict[str, int] = {}  # step -> turns in a row it failed
        self.renew_interval_s, self.clock = renew_interval_s, clock
        self.slow_logged: dict[str, float] = {}  # step -> when its last "took long" warning was logged

    def run(self, name: str, action: Callable[[], object]) -> bool:
        """Run one step; False when it raised (logged and counted here)."""
        started = self.clock()
        try:
            return self._run(name, action)
        finally:
            self._timed(name, started)

    def _timed(self, name: str, started: float) -> None:
        now = self.clock()
        if self.renew_interval_s is None or name in WAITS or now - started <= self.renew_interval_s / 2:
            return
        if now - self.slow_logged.get(name, -math.inf) >= SLOW_LOG_EVERY_S:
            self.slow_logged[name] = now
            self.log.warning("loop step %s took %.1f s: the next renewal round waits for the loop (renewals are "
                             "due every %.1f s); logged at most once a minute a step", name, now - started,
                             self.renew_interval_s)

    def _run(self, name: str, action: Callable[[], object]) -> bool:
        try:
            action()
        except Exception as exc:
            self.counters["loop_step_errors"] += 1
            if self.metrics is not None:
                self.metrics.add("loop_step_errors", 1)
            if isinstance(exc, KclMpError) and exc.retriable:  # AWS said no for now: never a reason to stop
                self.log.warning("loop step %s failed: %s; it runs again next turn", name, exc)
                return False
            failures = self.failures[name] = self.failures.get(name, 0) + 1
            self.log.exception("loop step %s failed unexpectedly (%d turns in a row)%s", name, failures,
                               "; the supervisor cannot go on" if failures >= MAX_FAILURES else
                               "; it runs again next turn")
            return False
        self.failures.pop(name, None)
        return True

    @property
    def failed(self) -> str | None:
        """The first step that failed ``MAX_FAILURES`` turns in a row, if any."""
        return next((name for name, count in self.failures.items() if count >= MAX_FAILURES), None)

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
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

from kcl_mp.errors import KclMpError
from kcl_mp.metrics.catalogue import Recorder

MAX_FAILURES = 5  # turns in a row one step may fail before the supervisor stops


class Steps:
    def __init__(self, log: logging.Logger | logging.LoggerAdapter[Any], metrics: Recorder | None,
                 counters: Counter[str]):
        self.log, self.metrics, self.counters = log, metrics, counters
        self.failures: dict[str, int] = {}  # step -> turns in a row it failed

    def run(self, name: str, action: Callable[[], object]) -> bool:
        """Run one step; False when it raised (logged and counted here)."""
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

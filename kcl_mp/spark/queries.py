"""Running the job's queries to their end, each started again from its checkpoint after a failure.

Spark fails a streaming query for causes that pass: a Python worker that did not connect back
within Spark's fixed 10 s (``PythonWorkerFactory``) on a loaded host, a throttled or briefly
unreachable S3. A restart from the checkpoint replays the batch that was in flight, exactly
once, as after a kill. A query that keeps failing without a completed batch between is given up
after ``restarts`` tries: the job then stops the other queries and fails with that query's error.
A missing module is given up at once: no restart installs it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol


class Query(Protocol):
    """What this module uses of a ``pyspark.sql.streaming.StreamingQuery``."""

    name: str | None
    isActive: bool
    recentProgress: list[Any]

    def awaitTermination(self) -> Any: ...  # noqa: N802 (PySpark's name)

    def exception(self) -> BaseException | None: ...

    def stop(self) -> None: ...


@dataclass(frozen=True)
class RestartPolicy:
    restarts: int = 3  # tries after a failure, while no batch completes between them
    pause_s: float = 5.0  # between a failure and the next start

    def __post_init__(self) -> None:
        if self.restarts < 0 or self.pause_s < 0:
            raise ValueError(f"restarts and pause_s must be >= 0: {self}")


TRACEBACK = "Traceback (most recent call last):"
LASTING = frozenset({"ImportError", "ModuleNotFoundError", "NotInstalledError"})  # no restart installs a module


def cause(error: BaseException) -> str:
    """What a failure's text says in one line: the exception line of its last Python traceback
    (a ``foreachBatch`` function's error comes wrapped by py4j), else its first line.

    >>> cause(RuntimeError("An exception was raised by the Python Proxy. Return Message: Traceback "
    ...     "(most recent call last):\\n  File \\"x.py\\", line 1, in f\\n    import sqlalchemy\\n"
    ...     "ModuleNotFoundError: No module named 'sqlalchemy'\\n\\n=== Streaming Query ==="))
    "ModuleNotFoundError: No module named 'sqlalchemy'"
    >>> cause(RuntimeError("Python worker failed to connect back.\\nat ..."))
    'Python worker failed to connect back.'
    """
    text = str(error).strip()
    if not text:
        return type(error).__name__
    lines = text.splitlines()
    if TRACEBACK in text:
        after = text.rsplit(TRACEBACK, 1)[1].splitlines()[1:]
        lines = [line for line in after if line.strip() and not line[0].isspace()] or lines
    return lines[0][:500]


def lasting(error: BaseException) -> bool:
    """Whether a failure is one a restart cannot mend: a missing module, raised here or in the
    last Python traceback of its text.

    >>> lasting(RuntimeError("Traceback (most recent call last):\\nModuleNotFoundError: x"))
    True
    >>> lasting(ModuleNotFoundError("x")), lasting(RuntimeError("Python worker failed"))
    (True, False)
    """
    named = cause(error).split(":", 1)[0].rsplit(".", 1)[-1]
    return type(error).__name__ in LASTING or named in LASTING


def completed_a_batch(query: Query) -> bool:
    """Whether this start of the query ran a batch that read rows (its failure then does not
    count against the ones before it)."""
    return any(progress.get("numInputRows", 0) > 0 for progress in query.recentProgress)


INITIALIZING = ("Initializing StreamExecution", "Initializing sources")  # Spark's status until its sources exist


def _initialized(query: Query) -> bool:
    """Whether a query's sources exist (Spark's status moved past initializing them), or it
    ended."""
    if not query.isActive or query.recentProgress:
        return True
    status = getattr(query, "status", None) or {}
    return status.get("message", INITIALIZING[0]) not in INITIALIZING


class Queries:
    """The job's queries by output name, each restarted by ``policy``; ``finished`` holds each
    output's last query once it ended."""

    def __init__(self, starts: Mapping[str, Callable[[], Query]], policy: RestartPolicy,
                 sleep: Callable[[float], None] = time.sleep, say: Callable[[str], None] | None = None):
        self.starts = dict(starts)
        self.policy = policy
        self.sleep = sleep
        self.say = say or (lambda line: print(f"kcl_mp.spark.job: {line}", file=sys.stderr, flush=True))
        self.failures = {name: 0 for name in self.starts}
        self.active: dict[str, Query] = {}
        self.finished: dict[str, Query] = {}
        self.settle_s = 0.0  # run_together's

    def run_one_by_one(self) -> None:
        """Each output's query to its end before the next starts (availableNow)."""
        for name in self.starts:
            self._start(name)
            while name in self.active:
                try:
                    self.active[name].awaitTermination()
                except Exception:  # noqa: BLE001 (the query's own exception() tells what)
                    pass
                self._ended(name)

    def run_together(self, await_any: Callable[[], Any], reset: Callable[[], None], settle_s: float = 0.0) -> None:
        """Every output's query, until all ended (``await_any``/``reset``: the session's
        ``streams.awaitAnyTermination`` and ``streams.resetTerminated``).

        ``settle_s``: a query is started (and started again after a failure) only once every
        other active query's sources exist, or ``settle_s`` passed. Spark 4.3 (read in its
        classes) starts a Python streaming source by putting its settings into the data
        source's environment map, one ``java.util.HashMap`` shared by every query of that
        source, without a lock (``PythonStreamingSourceRunner.init``). Two queries starting
        together can corrupt it, and then every task of the source in that JVM fails to
        deserialize (java.io.OptionalDataException in HashMap.readObject), restarts included:
        seen here in 2 of 5 starts of a two-query job, and in CI for the landing job's three
        queries."""
        self.settle_s = settle_s
        for name in self.starts:
            self._settle()
            self._start(name)
        while self.active:
            try:
                await_any()
            except Exception:  # noqa: BLE001 (each ended query's exception() tells what)
                pass
            reset()
            for name in [name for name, query in self.active.items() if not query.isActive]:
                self._ended(name)

    def stop(self) -> None:
        for query in self.active.values():
            query.stop()

    def _settle(self) -> None:
        """Wait (at most ``settle_s``) until every active query's sources exist, or it ended."""
        deadline = time.monotonic() + self.settle_s
        while time.monotonic() < deadline and not all(_initialized(query) for query in self.active.values()):
            self.sleep(0.2)

    def _start(self, name: str) -> None:
        """Start ``name``'s query; a start that fails (Spark plans the source as it starts) is
        tried again as a failed query is."""
        while True:
            try:
                self.active[name] = self.starts[name]()
                return
            except Exception as error:  # noqa: BLE001 (raised again once out of tries)
                self._failed(name, name, error, progressed=False)

    def _ended(self, name: str) -> None:
        """A query ended: done, or failed and started again (or, out of tries, raised)."""
        query = self.active.pop(name)
        error = query.exception()
        if error is None:
            self.finished[name] = query
            return
        self._failed(name, query.name or name, error, completed_a_batch(query))
        self._settle()
        self._start(name)

    def _failed(self, name: str, label: str, error: BaseException, progressed: bool) -> None:
        """Count a failure of ``name``'s query (``label`` in what is said): pause before the next
        try, or raise ``error``."""
        self.failures[name] = 1 if progressed else self.failures[name] + 1
        summary = cause(error)
        if lasting(error):
            self.say(f"query {label} failed ({summary}): a restart cannot mend this; giving up")
            raise error
        if self.failures[name] > self.policy.restarts:
            self.say(f"query {label} failed {self.failures[name]} times without completing a batch between: "
                     f"giving up ({summary})")
            raise error
        self.say(f"query {label} failed ({summary}); starting it again from its checkpoint in "
                 f"{self.policy.pause_s:g} s (try {self.failures[name]} of {self.policy.restarts})")
        self.sleep(self.policy.pause_s)

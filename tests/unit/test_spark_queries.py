"""The job's queries restarted from their checkpoints after failures (``kcl_mp.spark.queries``):
which failures are retried, when the job gives up, and what it says."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kcl_mp.spark.queries import Queries, RestartPolicy


class Failure(Exception):
    pass


class FakeQuery:
    """One start of a query: it ends with ``error`` (None: done) after reading ``rows``."""

    def __init__(self, name: str, error: Exception | None, rows: int = 0):
        self.name, self.error, self.isActive = name, error, False
        self.recentProgress = [{"numInputRows": rows}] if rows else []
        self.stopped = False

    def awaitTermination(self) -> None:  # noqa: N802
        if self.error is not None:
            raise self.error

    def exception(self) -> Exception | None:
        return self.error

    def stop(self) -> None:
        self.stopped = True


def starts(name: str, outcomes: list[tuple[Exception | None, int]]) -> tuple[list[FakeQuery], object]:
    made: list[FakeQuery] = []
    pending: Iterator = iter(outcomes)

    def start() -> FakeQuery:
        error, rows = next(pending)
        made.append(FakeQuery(name, error, rows))
        return made[-1]

    return made, start


@pytest.mark.parametrize("outcomes, restarts, gives_up, starts_made", [
    ([(None, 5)], 3, False, 1),                                        # ran to its end
    ([(Failure("worker failed to connect back"), 0), (None, 5)], 3, False, 2),  # one passing failure
    ([(Failure("a"), 0)] * 3 + [(None, 1)], 3, False, 4),             # three in a row: the last try
    ([(Failure("a"), 0)] * 4, 3, True, 4),                             # a fourth in a row: given up
    ([(Failure("a"), 0)], 0, True, 1),                                 # --restarts 0: fails at once
    ([(Failure("a"), 0), (Failure("a"), 0), (Failure("a"), 9), (Failure("a"), 0), (None, 1)], 2, False, 5),
    # a batch completed between resets the count
])
@pytest.mark.parametrize("together", [False, True])
def test_restarts(outcomes, restarts, gives_up, starts_made, together):
    said: list[str] = []
    pauses: list[float] = []
    made, start = starts("parquet", outcomes)
    queries = Queries({"parquet": start}, RestartPolicy(restarts, 2.0), sleep=pauses.append, say=said.append)
    run = (lambda: queries.run_together(lambda: None, lambda: None)) if together else queries.run_one_by_one
    if gives_up:
        with pytest.raises(Failure):
            run()
        assert "giving up (a)" in said[-1]
    else:
        run()
        assert queries.finished["parquet"] is made[-1]
    assert len(made) == starts_made
    assert pauses == [2.0] * (starts_made - 1)
    assert all("starting it again from its checkpoint in 2 s" in line for line in said[:starts_made - 1])


def test_one_query_given_up_stops_the_others_and_names_itself():
    said: list[str] = []
    _, failing = starts("delta", [(Failure("S3 said 503\nstack..."), 0)] * 2)
    running = FakeQuery("iceberg", None)
    running.isActive = True
    queries = Queries({"delta": failing, "iceberg": lambda: running}, RestartPolicy(1, 0.0),
                      sleep=lambda _: None, say=said.append)
    with pytest.raises(Failure):
        try:
            queries.run_together(lambda: None, lambda: None)
        finally:
            queries.stop()
    assert running.stopped
    assert said == ["query delta failed (S3 said 503); starting it again from its checkpoint in 0 s (try 1 of 1)",
                    "query delta failed 2 times without completing a batch between: giving up (S3 said 503)"]


def test_policy_refuses_negative_numbers():
    with pytest.raises(ValueError, match="restarts"):
        RestartPolicy(-1, 1.0)


def test_a_start_that_raises_is_tried_again_then_given_up():
    said: list[str] = []
    tries: list[int] = []

    def start() -> FakeQuery:
        tries.append(1)
        if len(tries) < 3:
            raise Failure("Python worker failed to connect back.")
        return FakeQuery("kclmp_landing_delta", None, 3)

    queries = Queries({"delta": start}, RestartPolicy(2, 0.5), sleep=lambda _: None, say=said.append)
    queries.run_one_by_one()
    assert len(tries) == 3 and queries.finished["delta"].name == "kclmp_landing_delta"
    assert said[0] == ("query delta failed (Python worker failed to connect back.); starting it again from its "
                       "checkpoint in 0.5 s (try 1 of 2)")
    tries.clear()
    with pytest.raises(Failure):
        Queries({"delta": start}, RestartPolicy(1, 0.0), sleep=lambda _: None, say=said.append).run_together(
            lambda: None, lambda: None)
    assert said[-1] == ("query delta failed 2 times without completing a batch between: giving up "
                        "(Python worker failed to connect back.)")


PROXY = ("An exception was raised by the Python Proxy. Return Message: Traceback (most recent call last):\n"
         '  File "/x/py4j/clientserver.py", line 617, in _call_proxy\n    return_value = getattr(...)\n'
         "Traceback (most recent call last):\n"
         '  File "/x/kcl_mp/spark/tables.py", line 237, in write\n    store = load_catalog(...)\n'
         "ModuleNotFoundError: No module named 'sqlalchemy'\n\n"
         "=== Streaming Query ===\nIdentifier: kclmp_landing_iceberg [id = 1]")


@pytest.mark.parametrize("text, summary, lasting", [
    (PROXY, "ModuleNotFoundError: No module named 'sqlalchemy'", True),
    ("Python worker failed to connect back.\n\tat org.apache...", "Python worker failed to connect back.", False),
    ("Traceback (most recent call last):\n  File \"t.py\", line 1\n"
     "pyiceberg.exceptions.NotInstalledError: SQLAlchemy support not installed: pip install 'pyiceberg[sql-sqlite]'",
     "pyiceberg.exceptions.NotInstalledError: SQLAlchemy support not installed: pip install 'pyiceberg[sql-sqlite]'",
     True),
    ("Traceback (most recent call last):\n  File \"t.py\", line 1\nOSError: S3 said 503", "OSError: S3 said 503", False),
    ("", "Failure", False),
])
def test_a_failure_is_said_by_its_python_exception_and_a_missing_module_is_not_retried(text, summary, lasting):
    said: list[str] = []
    pauses: list[float] = []
    made, start = starts("iceberg", [(Failure(text), 0), (None, 1)])
    queries = Queries({"iceberg": start}, RestartPolicy(3, 1.0), sleep=pauses.append, say=said.append)
    if lasting:
        with pytest.raises(Failure):
            queries.run_one_by_one()
        assert said == [f"query iceberg failed ({summary}): a restart cannot mend this; giving up"]
        assert len(made) == 1 and pauses == []
    else:
        queries.run_one_by_one()
        assert said[0].startswith(f"query iceberg failed ({summary}); starting it again")
        assert len(made) == 2


def test_a_start_that_cannot_import_is_given_up_at_once():
    said: list[str] = []

    def start() -> FakeQuery:
        raise ModuleNotFoundError("No module named 'sqlalchemy'")

    with pytest.raises(ModuleNotFoundError):
        Queries({"iceberg": start}, RestartPolicy(3, 1.0), sleep=lambda s: None, say=said.append).run_one_by_one()
    assert said == ["query iceberg failed (No module named 'sqlalchemy'): a restart cannot mend this; giving up"]


class Starting:
    """A running query whose sources exist after ``polls`` looks at its status."""

    def __init__(self, name: str, polls: int, log: list[str]):
        self.name, self.isActive, self.recentProgress, self.polls, self.log = name, True, [], polls, log

    @property
    def status(self) -> dict:
        self.polls -= 1
        message = "Getting offsets from kclmp_kinesis" if self.polls <= 0 else \
            ("Initializing StreamExecution", "Initializing sources")[self.polls % 2]
        return {"message": message, "isTriggerActive": self.polls > 0, "isDataAvailable": False}

    def exception(self) -> None:
        return None

    def stop(self) -> None:
        self.isActive = False


def test_together_with_a_settle_each_query_starts_once_the_others_sources_exist():
    """The second query starts only once the first's sources exist: two Python-source queries
    initializing at once can corrupt the map of settings Spark shares between them."""
    log: list[str] = []
    made: dict[str, Starting] = {}

    def start(name: str, polls: int) -> Starting:
        log.append(f"start {name}")
        made[name] = Starting(name, polls, log)
        return made[name]

    def await_any() -> None:  # the test's end: both queries stop
        for query in made.values():
            query.isActive = False

    queries = Queries({"parquet": lambda: start("parquet", 3), "delta": lambda: start("delta", 1)},
                      RestartPolicy(0, 0.0), sleep=lambda s: log.append(f"sleep {s}"), say=log.append)
    queries.run_together(await_any, lambda: None, settle_s=60.0)
    assert log == ["start parquet", "sleep 0.2", "sleep 0.2", "start delta"]


def test_together_without_a_settle_starts_every_query_at_once():
    log: list[str] = []
    made: list[Starting] = []

    def start(name: str) -> Starting:
        log.append(f"start {name}")
        made.append(Starting(name, 99, log))
        return made[-1]

    def await_any() -> None:
        for query in made:
            query.isActive = False

    Queries({"parquet": lambda: start("parquet"), "delta": lambda: start("delta")}, RestartPolicy(0, 0.0),
            sleep=lambda s: log.append(f"sleep {s}"), say=log.append).run_together(await_any, lambda: None)
    assert log == ["start parquet", "start delta"]

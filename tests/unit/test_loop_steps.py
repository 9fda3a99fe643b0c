"""A loop step that raises is logged with its name and traceback, counted, and run again;
one that keeps failing stops the supervisor (``supervisor.steps``)."""

from __future__ import annotations

import logging
from collections import Counter

from kcl_mp.metrics.catalogue import Recorder
from kcl_mp.supervisor.steps import MAX_FAILURES, Steps


def test_a_failing_step_is_logged_counted_and_the_loop_goes_on(caplog):
    counters: Counter[str] = Counter()
    metrics = Recorder(enabled=True)
    steps = Steps(logging.getLogger("kcl_mp.supervisor"), metrics, counters)
    with caplog.at_level(logging.ERROR, "kcl_mp.supervisor"):
        assert steps.run("scan", lambda: int("1.5")) is False
    (record,) = caplog.records
    assert record.getMessage() == "loop step scan failed unexpectedly (1 turns in a row); it runs again next turn"
    assert record.exc_info is not None and record.exc_info[0] is ValueError  # the traceback goes through logging
    assert counters["loop_step_errors"] == 1 and steps.failed is None
    assert [key for key in metrics.drain()] == [("loop_step_errors", "")]
    assert steps.run("scan", lambda: None) is True and steps.failures == {}


def test_a_step_failing_turn_after_turn_means_the_supervisor_cannot_go_on(caplog):
    steps = Steps(logging.getLogger("kcl_mp.supervisor"), None, Counter())
    with caplog.at_level(logging.ERROR, "kcl_mp.supervisor"):
        for turn in range(MAX_FAILURES):
            assert steps.failed is None, turn
            steps.run("renew", lambda: {}["leaseDuration"])
            steps.run("scan", lambda: None)  # another step's success does not reset it
    assert steps.failed == "renew"
    assert caplog.records[-1].getMessage().endswith(f"({MAX_FAILURES} turns in a row); the supervisor cannot go on")


def test_a_retriable_error_is_a_warning_and_never_stops_the_host(caplog):
    from kcl_mp.errors import DependencyError, ThrottledError

    steps = Steps(logging.getLogger("kcl_mp.supervisor"), None, Counter())

    def throttled() -> None:
        raise ThrottledError("scanning lease table app: ProvisionedThroughputExceededException")

    with caplog.at_level(logging.WARNING, "kcl_mp.supervisor"):
        for _ in range(2 * MAX_FAILURES):
            steps.run("scan", throttled)
    assert steps.failed is None and steps.counters["loop_step_errors"] == 2 * MAX_FAILURES
    assert {(r.levelname, r.exc_info) for r in caplog.records} == {("WARNING", None)}
    assert caplog.records[0].getMessage() == ("loop step scan failed: scanning lease table app: "
                                              "ProvisionedThroughputExceededException; it runs again next turn")

    def refused() -> None:
        raise DependencyError("reading the leader lock: AccessDeniedException", retriable=False)

    for _ in range(MAX_FAILURES):
        steps.run("scan", refused)
    assert steps.failed == "scan"


def test_a_step_that_takes_long_is_logged_with_its_duration_once_a_minute(caplog):
    """Renewals wait for the loop: a step over half the renewal interval says so, at most once
    a minute a step; the read step waits on purpose and is never reported."""
    now = [0.0]
    steps = Steps(logging.getLogger("kcl_mp.supervisor"), None, Counter(), renew_interval_s=3.0, clock=lambda: now[0])

    def takes(seconds: float):
        return lambda: now.__setitem__(0, now[0] + seconds)

    with caplog.at_level(logging.WARNING, "kcl_mp.supervisor"):
        assert steps.run("scan", takes(1.0)) is True  # under 1.5 s
        assert steps.run("read", takes(3.0)) is True  # a wait
        assert steps.run("scan", takes(4.2)) is True
        assert steps.run("scan", takes(5.0)) is True  # within the minute: not again
        assert steps.run("renew", takes(2.0)) is True  # another step
        now[0] += 60.0

        def slow_then_fails() -> None:
            now[0] += 2.5
            int("x")

        assert steps.run("scan", slow_then_fails) is False  # a minute later, failing: reported too
    messages = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    said = "s: the next renewal round waits for the loop (renewals are due every 3.0 s); logged at most once a minute a step"
    assert messages == [f"loop step scan took 4.2 {said}", f"loop step renew took 2.0 {said}",
                        f"loop step scan took 2.5 {said}"]

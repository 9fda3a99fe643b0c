"""The decision table of kcl_mp/supervisor/restart_policy.py: what happens when a shard worker has gone."""

from __future__ import annotations

import random

import pytest

from kcl_mp.config import ProcessorSettings
from kcl_mp.supervisor.restart_policy import HEALTHY_AFTER_S, Gone, after_exit

RESTART = ProcessorSettings(command=("p",), max_restarts=3)
EXIT = ProcessorSettings(command=("p",), max_restarts=3, on_failure="EXIT")


def gone(**facts) -> Gone:
    base = dict(shard_end=None, code=4, failure="boom", ran_s=2.0, held=True, stopping=False, at_shard_end=False,
                cannot_start=False, broke_protocol=True)
    return Gone(**{**base, **facts})


CASES = [
    # (comment, facts, failures before, settings, expected action, counters, attempts)
    ("shard end checkpointed: done, even while stopping", dict(shard_end=True, stopping=True), 2, RESTART,
     "finished", (), 0),
    ("the lease went elsewhere: nothing to do", dict(held=False), 0, RESTART, "none", (), 0),
    ("the host is stopping: nothing to restart", dict(stopping=True), 0, RESTART, "none", (), 0),
    ("stopped for leaseLost when the hold lapsed, the lease is back: resume now, no failure counted",
     dict(told_lost=True, code=0, failure=None, broke_protocol=False), 3, RESTART, "resume", (), 0),
    ("stopped cleanly after a refused checkpoint, the lease is back: resume, no failure counted",
     dict(code=0, failure=None, broke_protocol=False), 0, RESTART, "resume", (), 0),
    ("told leaseLost, but it crashed: a failure as any other", dict(told_lost=True), 0, RESTART, "restart",
     ("processor_failures", "processor_restarts"), 1),
    ("the executable cannot start: a configuration error", dict(cannot_start=True, code=3), 0, RESTART,
     "stop_host", (), 0),
    ("checkpointed SHARD_END, died before saying so", dict(at_shard_end=True, code=-9), 0, RESTART,
     "finished", (), 0),
    ("missed the shard-end checkpoint: restart, counted", dict(shard_end=False, code=0), 0, RESTART,
     "restart", ("shard_end_not_checkpointed", "processor_restarts"), 1),
    ("missed it even with processorFailure EXIT: restart (not a protocol break)", dict(shard_end=False, code=0),
     0, EXIT, "restart", ("shard_end_not_checkpointed", "processor_restarts"), 1),
    ("a crash: restart", {}, 0, RESTART, "restart", ("processor_failures", "processor_restarts"), 1),
    ("a crash with processorFailure EXIT: stop the host", {}, 0, EXIT, "stop_host", ("processor_failures",), 0),
    ("AWS kept failing with processorFailure EXIT: restart", dict(broke_protocol=False, code=5), 0, EXIT,
     "restart", ("processor_failures", "processor_restarts"), 1),
    ("the third failure in a row: restart 3 of 3", {}, 2, RESTART, "restart",
     ("processor_failures", "processor_restarts"), 3),
    ("the fourth in a row: release the lease", {}, 3, RESTART, "release",
     ("processor_failures", "leases_released_after_failures"), 4),
    ("a worker that ran long enough starts the count again", dict(ran_s=HEALTHY_AFTER_S + 1), 3, RESTART,
     "restart", ("processor_failures", "processor_restarts"), 1),
]


@pytest.mark.parametrize("comment, facts, before, settings, action, counters, attempts", CASES,
                         ids=[case[0] for case in CASES])
def test_after_exit(comment, facts, before, settings, action, counters, attempts):
    decision = after_exit(gone(**facts), before, settings, random.Random(7))
    assert (decision.action, decision.counters, decision.attempts) == (action, counters, attempts)
    if action == "restart":
        assert 0 <= decision.delay_s <= min(60.0, 2 ** (attempts - 1))
    if action in ("restart", "release", "stop_host") and not facts.get("cannot_start"):
        assert decision.why


def test_the_causes_read_as_the_logs_say_them():
    assert after_exit(gone(), 0, RESTART, random.Random(1)).why == "the processor failed: boom"
    assert "stopping this host (kclmp.processorFailure = EXIT" in after_exit(gone(), 0, EXIT, random.Random(1)).why
    assert after_exit(gone(cannot_start=True, failure="no such file"), 0, RESTART, random.Random(1)).why == \
        "the processor cannot be started (no such file)"

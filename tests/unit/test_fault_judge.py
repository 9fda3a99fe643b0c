"""The fault run's judge (tests/support/fault_judge.py), rule by rule, on small histories
written out by hand: each rule must pass what is right and catch what is wrong."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from kcl_mp.devtools.producer import Put
from tests.support.fault_judge import TOLERANCE_S, judge
from tests.support.fault_run import Facts

T0 = 1_800_000_000.0
SHARD = "shardId-000000000000"
SEQ = [str(49_000_000_000_000_000_000_000_000_000_000_000_000_000_000_000_000 + i) for i in range(10)]


def took(t: float, holder: str, checkpoint: str) -> str:
    """A host's JSON log line for taking SHARD's lease, with its structured event."""
    return json.dumps({"ts": datetime.fromtimestamp(t).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3], "level": "INFO",
                       "msg": f"took lease {SHARD} (from {holder}), checkpoint {checkpoint}",
                       "event": "lease_taken", "lease": SHARD}) + "\n"


def init(pid: int, at: float, host: str, seq: str = "TRIM_HORIZON") -> dict:
    return {"event": "initialize", "seq": seq, "sub": None, "host": host, "at": at, "_shard": SHARD, "_pid": pid}


def rec(pid: int, at: float, i: int, key: str = "k") -> dict:
    return {"pk": key, "data": f'{{"id": {i}}}', "seq": SEQ[i], "sub": 0, "ts": round((T0 + i) * 1000), "at": at,
            "_shard": SHARD, "_pid": pid}


def puts(n: int, key: str = "k") -> list[Put]:
    return [Put(i, key, f'{{"id": {i}}}', SHARD, SEQ[i], 0) for i in range(n)]


def facts(entries: list[dict], n: int = 3, logs: dict[str, str] | None = None, **more: object) -> Facts:
    logs = logs or {"host-a": took(T0, "nobody", "TRIM_HORIZON")}
    return Facts(0, (), puts=puts(n), entries=entries, logs=logs, exit_codes={h: 0 for h in logs}, **more)


def test_a_clean_history_passes_with_its_figures():
    verdict = judge(facts([init(1, T0 + 1, "host-a"), *(rec(1, T0 + 2 + i, i) for i in range(3))]))
    assert verdict.failures == []
    assert (verdict.figures["put"], verdict.figures["delivered"], verdict.figures["lost"]) == (3, 3, 0)
    assert verdict.figures["longest_wait"] == (SHARD, 2.0)  # each record 2 s from its arrival to its delivery


def test_a_record_never_delivered_is_lost():
    verdict = judge(facts([init(1, T0 + 1, "host-a"), rec(1, T0 + 2, 0), rec(1, T0 + 3, 1)]))
    assert verdict.figures["lost"] == 1 and "never delivered" in verdict.failures[0]


@pytest.mark.parametrize("after_s, caught", [(TOLERANCE_S - 0.1, False), (TOLERANCE_S + 0.1, True)])
def test_a_delivery_after_another_host_took_the_lease_is_caught_beyond_the_tolerance(after_s, caught):
    logs = {"host-a": took(T0, "nobody", "TRIM_HORIZON"),
            "host-b": took(T0 + 10, "host-a", SEQ[1])}
    entries = [init(1, T0 + 1, "host-a"), rec(1, T0 + 2, 0), rec(1, T0 + 3, 1), rec(1, T0 + 10 + after_s, 2)]
    verdict = judge(facts(entries, logs=logs))
    assert (verdict.figures["non_holder"] == 1) is caught
    assert any("did not hold the lease" in f for f in verdict.failures) is caught


def test_a_redelivery_after_a_processor_kill_is_explained_and_one_below_the_checkpoint_is_not():
    killed = [{"t": T0 + 4, "action": "kill_processor", "host": "host-a", "pids": [1]}]
    first = [init(1, T0 + 1, "host-a"), rec(1, T0 + 2, 0), rec(1, T0 + 3, 1)]
    again = judge(facts([*first, init(2, T0 + 5, "host-a", SEQ[0]), rec(2, T0 + 6, 1), rec(2, T0 + 7, 2)],
                        injected=killed))
    assert again.failures == [] and again.figures["duplicates"] == {"processor killed": 1}
    below = judge(facts([*first, init(2, T0 + 5, "host-a", SEQ[1]), rec(2, T0 + 6, 1), rec(2, T0 + 7, 2)],
                        injected=killed))
    assert below.figures["unexplained"] == 1 and "start checkpoint" in below.failures[0]


def test_a_redelivery_without_a_fault_is_unexplained():
    entries = [init(1, T0 + 1, "host-a"), rec(1, T0 + 2, 0), rec(1, T0 + 3, 1),
               init(2, T0 + 5, "host-a", SEQ[0]), rec(2, T0 + 6, 1), rec(2, T0 + 7, 2)]
    assert judge(facts(entries)).figures["unexplained"] == 1


def test_first_deliveries_out_of_put_order_are_caught():
    verdict = judge(facts([init(1, T0 + 1, "host-a"), rec(1, T0 + 2, 1), rec(1, T0 + 3, 0), rec(1, T0 + 4, 2)]))
    assert any("out of order" in f for f in verdict.failures)


def test_a_checkpoint_going_back_and_an_unclean_exit_are_caught():
    back = [{"event": "checkpoint", "seq": SEQ[s], "sub": 0, "error": None, "at": T0 + 3 + n, "_shard": SHARD,
             "_pid": 1} for n, s in enumerate((2, 1))]
    verdict = judge(facts([init(1, T0 + 1, "host-a"), *(rec(1, T0 + 2, i) for i in range(3)), *back]))
    assert any("backwards" in f for f in verdict.failures)
    unclean = facts([init(1, T0 + 1, "host-a"), *(rec(1, T0 + 2, i) for i in range(3))])
    unclean.exit_codes = {"host-a": 1}
    assert any("did not exit 0" in f for f in judge(unclean).failures)


def test_a_checkpoint_saved_before_a_higher_one_but_answered_after_it_is_not_backwards():
    """A host paused between its write and the reply: the reply comes after the next owner's
    higher checkpoint, but the write was asked for (and landed) before it."""
    late_reply = {"event": "checkpoint", "seq": SEQ[1], "sub": 0, "error": None, "asked": T0 + 3, "at": T0 + 9,
                  "_shard": SHARD, "_pid": 1}
    next_owner = {"event": "checkpoint", "seq": SEQ[2], "sub": 0, "error": None, "asked": T0 + 5, "at": T0 + 5.1,
                  "_shard": SHARD, "_pid": 2}
    verdict = judge(facts([init(1, T0 + 1, "host-a"), *(rec(1, T0 + 2, i) for i in range(3)), late_reply, next_owner]))
    assert not any("backwards" in f for f in verdict.failures)


@pytest.mark.parametrize("again_pid,backwards", [(1, False), (3, True)])
def test_the_last_saved_position_asked_again_is_not_backwards_but_another_processor_s_is(again_pid, backwards):
    """After a pause, the old owner's shutdown checkpoint asks again for the position it saved
    last: answered without a write (Java's advancePosition), so the table never moved back. A
    processor that never saved that position asking for it after a higher one is caught."""
    saved = {"event": "checkpoint", "seq": SEQ[1], "sub": 0, "error": None, "asked": T0 + 3, "at": T0 + 3.1,
             "_shard": SHARD, "_pid": 1}
    next_owner = {"event": "checkpoint", "seq": SEQ[2], "sub": 0, "error": None, "asked": T0 + 5, "at": T0 + 5.1,
                  "_shard": SHARD, "_pid": 2}
    again = {**saved, "asked": T0 + 9, "at": T0 + 9.001, "_pid": again_pid}
    verdict = judge(facts([init(1, T0 + 1, "host-a"), *(rec(1, T0 + 2, i) for i in range(3)), saved, next_owner, again]))
    assert any("backwards" in f for f in verdict.failures) == backwards, verdict.failures

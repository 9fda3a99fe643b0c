"""The KCL 3.x fleet harness's timeline readers (tests/support/fleet_findings.py) on a
history written out by hand; the harness's run with the real Java daemon and the snapshot
comparison on its snapshots are in tests/e2e/test_kcl3_acceptance.py."""

from __future__ import annotations

import logging

import pytest

from kcl_mp import logs
from kcl_mp.logs import LeaseEvent, lease_event

from ..support.fleet_findings import kclmp_assigned, moved_back, moves, redelivered, rescues, resumes, self_acquired

pytestmark = pytest.mark.integration


def test_moved_back_and_moves_read_the_timeline():
    history = {"s1": [[0.0, None, None], [1.0, "a", "1"], [5.0, "b", "1"], [9.0, "a", "2"], [30.0, "b", "3"]],
               "s2": [[0.0, "a", None], [2.0, None, None], [3.0, "a", "1"]]}
    assert moved_back(history, 0.0, 100.0, within_s=10.0) == ["s1: a -> b -> a (4.0 s apart)"]
    assert moved_back(history, 10.0, 100.0, within_s=30.0) == ["s1: b -> a -> b (21.0 s apart)"]
    assert moved_back(history, 0.0, 100.0, within_s=3.0) == []
    assert moves(history, 0.0, 100.0) == ["s1: a -> b", "s1: b -> a", "s1: a -> b"]  # s2: released, back to a


def test_the_host_log_readers_key_on_the_lease_events(capsys):
    """A kcl-mp host's JSON log, written by its own logger: the readers find each lease event,
    whatever the message says, and only within the window."""
    logs.setup("INFO", "json", "h-1")
    log = logs.ShardLog(logging.getLogger("kcl_mp.supervisor"), "h-1")
    log.info("took lease s1 (from nobody), checkpoint TRIM_HORIZON", extra=lease_event(LeaseEvent.TAKEN, "s1"))
    log.info("prose about s9 that mentions took lease s9 (from x)")
    log.info("took lease s2 (from j: nobody renewed ...)", extra=lease_event(LeaseEvent.RESCUED, "s2"))
    log.info("took lease s3 from j (its owner stopped renewing it)", extra=lease_event(LeaseEvent.FORCED, "s3"))
    log.info("leader: assigned lease s4 to h-2 from j", extra=lease_event(LeaseEvent.ASSIGNED, "s4", to="h-2", **{"from": "j"}))
    log.info("leader: handing lease s5 to h-3", extra=lease_event(LeaseEvent.HANDOFF_STARTED, "s5", to="h-3", **{"from": None}))
    text = capsys.readouterr().err
    logs.setup("WARNING", "text")
    assert self_acquired(text, 0, 1e12) == ["s1", "s2"]  # forced: given by the leader, not chosen
    assert rescues(text, 0, 1e12) == ["s2", "s3"]  # a lease handed over by a dying leader, taken by force
    assert [(lease, old, new) for _, lease, old, new in kclmp_assigned(text, 0, 1e12)] == [("s4", "j", "h-2"),
                                                                                     ("s5", None, "h-3")]
    assert self_acquired(text, 0, 1) == [] and kclmp_assigned(text, 0, 1) == []


def _history(second_start: str) -> tuple[list[dict], list[list]]:
    """java-1 gets records 1-5 and records a checkpoint at 3; kclmp-b starts at ``second_start``
    (the lease's checkpoint then) and gets the records after it, to 8."""
    shard = "shardId-000000000007"
    entries = [{"event": "initialize", "seq": "TRIM_HORIZON", "sub": None, "host": "java-1", "at": 1.0,
                "_shard": shard, "_pid": 1}]
    entries += [{"seq": str(n), "sub": 0, "at": 1.0 + n, "_shard": shard, "_pid": 1} for n in range(1, 6)]
    entries.append({"event": "checkpoint", "seq": "3", "sub": 0, "error": None, "at": 4.5, "_shard": shard, "_pid": 1})
    entries.append({"event": "initialize", "seq": second_start, "sub": 0, "host": "kclmp-b", "at": 20.0,
                    "_shard": shard, "_pid": 2})
    entries += [{"seq": str(n), "sub": 0, "at": 20.0 + n, "_shard": shard, "_pid": 2}
                for n in range(int(second_start) + 1, 9)]
    return entries, [[n, shard, str(n), 0] for n in range(1, 9)]


def test_a_resume_from_a_checkpoint_the_killed_daemon_wrote_but_never_confirmed_is_no_skip():
    """The lease table held 5 (java-1's daemon wrote it and was SIGKILLed before its processor
    heard back, so no recorder line says so): kclmp-b starting after 5 skipped nothing. A start
    beyond any record a processor got is still a skip."""
    (resumed,) = resumes(*_history("5"))
    assert resumed.ok and (resumed.checkpoint, resumed.first, resumed.next_put) == ("5/0", "6/0", "6/0")
    (skipped,) = resumes(*_history("7"))
    assert not skipped.ok and (skipped.checkpoint, skipped.next_put) == ("3/0", "4/0"), skipped


def test_a_record_is_excused_twice_only_if_its_first_processor_never_checkpointed_it():
    """Processor 1 got 1..5 and checkpointed 3, then died; processor 2 resumed from 3 and got 4..8:
    4 and 5 twice, excused. Had processor 1 also written 5 (or SHARD_END), or had it got 3 again
    after checkpointing it, the second delivery is a finding."""
    entries, _ = _history("3")
    assert redelivered(entries) == []
    shard = "shardId-000000000007"
    late = {"event": "checkpoint", "seq": "5", "sub": 0, "error": None, "at": 6.5, "_shard": shard, "_pid": 1}
    assert redelivered([*entries, late]) == [f"{shard} {n}/0: delivered again after processor 1 checkpointed it"
                                             for n in (4, 5)]
    ended = {**late, "seq": None}
    assert len(redelivered([*entries, ended])) == 2
    failed = {**late, "error": "ShutdownException"}
    assert redelivered([*entries, failed]) == []
    again = {"seq": "3", "sub": 0, "at": 25.0, "_shard": shard, "_pid": 2}
    assert redelivered([*entries, again]) == [f"{shard} 3/0: delivered again after processor 1 checkpointed it"]

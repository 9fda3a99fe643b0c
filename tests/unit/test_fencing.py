"""The decision tables of kcl_mp/leases/fencing.py: may a shard's records reach its processor now? May a
lease whose renewal lost its race be renewed from what the table holds?"""

from __future__ import annotations

import pytest

from kcl_mp.leases.fencing import Hold, checkpoint_wait_s, margin_s, still_ours
from kcl_mp.leases.lease import Lease

MARGINS = [
    # (comment, failoverTimeMillis in s, expected margin)
    ("the default 10 s: 0.5 s + 1 % of failover", 10.0, 0.6),
    ("a long failover: the clock-rate share grows", 60.0, 1.1),
    ("the tests' 3 s", 3.0, 0.53),
    ("a 1 s failover: capped at a third, so one failed renewal does not pause", 1.0, 1 / 3),
    ("tiny: still a third", 0.3, 0.1),
]


@pytest.mark.parametrize("comment,failover_s,expected", MARGINS, ids=[c[0] for c in MARGINS])
def test_margin(comment, failover_s, expected):
    assert margin_s(failover_s) == pytest.approx(expected)
    assert Hold(failover_s, 0.0).limit_s == pytest.approx(failover_s - expected)


CASES = [
    # (comment, failover s, renewals sent at (the first: the spawn), now, fresh?, fresh for s)
    ("just spawned after a renewal", 10.0, [100.0], 100.1, True, 9.3),
    ("one renew interval later, not yet confirmed again", 10.0, [100.0], 103.4, True, 6.0),
    ("a renewal failed once (throttled): still delivering", 10.0, [100.0], 106.7, True, 2.7),
    ("just short of the limit", 10.0, [100.0], 109.39, True, 0.01),
    ("at the limit: another host may take it soon", 10.0, [100.0], 109.4, False, 0.0),
    ("the supervisor was stopped for 15 s", 10.0, [100.0], 115.0, False, 0.0),
    ("renewed again: fresh from the new send time", 10.0, [100.0, 108.0], 115.0, True, 2.4),
    ("an old renewal arriving late changes nothing", 10.0, [108.0, 100.0], 115.0, True, 2.4),
    ("a renewal sent before a stall, confirmed after it: as old as its send time", 10.0, [100.0, 101.0], 112.0,
     False, 0.0),
    ("the tests' 3 s failover, 2 s after the renewal", 3.0, [50.0], 52.0, True, 0.47),
    ("the tests' 3 s failover, 2.5 s after the renewal", 3.0, [50.0], 52.5, False, 0.0),
]


@pytest.mark.parametrize("comment,failover_s,renewals,now,fresh,fresh_for", CASES, ids=[c[0] for c in CASES])
def test_fresh(comment, failover_s, renewals, now, fresh, fresh_for):
    hold = Hold(failover_s, renewals[0])
    for at in renewals[1:]:
        hold.renewed(at)
    assert hold.fresh(now) is fresh
    assert hold.fresh_for(now) == pytest.approx(fresh_for, abs=1e-9)
    assert hold.age(now) == pytest.approx(now - max(renewals))


def test_a_checkpoint_waits_one_failover_period_for_a_renewal():
    assert checkpoint_wait_s(10.0) == 10.0


ME, OTHER = "host-a", "host-b"
STILL_OURS = [
    # (comment, counter we renewed from, the lease now: (owner, checkpointOwner, counter) or None, still ours?)
    ("our renewal landed but its answer was lost: one step, ours", 7, (ME, None, 8), True),
    ("a leader asks us to hand it over: we still hold it until our checkpoint", 7, (OTHER, ME, 8), True),
    ("the counter moved two steps: another host held it between and handed it back", 7, (ME, None, 9), False),
    ("taken, renewed and handed back while we were paused", 7, (ME, None, 12), False),
    ("another host holds it", 7, (OTHER, None, 8), False),
    ("handed to us, the old owner still checkpointing: not ours to process yet", 7, (ME, OTHER, 8), False),
    ("deleted", 7, None, False),
]


@pytest.mark.parametrize("comment,sent,now,expected", STILL_OURS, ids=[c[0] for c in STILL_OURS])
def test_still_ours(comment, sent, now, expected):
    """After a renewal's lost race: renew again from the table, or count the lease lost (so
    its processor stops and starts again from the checkpoint)."""
    current = None if now is None else Lease("shardId-000000000001", owner=now[0], checkpoint_owner=now[1],
                                              counter=now[2])
    assert still_ours(Lease("shardId-000000000001", owner=ME, counter=sent), current, ME) is expected

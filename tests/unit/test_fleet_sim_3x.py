"""A KCL 3.x fleet of kcl-mp workers with a kcl-mp leader (kcl_mp.devtools.fleet_sim.LeaderFleet,
virtual clock): 1,000 leases over 100 workers balance within 3 assignment rounds after a cold
start, and no lease moves again (or back and forth) over 10 further rounds; a join and a
crash of the leader settle too, every move of a held lease a handoff."""

from __future__ import annotations

import pytest

from kcl_mp.config import LeaseSettings
from kcl_mp.devtools.fleet_sim import LeaderFleet


@pytest.mark.parametrize("seed", [0, 7])
def test_cold_start_1000_leases_100_workers_within_3_rounds(seed: int) -> None:
    fleet = LeaderFleet(1000, LeaseSettings(table_name="t"), seed=seed)
    fleet.mark()
    fleet.start([f"w{i:03d}" for i in range(100)], at=0.0)
    result = fleet.settle(0.0, max_rounds=10)
    assert result.settled and result.spread == 0, result
    assert result.rounds <= 3, (result, fleet.rounds)
    moves = len(fleet.moves)
    fleet.run_until(fleet.now + 10 * fleet.interval_s)
    assert len(fleet.moves) == moves, "a lease moved after the fleet settled"
    assert fleet.balanced() and result.back_and_forth == 0
    assert sorted(set(fleet.counts().values())) == [10]


def test_join_moves_leases_once_by_handoff() -> None:
    fleet = LeaderFleet(200, LeaseSettings(table_name="t"), seed=3)
    first = [f"w{i:02d}" for i in range(10)]
    fleet.start(first, at=0.0, jitter_s=1.0)
    fleet.assign({key: first[i % 10] for i, key in enumerate(sorted(fleet.table))})
    fleet.run_until(3 * fleet.interval_s)
    event = fleet.now
    fleet.mark()
    fleet.start([f"j{i:02d}" for i in range(10)], at=event)
    result = fleet.settle(event, max_rounds=10)
    assert result.settled and result.spread == 0 and result.rounds <= 3, result
    # 100 moves needed; joiners whose first metrics come after a round's scan get their share
    # a round later, from the joiners that took more meanwhile: a few leases move twice, none back
    assert result.back_and_forth == 0 and result.moves <= 130, result


def test_the_leader_dies_its_successor_assigns_the_dead_leases() -> None:
    fleet = LeaderFleet(60, LeaseSettings(table_name="t"), seed=5)
    names = [f"w{i}" for i in range(6)]
    fleet.start(names, at=0.0, jitter_s=1.0)
    fleet.assign({key: names[i % 6] for i, key in enumerate(sorted(fleet.table))})
    fleet.run_until(3 * fleet.interval_s)
    event, leader = fleet.now, fleet.leader
    fleet.mark()
    fleet.crash([leader])
    assert fleet.leader != leader
    result = fleet.settle(event, max_rounds=20)
    assert result.settled and result.spread == 0 and result.moves == 10 and result.back_and_forth == 0, result
    first_move = min(t for t, _ in fleet.moves if t >= event)
    assert LeaderFleet.LOCK_S <= first_move - event <= LeaderFleet.LOCK_S + 1, "the lock's 120 s, then one round"

"""The 3.x leader's assignment: decision tables (tests/decisions/assignment_cases.json) and invariants over
random fleets (hypothesis): spread <= 1 by count when loads are even, no lease with two
owners, every move of a held lease a handoff, and no move the next round undoes."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st

from kcl_mp.fleet.assignment import AssignmentSettings, LeaseLoad, WorkerLoad, plan_assignment, spread

CASES = json.loads((Path(__file__).parents[1] / "decisions" / "assignment_cases.json").read_text())


def _run(case: dict):
    workers = [WorkerLoad(w, u, m) for w, u, m in case["workers"]]
    leases = [LeaseLoad(k, o, t, e, h) for k, o, t, e, h in case["leases"]]
    return plan_assignment(leases, workers, AssignmentSettings(**case.get("settings", {})),
                           random.Random(case["seed"]), frozenset(case.get("settling", ())),
                           {k: set(v) for k, v in case.get("left", {}).items()},
                           rebalance=case.get("rebalance", True),
                           released={k: set(v) for k, v in case.get("released", {}).items()})


@pytest.mark.parametrize("case", CASES, ids=[c["comment"][:80] for c in CASES])
def test_decision_table(case: dict) -> None:
    plan = _run(case)
    expect = case["expect"]
    assert {m.key: m.to for m in plan.assigned} == expect["assigned"], plan.reason
    assert {m.key: m.to for m in plan.handoffs} == expect["handoffs"], plan.reason
    assert list(plan.spillover) == expect["spillover"], plan.reason
    assert dict(plan.counts) == expect["counts"], plan.reason
    owners = {k: o for k, o, *_ in case["leases"]}
    assert all(m.owner == owners[m.key] for m in plan.moves)  # each write is conditioned on the owner seen


def _apply(leases: list[LeaseLoad], plan) -> list[LeaseLoad]:
    """The fleet after the plan's writes and the handoffs' completion."""
    to = {m.key: m.to for m in plan.moves}
    return [LeaseLoad(x.key, to.get(x.key, x.owner), x.throughput_kbps, False, False) for x in leases]


fleets = st.tuples(
    st.integers(1, 40),  # workers
    st.lists(st.tuples(st.integers(-1, 39), st.booleans()), min_size=0, max_size=200),  # (owner index, expired)
    st.integers(0, 2**16),
)


@hyp_settings(max_examples=60, deadline=None)
@given(fleets)
def test_even_loads_settle_within_three_rounds_and_stay(fleet) -> None:
    n, raw, seed = fleet
    ids = [f"w{i:02d}" for i in range(n)]
    workers = [WorkerLoad(w) for w in ids]
    leases = [LeaseLoad(f"s{i:03d}", ids[o] if 0 <= o < n else (None if o < 0 else f"dead{o}"), None,
                        expired or not (0 <= o < n)) for i, (o, expired) in enumerate(raw)]
    plan = plan_assignment(leases, workers, AssignmentSettings(), random.Random(seed))
    suspects = {x.owner for x in leases if x.expired and x.owner in ids}
    assert sum(plan.counts.values()) == len(leases) and not plan.spillover
    if len(suspects) < n:  # the workers that let nothing expire are balanced at once
        assert spread({w: c for w, c in plan.counts.items() if w not in suspects}) <= 1, plan.reason
    held = {x.key: x for x in leases}
    for move in plan.moves:
        assert move.handoff == (held[move.key].owner in ids and not held[move.key].expired)
        assert move.to != move.owner or suspects == set(ids)  # back to its owner only when nobody else can
    assert len({m.key for m in plan.moves}) == len(plan.moves)  # one write per lease
    left: dict[str, set[str]] = {}  # lease -> workers a balance move (handoff) took it from
    for round_ in range(4):  # balanced by the third round; no handoff back; then nothing moves
        for m in plan.handoffs:
            left.setdefault(m.key, set()).add(m.owner)
        leases = _apply(leases, plan)
        plan = plan_assignment(leases, workers, AssignmentSettings(), random.Random(seed + round_ + 1),
                               frozenset(m.key for m in plan.moves))
        assert all(m.to not in left.get(m.key, ()) for m in plan.moves)
        assert round_ < 2 or not plan.moves, plan.reason
        assert round_ < 1 or spread(plan.counts) <= 1, plan.reason


@hyp_settings(max_examples=40, deadline=None)
@given(st.integers(2, 12), st.lists(st.floats(0, 500), min_size=1, max_size=80), st.integers(0, 2**16))
def test_uneven_throughput_never_ping_pongs(n, kbps, seed) -> None:
    ids = [f"w{i:02d}" for i in range(n)]
    workers = [WorkerLoad(w) for w in ids]
    rng = random.Random(seed)
    leases = [LeaseLoad(f"s{i:03d}", rng.choice(ids), t) for i, t in enumerate(kbps)]
    moved: dict[str, list[str]] = {}
    for round_ in range(6):
        plan = plan_assignment(leases, workers, AssignmentSettings(), random.Random(seed + round_))
        for m in plan.moves:
            assert m.handoff
            assert m.owner not in moved.get(m.key, [])  # never back to a worker it left
            moved.setdefault(m.key, []).append(m.owner)
        leases = _apply(leases, plan)
    assert not plan_assignment(leases, workers, AssignmentSettings(), random.Random(seed)).moves


@hyp_settings(max_examples=30, deadline=None)
@given(st.integers(2, 6), st.lists(st.floats(1, 100), min_size=12, max_size=120), st.integers(0, 2**16))
def test_cpu_driven_fleet_settles_without_returns(n, kbps, seed) -> None:
    """Closed loop: each worker's CPU follows the load it carries at its own (hidden) speed;
    rounds rebalance by utilisation, no lease goes back to a worker it left, and moves stop.
    (With fewer leases than workers a single lease can overload any worker it lands on;
    ``left`` still bounds its moves to one per worker.)"""
    rng = random.Random(seed)
    ids = [f"w{i}" for i in range(n)]
    speed = {w: rng.uniform(0.5, 2.0) for w in ids}
    leases = [LeaseLoad(f"s{i:03d}", rng.choice(ids), t) for i, t in enumerate(kbps)]
    left: dict[str, set[str]] = {}
    moves_per_round = []
    for round_ in range(12):
        load = {w: 0.0 for w in ids}
        for lease in leases:
            load[lease.owner] += lease.throughput_kbps
        workers = [WorkerLoad(w, 5 + 60 * load[w] * n / (speed[w] * sum(load.values()))) for w in ids]
        plan = plan_assignment(leases, workers, AssignmentSettings(), random.Random(seed + round_), frozenset(), left)
        for m in plan.moves:
            assert m.handoff and m.to not in left.get(m.key, ())
            left.setdefault(m.key, set()).add(m.owner)
        leases = _apply(leases, plan)
        moves_per_round.append(len(plan.moves))
    assert not any(moves_per_round[-4:]), moves_per_round

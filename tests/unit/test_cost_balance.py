"""The cost-based rebalance (fleet/cost_balance.py): decision tables
(tests/decisions/cost_balance_cases.json), invariants over random fleets (hypothesis: no
receiver ends hotter than its giver was, the hottest host never gets hotter, idle leases
never move, rounds with steady costs stop and never move a lease back), and the KCL#1814
case: low, jittery CPU gives no move in 30 rounds."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st

from kcl_mp.fleet.assignment import LeaseLoad, WorkerLoad
from kcl_mp.fleet.cost_balance import CostSettings, plan_cost_moves

CASES = json.loads((Path(__file__).parents[1] / "decisions" / "cost_balance_cases.json").read_text())


@pytest.mark.parametrize("case", CASES, ids=[c["comment"][:80] for c in CASES])
def test_decision_table(case: dict) -> None:
    workers = [WorkerLoad(w, u, cores=k) for w, u, k in case["workers"]]
    leases = [LeaseLoad(k, o, t, False, h, cost=x) for k, o, t, x, h in case["leases"]]
    plan = plan_cost_moves(leases, workers, CostSettings(**case.get("settings", {})),
                           frozenset(case.get("frozen", ())), {k: set(v) for k, v in case.get("left", {}).items()})
    expect = case["expect"]
    assert {m.key: m.to for m in plan.moves} == expect["moves"], plan.reason
    assert dict(plan.fills) == expect["fills"] and dict(plan.after) == expect["after"], plan.reason
    owners = {k: o for k, o, *_ in case["leases"]}
    assert all(m.handoff and m.owner == owners[m.key] for m in plan.moves)


fleets = st.tuples(
    st.lists(st.sampled_from([0.5, 1.0, 2.0, 4.0]), min_size=1, max_size=12),  # hosts' cores
    st.lists(st.tuples(st.integers(0, 11), st.sampled_from([0.0, 0.0, 1.0, 2.0, 5.0, 20.0, 40.0, 80.0])),
             max_size=80),  # (owner index, cost %)
    st.integers(0, 2**16),
)


def _fleet(raw) -> tuple[list[WorkerLoad], list[LeaseLoad]]:
    cores, leases, _ = raw
    workers = [WorkerLoad(f"w{i:02d}", cores=c) for i, c in enumerate(cores)]
    return workers, [LeaseLoad(f"s{j:03d}", workers[o % len(workers)].worker_id, 10.0, cost=c)
                     for j, (o, c) in enumerate(leases)]


@hyp_settings(max_examples=80, deadline=None)
@given(fleets)
def test_moves_cool_the_giver_and_settle_without_moving_back(raw) -> None:
    workers, leases = _fleet(raw)
    settings = CostSettings(max_moves=3)
    moved: dict[str, list[str]] = {}
    last = None
    for _ in range(40):
        plan = plan_cost_moves(leases, workers, settings)
        assert max(plan.after.values()) <= max(plan.fills.values()) + 1e-9, plan.reason
        cost = {x.key: x.cost for x in leases}
        for m in plan.moves:
            assert cost[m.key], f"idle lease {m.key} moved"
            assert m.to not in moved.get(m.key, []), f"{m.key} went back to {m.to}"
            moved.setdefault(m.key, []).append(m.owner or "")
        to = {m.key: m.to for m in plan.moves}
        leases = [LeaseLoad(x.key, to.get(x.key, x.owner), x.throughput_kbps, cost=x.cost) for x in leases]
        last = plan
        if not plan.moves:
            break
    assert last is not None and not last.moves, f"still moving after 40 rounds: {last.reason}"


def test_kcl_1814_low_jittery_cpu_moves_nothing_in_30_rounds() -> None:
    """Ten 2-core hosts at 2..8 % of capacity, each lease's figure jittering by +-50 % from
    round to round (sampling, GC, batching): inside the absolute band: not one move. Java's
    relative band (+-10 % of a 5 % mean: 4.5..5.5 %) sees most hosts outside it every round."""
    rng = random.Random(1814)
    workers = [WorkerLoad(f"w{i}", cores=2.0) for i in range(10)]
    base = {f"s{j:02d}": (f"w{j % 10}", rng.uniform(0.5, 3.0)) for j in range(40)}
    outside_java_band = 0
    for _ in range(30):
        leases = [LeaseLoad(k, o, 10.0, cost=c * rng.uniform(0.5, 1.5)) for k, (o, c) in base.items()]
        plan = plan_cost_moves(leases, workers, CostSettings())
        assert plan.moves == (), plan.reason
        mean = sum(plan.fills.values()) / len(plan.fills)
        outside_java_band += sum(1 for f in plan.fills.values() if abs(f - mean) > 0.1 * mean)
    assert outside_java_band > 100  # the jitter is real: Java's rule would have moved leases

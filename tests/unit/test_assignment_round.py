"""The 3.x leader's round around the assignment (kcl_mp.fleet.assignment_round): its decision table."""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path

import pytest

from kcl_mp.fleet.assignment import Move, WorkerLoad
from kcl_mp.fleet.assignment_round import Memory, RoundSettings, plan_round, watch
from kcl_mp.leases.balance import Observation
from kcl_mp.leases.lease import RELEASED_BY, RELEASED_UNTIL, Lease

TABLE = json.loads((Path(__file__).parents[1] / "decisions" / "assignment_round_cases.json").read_text())
CASES = TABLE["cases"]
SETTINGS = RoundSettings("A", failover_s=10.0, handoff_timeout_s=30.0, report_period_s=30.0, renew_interval_s=1.0)
LEASE = re.compile(r"(?P<owner>\w+|-)(?:/(?P<from>\w+))?#(?P<counter>\d+)(?P<expired>!)?(?:\^(?P<released>\w+))?")


def scan(case: dict) -> tuple[dict[str, Lease], dict[str, Observation]]:
    """The leases as the table shows them and the observations of the leader's earlier scans."""
    leases, seen = {}, {}
    for key, text in case["leases"].items():
        m = LEASE.fullmatch(text)
        assert m, text
        owner = None if m["owner"] == "-" else m["owner"]
        extra = {RELEASED_BY: {"S": m["released"]}, RELEASED_UNTIL: {"N": str(10**13)}} if m["released"] else {}
        leases[key] = Lease(key, owner, int(m["counter"]), checkpoint_owner=m["from"], extra=extra)
        changed_at = -math.inf if m["expired"] else case["now"]
        seen[key] = Observation(int(m["counter"]), owner, changed_at, changed_at, None, False)
    return leases, seen


def memory(case: dict, observations: dict[str, Observation]) -> Memory:
    m = case.get("memory", {})
    return Memory(observations, m.get("rounds", 0), frozenset(m.get("spilled", ())), m.get("handoff_seen", {}),
                  m.get("written", {}), {k: (r, frozenset(w)) for k, (r, w) in m.get("left", {}).items()},
                  m.get("gone", {}))


@pytest.mark.parametrize("case", CASES, ids=[c["comment"] for c in CASES])
def test_plan_round(case: dict) -> None:
    leases, observations = scan(case)
    watched = watch(memory(case, observations), leases, case["now"], case["due"], SETTINGS.failover_s)
    expect = case["expect"]
    assert watched.runs == expect["runs"]
    if not watched.runs:
        return
    workers = None if case["workers"] is None else [WorkerLoad(w) for w in case["workers"]]
    plan = plan_round(watched, leases, workers, case.get("reported", {}), case["now"], case["wall"], SETTINGS,
                      random.Random(case.get("seed", 1)))
    assert {m.key: m.to for m in plan.overdue} == expect.get("overdue", {})
    assert all(m.owner == leases[m.key].owner for m in plan.overdue)  # each write is conditioned on the owner seen
    if expect.get("skipped"):
        assert plan.assignment is None
        after = plan.memory
    else:
        assert plan.assignment is not None
        assert {m.key: m.to for m in plan.assignment.assigned} == expect.get("assigned", {}), plan.assignment.reason
        assert {m.key: m.to for m in plan.assignment.handoffs} == expect.get("handoffs", {}), plan.assignment.reason
        assert sorted(plan.memory.spilled) == expect.get("spilled", [])
        after = plan.remember(plan.assignment.moves, leases)  # every write succeeds
    remembered = expect.get("memory", {})
    assert dict(after.handoff_seen) == remembered.get("handoff_seen", {})
    assert dict(after.gone) == remembered.get("gone", {})
    assert {k: [r, sorted(w)] for k, (r, w) in after.left.items()} == remembered.get("left", {})
    assert dict(after.written) == remembered.get("written", {})
    assert after.rounds == case.get("memory", {}).get("rounds", 0) + case["due"]


def test_remember_keeps_only_the_writes_that_landed() -> None:
    """A move whose conditional write lost its race leaves no trace: no ``left``, no ``written``."""
    leases = {"s0": Lease("s0", "A", 5), "s1": Lease("s1", "A", 7)}
    observations = {k: Observation(x.counter, x.owner, 100.0, 0.0, None, True) for k, x in leases.items()}
    watched = watch(Memory(observations), leases, 100.0, True, SETTINGS.failover_s)
    plan = plan_round(watched, leases, [WorkerLoad("A"), WorkerLoad("B")], {"A": 100.0, "B": 100.0}, 100.0, 100.0,
                      SETTINGS, random.Random(1))
    assert plan.assignment is not None and plan.assignment.moves == (Move("s0", "A", "B", handoff=True),)
    landed = plan.remember(plan.assignment.moves, leases)
    assert dict(landed.written) == {"s0": 6} and {k: set(w) for k, (_, w) in landed.left.items()} == {"s0": {"A"}}
    lost = plan.remember([], leases)
    assert lost.written == {} and lost.left == {}

"""The 3.x leader's round around the assignment (kcl_mp.fleet.assignment_round): its decision table."""

from __future__ import annotations

import json
import math
import random
import re
from dataclasses import replace
from pathlib import Path

import pytest

from kcl_mp.fleet.assignment import Move, WorkerLoad
from kcl_mp.fleet.assignment_round import Memory, RoundSettings, plan_round, watch
from kcl_mp.leases.balance import Observation
from kcl_mp.leases.lease import CPU_PERCENT, RELEASED_BY, RELEASED_UNTIL, THROUGHPUT_KBPS, Lease

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
                  m.get("gone", {}), led_since=m.get("led_since", -math.inf))


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


def _round(leases: dict[str, Lease], workers: list[WorkerLoad], settings: RoundSettings, written=None):
    observations = {k: Observation(x.counter, x.owner, -math.inf if x.owner is None else 100.0, 0.0, None, True)
                    for k, x in leases.items()}
    watched = watch(Memory(observations, written=written or {}), leases, 100.0, True, settings.failover_s)
    plan = plan_round(watched, leases, workers, {w.worker_id: 100.0 for w in workers}, 100.0, 100.0, settings,
                      random.Random(1))
    assert plan.assignment is not None
    return plan.assignment


def _lease(key: str, owner: str | None, kbps: float, cpu: float | None = None) -> Lease:
    extra = {THROUGHPUT_KBPS: {"N": repr(kbps)}, **({CPU_PERCENT: {"N": repr(cpu)}} if cpu is not None else {})}
    return Lease(key, owner, 5, extra=extra)


def test_cost_based_assigns_as_before_then_hands_over_by_measured_cost() -> None:
    """Equal bytes, 20x the CPU on h0 and h1, both on A: COST_BASED assigns the unowned s9 as the
    other strategies do and hands one heavy lease to B (the throughput rule sees equal leases
    and 4/3 counts: nothing to do). The lease still settling on A after an earlier move stays."""
    leases = {"h0": _lease("h0", "A", 100.0, 40.0), "h1": _lease("h1", "A", 100.0, 40.0),
              "l0": _lease("l0", "A", 100.0, 2.0), "l1": _lease("l1", "B", 100.0, 2.0),
              "l2": _lease("l2", "B", 100.0, 2.0), "l3": _lease("l3", "B", 100.0, 2.0),
              "s9": _lease("s9", None, 100.0)}
    workers = [WorkerLoad("A", cores=1.0), WorkerLoad("B", cores=1.0)]
    by_throughput = _round(leases, workers, SETTINGS)
    assert {m.key: m.to for m in by_throughput.assigned} == {"s9": "A"} and by_throughput.handoffs == ()
    cost_based = replace(SETTINGS, strategy="COST_BASED")
    plan = _round(leases, workers, cost_based)
    assert {m.key: m.to for m in plan.assigned} == {"s9": "A"}, plan.reason
    assert [(m.key, m.owner, m.to) for m in plan.handoffs] == [("h0", "A", "B")], plan.reason
    # s9, not measured yet, costs its bytes at the fleet's measured CPU per KB/s: 100 x 0.86 / 600 cores
    assert dict(plan.counts) == {"A": 3, "B": 4} and "hosts 6.0..96.7 %" in plan.reason
    plan = _round(leases, workers, cost_based, written={"h0": 5})  # h0 settling: h1 goes instead
    assert [(m.key, m.to) for m in plan.handoffs] == [("h1", "B")], plan.reason


def test_lease_count_based_ignores_throughput_and_cpu() -> None:
    """Java 3.4.3's LEASE_COUNT_BASED: A's four light leases against B's one heavy one, A at 90 %
    CPU: counts alone decide: one handoff, 3/2 (the throughput rule moves none: B carries more)."""
    leases = {**{f"a{i}": _lease(f"a{i}", "A", 1.0) for i in range(4)}, "b0": _lease("b0", "B", 400.0)}
    workers = [WorkerLoad("A", 90.0), WorkerLoad("B", 10.0)]
    assert _round(leases, workers, SETTINGS).handoffs == ()
    plan = _round(leases, workers, replace(SETTINGS, strategy="LEASE_COUNT_BASED"))
    assert len(plan.handoffs) == 1 and plan.handoffs[0].owner == "A" and dict(plan.counts) == {"A": 3, "B": 2}


@pytest.mark.parametrize("strategy, every, rebalancing", [
    ("LEASE_COUNT_BASED", 3, [True, False, False, True, False]),  # Java's default varianceBalancingFrequency
    ("LEASE_COUNT_BASED", 1, [True, True, True, True, True]),
    ("WORKER_UTILIZATION_AWARE", 2, [True, False, True, False, True]),
    ("COST_BASED", 3, [True, True, True, True, True]),  # its band and move budget bound its churn instead
])
def test_a_leader_rebalances_on_its_first_round_then_every_nth(strategy, every, rebalancing) -> None:
    """Java's LeaseAssignmentManager rebalances when its lamRunCounter is 0 (a new leader's first
    run), then every varianceBalancingFrequency-th run; assigning expired leases runs every round.
    A's five leases against B's none (B just joined), the imbalance left in place round after round
    (as if every handoff failed); a scan between rounds (not due) counts for nothing."""
    settings = replace(SETTINGS, strategy=strategy, balance_every=every)
    leases = {f"a{i}": _lease(f"a{i}", "A", 10.0, 20.0) for i in range(5)}
    workers = [WorkerLoad("A", 50.0, cores=1.0), WorkerLoad("B", 0.0, cores=1.0)]
    observations = {k: Observation(x.counter, x.owner, 100.0, 0.0, None, True) for k, x in leases.items()}
    state = Memory(observations)
    seen = []
    for n in range(len(rebalancing)):
        between = watch(state, leases, 100.0 + n, False, settings.failover_s)  # a scan, no round due
        state = between.memory
        watched = watch(state, leases, 100.0 + n, True, settings.failover_s)
        plan = plan_round(watched, leases, workers, {"A": 100.0, "B": 100.0}, 100.0 + n, 100.0 + n, settings,
                          random.Random(n))
        assert plan.assignment is not None
        seen.append(bool(plan.assignment.handoffs))
        state = replace(plan.memory, left={})  # every handoff failed: nothing is barred
    assert seen == rebalancing


@pytest.mark.parametrize("strategy", ["LEASE_COUNT_BASED", "WORKER_UTILIZATION_AWARE", "COST_BASED"])
def test_a_new_leader_defers_its_first_rebalance_until_it_has_watched_the_leases_for_failover(strategy) -> None:
    """Rounds 4 s apart from the moment it took the lock (failover 10 s): the first two only
    assign; the first at or after failover is the new leader's first rebalance, whatever the strategy."""
    settings = replace(SETTINGS, strategy=strategy, balance_every=3)
    leases = {f"a{i}": _lease(f"a{i}", "A", 10.0, 20.0) for i in range(5)}
    workers = [WorkerLoad("A", 50.0, cores=1.0), WorkerLoad("B", 0.0, cores=1.0)]
    state = Memory(led_since=100.0)
    seen = []
    for n, at in enumerate((100.0, 104.0, 108.0, 112.0)):
        leases = {k: replace(x, counter=n) for k, x in leases.items()}  # A renews them all the while
        watched = watch(state, leases, at, True, settings.failover_s)
        plan = plan_round(watched, leases, workers, {"A": at, "B": at}, at, at, settings, random.Random(1))
        assert plan.assignment is not None
        seen.append(bool(plan.assignment.handoffs))
        state = replace(plan.memory, left={})
    assert seen == [False, False, False, True]

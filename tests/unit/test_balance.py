"""Lease balancing: decision tables (balance_cases.json) and invariants over simulated fleets."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from kcl_mp import balance
from kcl_mp.config import LeaseSettings
from kcl_mp.lease import ExtendedSequenceNumber, Lease

CASES = json.loads((Path(__file__).parent / "balance_cases.json").read_text())


def _lease(raw: dict) -> Lease:
    checkpoint = ExtendedSequenceNumber(raw.get("checkpoint", "TRIM_HORIZON"), 0)
    return Lease(raw["key"], raw.get("owner"), raw.get("counter", 0), checkpoint)


@pytest.mark.parametrize("case", CASES, ids=[c["comment"][:60] for c in CASES])
def test_decision_table(case: dict) -> None:
    settings = LeaseSettings(
        table_name="t",
        max_leases_for_worker=case.get("max_leases_for_worker", 2147483647),
        max_leases_to_steal_at_one_time=case.get("max_leases_to_steal_at_one_time", 1),
    )
    leases = {raw["key"]: _lease(raw) for raw in case["leases"]}
    observations = {o["key"]: balance.Observation(o["counter"], o["owner"], o["changed_at"])
                    for o in case["observations"]}
    plan = balance.plan_leases(case["worker"], leases, observations, case["now"], settings,
                               random.Random(case["seed"]))
    expect = case["expect"]
    assert plan.target == expect["target"], plan.reason
    assert list(plan.live_workers) == expect["live_workers"]
    if "take" in expect:
        assert sorted(plan.take) == sorted(expect["take"]), plan.reason
    if "take_count" in expect:
        assert len(plan.take) == expect["take_count"]
    if "steal" in expect:
        assert list(plan.steal) == expect["steal"], plan.reason
    if "steal_count" in expect:
        assert len(plan.steal) == expect["steal_count"], plan.reason
        assert all(leases[k].owner == expect["steal_from"] for k in plan.steal)
    assert not set(plan.take) & set(plan.steal)


def test_observe_times_counter_changes() -> None:
    a = Lease("s0", "B", 1)
    first = balance.observe({}, [a, Lease("s1")], now=10.0)
    assert first["s0"].changed_at == 10.0
    assert first["s1"].changed_at == -math.inf  # unowned: expired at once
    same = balance.observe(first, [a], now=20.0)
    assert same["s0"].changed_at == 10.0 and "s1" not in same
    moved = balance.observe(same, [a.with_(counter=2)], now=30.0)
    assert moved["s0"].changed_at == 30.0
    switched = balance.observe(moved, [a.with_(counter=2, owner="C")], now=40.0)
    assert switched["s0"].changed_at == 40.0


class Fleet:
    """An in-memory lease table and workers that renew, observe and take like the supervisor."""

    def __init__(self, shards: int, workers: list[str], rng: random.Random, max_steal: int = 1):
        self.table = {f"shardId-{i:012d}": Lease(f"shardId-{i:012d}") for i in range(shards)}
        self.workers = list(workers)
        self.observations: dict[str, dict] = {w: {} for w in workers}
        self.rng = rng
        self.settings = LeaseSettings(table_name="t", max_leases_to_steal_at_one_time=max_steal)
        self.steals_per_round: list[int] = []

    def renew(self, worker: str) -> None:
        for key, lease in self.table.items():
            if lease.owner == worker:
                self.table[key] = lease.with_(counter=lease.counter + 1)

    def take_round(self, worker: str, now: float) -> int:
        snapshot = dict(self.table)
        self.observations[worker] = balance.observe(self.observations[worker], snapshot.values(), now)
        plan = balance.plan_leases(worker, snapshot, self.observations[worker], now, self.settings, self.rng)
        assert len(plan.steal) <= self.settings.max_leases_to_steal_at_one_time
        for key in plan.take + plan.steal:
            current = self.table[key]
            if current.counter == snapshot[key].counter:  # the conditional write
                self.table[key] = current.with_(owner=worker, counter=current.counter + 1)
        return len(plan.steal)

    def spread(self) -> tuple[int, int]:
        counts = [sum(1 for lease in self.table.values() if lease.owner == w) for w in self.workers]
        return max(counts), min(counts)


@pytest.mark.parametrize("seed", range(40), ids=lambda s: f"seed={s}")
def test_fleet_converges(seed: int) -> None:
    """Random fleets: every lease owned and max - min <= 1 lease per worker within bounded rounds."""
    rng = random.Random(seed)
    shards = rng.randint(1, 24)
    workers = [f"w{i}" for i in range(rng.randint(1, 6))]
    fleet = Fleet(shards, workers, rng, max_steal=rng.choice([1, 1, 2, 5]))
    now = 0.0
    for _ in range(shards * 3 + 10):
        now += 20.05
        order = fleet.workers[:]
        rng.shuffle(order)
        for w in order:
            fleet.renew(w)
        steals = sum(fleet.take_round(w, now) for w in order)
        fleet.steals_per_round.append(steals)
    assert all(lease.owner in workers for lease in fleet.table.values())
    high, low = fleet.spread()
    assert high - low <= 1, f"seed={seed}: spread {high} - {low}"
    assert fleet.steals_per_round[-1] == 0, f"seed={seed}: still stealing at the end"


@pytest.mark.parametrize("seed", range(10), ids=lambda s: f"seed={s}")
def test_dead_worker_leases_move_after_failover(seed: int) -> None:
    rng = random.Random(seed)
    fleet = Fleet(8, ["a", "b"], rng)
    now = 0.0
    for _ in range(30):
        now += 20.05
        for w in ("a", "b"):
            fleet.renew(w)
            fleet.take_round(w, now)
    assert fleet.spread() == (4, 4)
    for _ in range(2):  # b dies: a only; after one failover period its leases are expired
        now += 20.05
        fleet.renew("a")
        fleet.take_round("a", now)
    assert all(lease.owner == "a" for lease in fleet.table.values())

"""A fleet whose shards cost different CPU, round by round: kcl-mp's COST_BASED leader beside
Java's variance rule and lease counting (issue 33). Pure, seeded; no clock, no I/O.

Each round is one assignment round that rebalances (Java: one variance-balancing pass).
The hosts' true CPU is the sum of their leases' true costs over their capacity. What the
leaders see: kcl-mp's COST_BASED each lease's cost as its host measured it (the true cost
times a jitter, smoothed with alpha 0.5 as ``leases/cost.py`` does; a lease moved last
round starts afresh); Java each host's CPU (true, plus the same jitter on each lease, plus
``host_noise`` points) and each lease's throughput; counting only the counts. A handoff
lands before the next round (graceful handoffs take about one renewal interval).

Scenarios (``SCENARIOS``): ``cost_1x_20x`` equal bytes per shard, one shard in ten costing
20x the CPU per record (hosts at 29 % of their cores on average); ``cost_1x_20x_busy`` the
same on hosts of half the cores (58 %: a host dealt three heavy shards more than the mean is
over its capacity); ``bytes_unequal`` bytes from 10 to 1000 KB/s per shard at one CPU cost per
byte (Java's assumption holds); ``low_jitter`` the KCL#1814 case: shards of 0.5..3 % of a
core, +-50 % jitter per round, hosts at a few percent.

Lag, millisBehindLatest's analogue: each round lasts ``round_s`` (an assignment interval); a
host over its capacity serves each of its shards at capacity/load of its arrival rate, so each
falls behind by ``round_s`` x (1 - capacity/load); a host under it catches up at the spare
rate. A moved lease takes its lag along. ``lag_p99_s`` is the 99th percentile over every
shard after every round.

    >>> r = run(SCENARIOS["low_jitter"], "COST_BASED", hosts=10, rounds=30, seed=1)
    >>> r.moves
    0
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from kcl_mp.devtools import java_rule
from kcl_mp.devtools.bench_figures import max_over_mean, percentile
from kcl_mp.fleet.assignment import LeaseLoad, WorkerLoad
from kcl_mp.fleet.cost_balance import CostSettings, plan_cost_moves

RULES = ("COST_BASED", "JAVA_VARIANCE", "LEASE_COUNT_BASED")


@dataclass(frozen=True)
class Shard:
    kbps: float
    cost: float  # true CPU, % of one core


@dataclass(frozen=True)
class Scenario:
    shards_per_host: int
    cores: float
    shard: Callable[[random.Random, int], Shard]  # (rng, index) -> the shard
    jitter: float  # each measurement is the true cost times uniform(1 - jitter, 1 + jitter)
    host_noise: float = 1.0  # points added to a host's reported CPU, uniform(-n, n)


SCENARIOS = {
    "cost_1x_20x": Scenario(8, 4.0, lambda rng, i: Shard(100.0, 100.0 if i % 10 == 0 else 5.0), 0.1),
    "cost_1x_20x_busy": Scenario(8, 2.0, lambda rng, i: Shard(100.0, 100.0 if i % 10 == 0 else 5.0), 0.1),
    "bytes_unequal": Scenario(8, 4.0, lambda rng, i: (lambda kb: Shard(kb, kb * 0.06))(rng.uniform(10.0, 1000.0)),
                              0.1),
    "low_jitter": Scenario(4, 2.0, lambda rng, i: Shard(50.0, rng.uniform(0.5, 3.0)), 0.5),
}


@dataclass(frozen=True)
class SimResult:
    rule: str
    max_over_mean: float  # of the hosts' true CPU after the last round
    moves: int
    rounds: int
    first_max_over_mean: float  # before the first round
    lag_p99_s: float  # of every shard's lag after every round
    lag_max_s: float

    @property
    def moves_per_round(self) -> float:
        return self.moves / self.rounds


def run(scenario: Scenario, rule: str, hosts: int = 100, rounds: int = 30, seed: int = 0,
        settings: CostSettings | None = None, round_s: float = 20.0) -> SimResult:
    """``rounds`` rounds of ``rule`` over ``hosts`` hosts holding ``shards_per_host`` shards each,
    dealt at random (a count-balanced fleet as any rule leaves it at start)."""
    if rule not in RULES:
        raise ValueError(f"rule {rule!r}: expected one of {', '.join(RULES)}")
    rng = random.Random(seed)
    ids = [f"h{i:03d}" for i in range(hosts)]
    shards = {f"s{i:05d}": scenario.shard(rng, i) for i in range(hosts * scenario.shards_per_host)}
    keys = list(shards)
    rng.shuffle(keys)
    owner = {key: ids[n % hosts] for n, key in enumerate(keys)}
    smoothed: dict[str, float] = {}
    moved: set[str] = set()
    left: dict[str, set[str]] = {}
    total_moves = 0
    first = _max_over_mean(owner, shards, ids, scenario.cores)
    lag = {key: 0.0 for key in shards}
    lags: list[float] = []
    for _ in range(rounds):
        measured = {k: s.cost * rng.uniform(1 - scenario.jitter, 1 + scenario.jitter) for k, s in shards.items()}
        for key, value in measured.items():
            smoothed[key] = value if key in moved or key not in smoothed else 0.5 * value + 0.5 * smoothed[key]
        if rule == "COST_BASED":
            plan = plan_cost_moves([LeaseLoad(k, owner[k], shards[k].kbps, cost=smoothed[k]) for k in shards],
                                   [WorkerLoad(h, cores=scenario.cores) for h in ids], settings or CostSettings(),
                                   frozenset(), left)
            moves = [(m.key, m.owner or "", m.to) for m in plan.moves]
        elif rule == "JAVA_VARIANCE":
            load = {h: 0.0 for h in ids}
            for key, value in measured.items():
                load[owner[key]] += value
            cpu = {h: max(0.0, v / scenario.cores + rng.uniform(-scenario.host_noise, scenario.host_noise))
                   for h, v in load.items()}
            moves = java_rule.plan_variance_java(cpu, {k: (owner[k], s.kbps) for k, s in shards.items()}, rng)
        else:
            moves = _count_moves(owner, ids)
        moved = {key for key, _, _ in moves}
        for key, frm, to in moves:
            owner[key] = to
            left.setdefault(key, set()).add(frm)
        total_moves += len(moves)
        _fall_behind(lag, owner, shards, scenario.cores, round_s)
        lags.extend(lag.values())
    return SimResult(rule, _max_over_mean(owner, shards, ids, scenario.cores), total_moves, rounds, first,
                     round(percentile(lags, 99) or 0.0, 2), round(max(lags, default=0.0), 2))


def _fall_behind(lag: dict[str, float], owner: dict[str, str], shards: dict[str, Shard], cores: float,
                 round_s: float) -> None:
    """One round of processing: each shard's lag (seconds) grows on a host over its capacity
    and shrinks on one under it, never below zero.

    >>> lag = {"a": 0.0, "b": 0.0, "c": 15.0}
    >>> shards = {"a": Shard(1.0, 100.0), "b": Shard(1.0, 100.0), "c": Shard(1.0, 50.0)}
    >>> _fall_behind(lag, {"a": "h1", "b": "h1", "c": "h2"}, shards, 1.0, 20.0)
    >>> lag  # h1 at twice its core: half the rate, 10 s behind after a 20 s round; h2 at half its core
    {'a': 10.0, 'b': 10.0, 'c': 0.0}
    """
    load: dict[str, float] = {}
    for key, host in owner.items():
        load[host] = load.get(host, 0.0) + shards[key].cost
    for key, host in owner.items():
        served = cores * 100.0 / load[host] if load[host] > 0 else float("inf")  # capacity / load
        lag[key] = max(0.0, lag[key] + round_s * (1.0 - served)) if served < 1.0 \
            else max(0.0, lag[key] - round_s * min(served - 1.0, 1e9))


def _count_moves(owner: dict[str, str], ids: list[str]) -> list[tuple[str, str, str]]:
    """LEASE_COUNT_BASED: from the most to the least counted host while they differ by 2 or more."""
    held: dict[str, list[str]] = {h: [] for h in ids}
    for key, host in sorted(owner.items()):
        held[host].append(key)
    moves: list[tuple[str, str, str]] = []
    while True:
        most = max(ids, key=lambda h: (len(held[h]), h))
        least = min(ids, key=lambda h: (len(held[h]), h))
        if len(held[most]) - len(held[least]) < 2:
            return moves
        key = held[most].pop()
        held[least].append(key)
        moves.append((key, most, least))


def _max_over_mean(owner: dict[str, str], shards: dict[str, Shard], ids: list[str], cores: float) -> float:
    load = {h: 0.0 for h in ids}
    for key, host in owner.items():
        load[host] += shards[key].cost
    return max_over_mean(list(load.values())) or 1.0

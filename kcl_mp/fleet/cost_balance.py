"""The 3.x leader's cost-based rebalance (kclmp.leaseAssignmentStrategy=COST_BASED). Pure.

Java's leader balances a worker's CPU by moving leases chosen by bytes per second, as if a
shard's CPU were proportional to its bytes (VarianceBasedLeaseAssignmentDecider). A kcl-mp
host measures what each lease really costs (``leases/cost.py``: its processor's process
tree plus its share of the pool process) and writes it on the lease; this rule moves
leases by that cost. Decision table: tests/decisions/cost_balance_cases.json.

1. *Capacity*: a kcl-mp host's ``cores`` (kclmpCores: its CPUs, cgroup quota aware); a
   Java worker, which reports none, the mean of the known ones (1 when none is known).
2. *Lease cost* (cores): its ``kclmpCpuPercent`` / 100 when its owner is a kcl-mp host
   (a Java owner's lease may carry a stale figure kcl-mp wrote before). Otherwise Java's
   estimate, proportional to throughput: on a Java worker reporting CPU, its share of that
   worker's CPU by its ``throughputKBps``; elsewhere its throughput times the fleet's
   measured CPU per KB/s (from the leases with both figures, else from the Java workers'
   CPU and throughput); no figure at all: 0.
3. *Load*: a kcl-mp host's is the sum of its leases' costs (its host-wide CPU would count
   other tenants, and on one machine every host reads the same); a Java worker's its
   reported CPU times its capacity, or the sum of its leases' estimates when it reports none.
   A host's *fill* is load / capacity in percent; the fleet's mean is total load / total
   capacity.
4. *Move*, at most ``max_moves`` a round: take the most filled host more than ``band``
   percentage points above the mean (an absolute band: at low CPU jitter stays inside it,
   where Java's +-10 % of the mean does not: KCL#1814); of its leases that may move (not
   idle: a cost of 0 never moves; not frozen: being handed over, assigned or settling) and
   the hosts that may take one (not in ``left[key]``, ``room``), the pair that lowers the
   pair's higher fill the most, provided the receiver ends cooler than the giver was and
   the gain is at least ``min_gain`` points. A host with no such move is passed over for
   the next one above the band, as is a host that received a lease this round (its load
   is an estimate until its next figures: it gives nothing before they come). Past the
   budget, a host over its capacity (fill above 100 %: its shards fall behind every second)
   still gives leases by the same conditions until it is not; the budget bounds churn for
   balance, never an overload.

Why it never undoes a move: a move from a (fill f_a) to b leaves b below f_a; moving the
same lease back would need a's fill after the move plus the lease's share (f_a again) to
be below b's: never, while the costs hold. Each move lowers the higher of two fills, and
the budget bounds a round (past it, each move takes a lease off an overloaded host that
received none this round: at most the fleet's leases).

Worked example: A (2 cores) holds h0 at 90 % of a core and l0, l1 at 5 %; B (2 cores)
holds l2, l3 at 5 %; band 10, min gain 2. Fills: A 50 %, B 5 %, mean 27.5 %. A is 22.5
points above: moving h0 gives A 5 %, B 50 %: B would be as hot as A was: no. l0 gives
A 47.5 %, B 7.5 %: gain 2.5 points: move l0. A 47.5 %: l1 likewise (gain 2.5): A 45 %,
B 10 %. Two moves; in the next round only h0 is left on A and it still fails (B would
end at 55 %): h0 alone is more than the gap, and the hosts stay at 45 % and 10 %.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass

from kcl_mp.fleet.assignment import LeaseLoad, Move, WorkerLoad

OVERLOADED = 100.0  # a host's fill past which it falls behind: relieved past the move budget


@dataclass(frozen=True)
class CostSettings:
    band_percent: float = 10.0  # kclmp.costBandPercent: points of capacity above the mean tolerated
    min_gain_percent: float = 2.0  # kclmp.costMinGainPercent: least drop of the pair's higher fill
    max_moves: int = 2  # kclmp.costMovesPerRound


@dataclass(frozen=True)
class CostPlan:
    moves: tuple[Move, ...]
    fills: Mapping[str, float]  # host -> % of its capacity, before the moves
    after: Mapping[str, float]  # host -> % of its capacity, after them
    reason: str


def capacities(workers: Sequence[WorkerLoad]) -> dict[str, float]:
    """Each host's cores (step 1).

    >>> capacities([WorkerLoad("a", cores=4.0), WorkerLoad("b", cores=2.0), WorkerLoad("java")])
    {'a': 4.0, 'b': 2.0, 'java': 3.0}
    """
    known = [w.cores for w in workers if w.cores]
    default = sum(known) / len(known) if known else 1.0
    return {w.worker_id: w.cores if w.cores else default for w in workers}


def lease_costs(leases: Sequence[LeaseLoad], workers: Sequence[WorkerLoad],
                capacity: Mapping[str, float]) -> dict[str, float]:
    """Each owned lease's cost in cores (step 2).

    >>> ws = [WorkerLoad("k", cores=2.0), WorkerLoad("j", utilisation=50.0)]
    >>> ls = [LeaseLoad("a", "k", 10.0, cost=40.0), LeaseLoad("b", "k", 30.0),
    ...       LeaseLoad("c", "j", 1.0), LeaseLoad("d", "j", 3.0), LeaseLoad("e", "k")]
    >>> lease_costs(ls, ws, capacities(ws))
    {'a': 0.4, 'b': 1.2, 'c': 0.25, 'd': 0.75, 'e': 0.0}
    """
    by_id = {w.worker_id: w for w in workers}
    kcl_mp = {w.worker_id for w in workers if w.cores}
    owned = [x for x in leases if x.owner in by_id]
    measured = {x.key: x.cost / 100.0 for x in owned if x.owner in kcl_mp and x.cost is not None}
    kbps = {x.key: x.throughput_kbps or 0.0 for x in owned}
    java_load = {w.worker_id: w.utilisation / 100.0 * capacity[w.worker_id] for w in workers
                 if w.worker_id not in kcl_mp and w.utilisation is not None}
    java_kbps: dict[str, float] = {}
    for x in owned:
        if x.owner in java_load:
            java_kbps[x.owner] = java_kbps.get(x.owner, 0.0) + kbps[x.key]
    sampled = [k for k in measured if kbps[k] > 0]
    if sampled:
        rate = sum(measured[k] for k in sampled) / sum(kbps[k] for k in sampled)
    else:
        total = sum(java_kbps.values())
        rate = sum(java_load[w] for w in java_kbps) / total if total > 0 else 0.0
    out = {}
    for x in owned:
        if x.key in measured:
            out[x.key] = measured[x.key]
        elif x.owner in java_load and java_kbps.get(x.owner, 0.0) > 0:
            out[x.key] = java_load[x.owner] * kbps[x.key] / java_kbps[x.owner]
        else:
            out[x.key] = kbps[x.key] * rate
    return {k: round(v, 9) for k, v in out.items()}


def plan_cost_moves(leases: Sequence[LeaseLoad], workers: Sequence[WorkerLoad], settings: CostSettings,
                    frozen: Set[str] = frozenset(), left: Mapping[str, Set[str]] | None = None,
                    room: Callable[[str, str, Mapping[str, int]], bool] = lambda host, key, held: True) -> CostPlan:
    """One round's cost-based handoffs (the module docstring has the rule). ``leases``: as owned
    after this round's assignments; ``room(host, key, held)``: whether ``host`` may take
    ``key`` holding ``held[host]`` leases (maxLeasesForWorker, maxThroughputPerHostKBps)."""
    left = left or {}
    if not workers:
        return CostPlan((), {}, {}, "cost: no workers")
    capacity = capacities(workers)
    cost = lease_costs(leases, workers, capacity)
    by_id = {w.worker_id: w for w in workers}
    held: dict[str, list[LeaseLoad]] = {w: [] for w in capacity}
    for x in leases:
        if x.owner in held:
            held[x.owner].append(x)
    load = {}
    for w, mine in held.items():
        worker = by_id[w]
        if not worker.cores and worker.utilisation is not None:
            load[w] = worker.utilisation / 100.0 * capacity[w]
        else:
            load[w] = sum(cost[x.key] for x in mine)
    mean = 100.0 * sum(load.values()) / sum(capacity.values())

    def fill(w: str, extra: float = 0.0) -> float:
        return 100.0 * (load[w] + extra) / capacity[w]

    before = {w: round(fill(w), 3) for w in sorted(capacity)}
    counts = {w: len(mine) for w, mine in held.items()}
    moves: list[Move] = []
    while True:
        move = None
        received = {m.to for m in moves}
        floor = mean + settings.band_percent if len(moves) < settings.max_moves else max(OVERLOADED, mean)
        for donor in sorted((w for w in capacity if fill(w) > floor and w not in received),
                            key=lambda w: (-fill(w), w)):
            move = _best_move(donor, held[donor], capacity, cost, fill, settings, frozen, left,
                              lambda host, key: room(host, key, counts))
            if move is not None:
                break
        if move is None:
            break
        lease, to = move
        c = cost[lease.key]
        load[lease.owner or ""] -= c
        load[to] += c
        held[lease.owner or ""].remove(lease)
        counts[lease.owner or ""] -= 1
        counts[to] += 1
        held[to].append(LeaseLoad(lease.key, to, lease.throughput_kbps, cost=lease.cost))
        moves.append(Move(lease.key, lease.owner, to, handoff=True))
    after = {w: round(fill(w), 3) for w in sorted(capacity)}
    reason = (f"cost: fleet at {mean:.1f} % of capacity, hosts {min(before.values()):.1f}..{max(before.values()):.1f} %"
              f" (band {settings.band_percent:g} points); handed over {len(moves)}"
              + (f", now {min(after.values()):.1f}..{max(after.values()):.1f} %" if moves else ""))
    return CostPlan(tuple(moves), before, after, reason)


def _best_move(donor: str, mine: Sequence[LeaseLoad], capacity: Mapping[str, float], cost: Mapping[str, float],
               fill: Callable[..., float], settings: CostSettings, frozen: Set[str],
               left: Mapping[str, Set[str]], room: Callable[[str, str], bool]) -> tuple[LeaseLoad, str] | None:
    """The donor's move with the largest gain meeting the conditions (step 4), or None."""
    given = fill(donor)
    best: tuple[tuple[float, float, str, str], LeaseLoad, str] | None = None
    for lease in mine:
        c = cost[lease.key]
        if c <= 0 or lease.key in frozen or lease.handing_over:
            continue
        for to in capacity:
            if to == donor or to in left.get(lease.key, ()) or not room(to, lease.key):
                continue
            received = fill(to, c)
            if received >= given:
                continue
            gain = given - max(fill(donor, -c), received)
            if gain < settings.min_gain_percent:
                continue
            rank = (-gain, fill(to), lease.key, to)
            if best is None or rank < best[0]:
                best = (rank, lease, to)
    return None if best is None else (best[1], best[2])

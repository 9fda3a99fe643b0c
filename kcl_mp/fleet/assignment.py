"""The 3.x leader's lease assignment for the whole fleet, Java workers included. Pure.

Each round (every leaseAssignmentIntervalMillis) the leader turns one view of the fleet
into a plan of conditional writes, as the Java KCL's LeaseAssignmentManager does
(docs/kcl3-facts.md section 6), with kcl-mp's balance rule:

1. Workers are those with a live worker-metrics item whose latest values are not failing.
   A lease's *load* is its ``throughputKBps`` rounded to the average times a power of two
   (figures within a factor of 1.4 of each other are noise: batching, sampling), or the
   average known one when it has none or is ``unmeasured`` (moved lately: its new owner's
   first figures are a catch-up burst), plus 1% of that average (at least 0.01), so leases
   of no measured traffic still count and equal loads reduce to counting leases.
2. *Capacity*: every worker 1 unless every worker reports a utilisation (CPU). Then a
   worker's capacity follows the load it carries per utilisation point (load /
   utilisation, Java's linear extrapolation), moved towards 1 by dampeningPercentage:
   ``1 + dampening * (speed / mean speed - 1)`` (a worker with no load counts as the
   slowest, so single leases do not wander between idle workers), and the round rebalances
   (step 4) only when a utilisation is outside the average +- reBalanceThresholdPercentage or above its
   operating range: utilisations inside that band are balanced, whatever the counts. A
   worker is *filled* to load / capacity.
3. *Assign*: unowned leases, expired ones (counter still for failoverTimeMillis by the
   leader's clock) and leases whose owner is not a worker, heaviest first, each to the least
   filled worker under maxLeasesForWorker and maxThroughputPerHostKBps (fewest leases, then
   id, on ties). A worker that let a lease expire while reporting metrics receives nothing
   this round unless nobody else can take the lease. What no worker can take is *spilled
   over*, as Java does.
4. *Rebalance* by graceful handoff (``checkpointOwner``): from the most filled worker to the
   least filled, the heaviest lease whose move leaves the receiver strictly below the
   donor's fill before the move, by a margin of reBalanceThresholdPercentage of that lease
   (``(load_b + w) / c_b + margin < load_a / c_a``). Leases being handed over, those
   assigned this round and those in ``settling`` (moved, not yet renewed by their new
   owner: ``settling()``) stay put, and no lease goes back to a worker in ``left[key]``
   (the workers the leader handed it away from), whatever the metrics say next: capacities
   measured from CPU change between rounds, and ``left`` keeps that from undoing a move.
5. *Released*: a lease a worker gave up after kclmp.processorMaxRestarts failures (``released``:
   lease -> the workers that gave it up, until the time they asked for) goes to none of them,
   not even when nobody else can take it: then it is spilled over and waits. The worker's
   promise to leave it alone holds whoever leads, itself included.

Why it settles and never undoes a move: with fixed capacities the reverse move would need
``load_a / c_a < (load_b + w) / c_b``, the negation of the move's own condition; every move
lowers the sum of squared fills, so a round ends. With equal loads and capacities the rule
reads ``count_b + 1 < count_a - 0.1``: moves stop exactly at ``max - min <= 1``. Every
move of a lease a live worker holds is a handoff; plain assignments only go to leases nobody
processes.

Worked example: 7 leases of equal load, A holds 5, B 2, C 0 (no metrics: capacity 1).
Nothing to assign. Rebalance: A (5) to C (0): 0 + 1 < 5 - 0.1, hand one over; A 4, C 1.
A (4) to C (1): yes; A 3, C 2. Then A 3, B 2, C 2: 2 + 1 < 3 - 0.1 fails: stop. Two
handoffs, 3/2/2.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass

from kcl_mp.leases import balance, cost
from kcl_mp.leases.lease import THROUGHPUT_KBPS, Lease

INFINITY = float("inf")


@dataclass(frozen=True)
class LeaseLoad:
    """One open lease as the leader sees it this round."""

    key: str
    owner: str | None
    throughput_kbps: float | None = None  # as the owner last renewed it (None: never measured)
    expired: bool = False  # no owner, or its counter has not moved for failoverTimeMillis
    handing_over: bool = False  # checkpointOwner set: a handoff is under way
    cost: float | None = None  # kclmpCpuPercent as its owner last renewed it (None: not measured)


@dataclass(frozen=True)
class WorkerLoad:
    """One worker's metrics item: ``utilisation`` is the smoothed CPU % (None: the worker
    reports no CPU metric, Java's "default worker metric"), ``max_utilisation`` its
    operating range, ``cores`` what a kcl-mp host says it may use (the cost-based rule)."""

    worker_id: str
    utilisation: float | None = None
    max_utilisation: float = 100.0
    cores: float | None = None  # a kcl-mp host's capacity (kclmpCores); None: a Java worker


@dataclass(frozen=True)
class AssignmentSettings:
    dampening_percentage: int = 60  # dampeningPercentage
    rebalance_threshold_percentage: int = 10  # reBalanceThresholdPercentage
    max_throughput_per_host_kbps: float = INFINITY  # maxThroughputPerHostKBps
    max_leases_for_worker: int = 2147483647  # maxLeasesForWorker


@dataclass(frozen=True)
class Move:
    key: str
    owner: str | None  # the owner the write is conditioned on
    to: str
    handoff: bool  # True: graceful (checkpointOwner = owner); False: assign (counter + 1)


@dataclass(frozen=True)
class AssignmentPlan:
    moves: tuple[Move, ...]
    spillover: tuple[str, ...]  # leases no worker could take under the caps
    counts: Mapping[str, int]  # worker -> leases after the plan
    reason: str

    @property
    def assigned(self) -> tuple[Move, ...]:
        return tuple(m for m in self.moves if not m.handoff)

    @property
    def handoffs(self) -> tuple[Move, ...]:
        return tuple(m for m in self.moves if m.handoff)


def lease_loads(leases: Iterable[Lease], observations: Mapping[str, balance.Observation], now: float,
                failover_s: float) -> list[LeaseLoad]:
    """The leader's view of the open leases from its scans (``balance.observe``)."""
    out = []
    for lease in leases:
        if lease.is_shard_end:
            continue
        raw = lease.extra.get(THROUGHPUT_KBPS)
        throughput = float(raw["N"]) if isinstance(raw, Mapping) and "N" in raw else None
        out.append(LeaseLoad(lease.key, lease.owner, throughput,
                             balance.is_expired(lease, observations.get(lease.key), now, failover_s),
                             lease.checkpoint_owner is not None, cost.measured(lease.extra)))
    return out


def _weights(leases: Sequence[LeaseLoad], unmeasured: Set[str] = frozenset()) -> dict[str, float]:
    """Each lease's load (module docstring, step 1).

    >>> _weights([LeaseLoad("a", "w", 1.0), LeaseLoad("b", "w", 1.3), LeaseLoad("c", "w", 3.7)])
    {'a': 1.02, 'b': 1.02, 'c': 4.02}
    """
    known = {lease.key: lease.throughput_kbps for lease in leases
             if lease.throughput_kbps is not None and lease.key not in unmeasured}
    average = sum(known.values()) / len(known) if known else 0.0
    floor = max(average * 0.01, 0.01)
    return {lease.key: round(_banded(known.get(lease.key, average), average) + floor, 9) for lease in leases}


def _banded(kbps: float, average: float) -> float:
    """``kbps`` as the average times the nearest power of two."""
    ratio = kbps / average if average > 0 else 0.0
    if ratio <= 0:  # nothing measured, or too small to divide (a denormal): no load of its own
        return max(kbps, 0.0) if average <= 0 else 0.0
    return average * 2.0 ** round(math.log2(ratio))


def _capacities(workers: Sequence[WorkerLoad], load: Mapping[str, float],
                settings: AssignmentSettings) -> tuple[dict[str, float], bool]:
    """Each worker's capacity, and whether this round may rebalance (module docstring, step 2)."""
    even = {w.worker_id: 1.0 for w in workers}
    utilisations = [w.utilisation for w in workers]
    if not workers or any(u is None for u in utilisations):
        return even, True
    mean = sum(u for u in utilisations if u is not None) / len(workers)
    band = settings.rebalance_threshold_percentage / 100.0
    inside = all(mean * (1 - band) <= (w.utilisation or 0) <= mean * (1 + band)
                 and (w.utilisation or 0) <= w.max_utilisation for w in workers)
    speeds = {w.worker_id: load[w.worker_id] / w.utilisation for w in workers
              if w.utilisation and load[w.worker_id] > 0}
    if not speeds:
        return even, not inside
    mean_speed = sum(speeds.values()) / len(speeds)
    damp = settings.dampening_percentage / 100.0
    out = {}
    for w in workers:
        speed = speeds.get(w.worker_id, min(speeds.values()))  # unmeasured: no better than the slowest
        if w.utilisation is not None and w.utilisation > w.max_utilisation:
            speed *= w.max_utilisation / w.utilisation  # above its range: aim it back inside
        out[w.worker_id] = max(0.05, 1 + damp * (speed / mean_speed - 1))
    return out, not inside


class _Books:
    """The plan's running view: each worker's leases, load and throughput."""

    def __init__(self, ids: Sequence[str], by_key: Mapping[str, LeaseLoad], weight: Mapping[str, float],
                 settings: AssignmentSettings):
        self.held: dict[str, list[str]] = {w: [] for w in ids}
        self.load = {w: 0.0 for w in ids}
        self.throughput = {w: 0.0 for w in ids}
        self.capacity = {w: 1.0 for w in ids}
        self.suspects: set[str | None] = set()
        self.by_key, self.weight, self.settings = by_key, weight, settings

    def fill(self, worker: str, extra: float = 0.0) -> float:
        return (self.load[worker] + extra) / self.capacity[worker]

    def room(self, worker: str, key: str) -> bool:
        return (len(self.held[worker]) < self.settings.max_leases_for_worker
                and self.throughput[worker] + (self.by_key[key].throughput_kbps or 0.0)
                <= self.settings.max_throughput_per_host_kbps)

    def give(self, key: str, frm: str | None, to: str) -> None:
        kbps = self.by_key[key].throughput_kbps or 0.0
        if frm in self.held:
            self.held[frm].remove(key)
            self.load[frm] -= self.weight[key]
            self.throughput[frm] -= kbps
        self.held[to].append(key)
        self.load[to] += self.weight[key]
        self.throughput[to] += kbps


def plan_assignment(leases: Sequence[LeaseLoad], workers: Sequence[WorkerLoad], settings: AssignmentSettings,
                    rng: random.Random, settling: Set[str] = frozenset(),
                    left: Mapping[str, Set[str]] | None = None, unmeasured: Set[str] = frozenset(),
                    rebalance: bool = True, released: Mapping[str, Set[str]] | None = None) -> AssignmentPlan:
    """One round of the leader's assignment (the module docstring has the rule); ``rebalance``
    False: steps 1-3 only (the leader's assignment-only round between its rounds)."""
    released = released or {}
    ids = sorted({w.worker_id for w in workers})
    if not ids:
        return AssignmentPlan((), tuple(sorted(lease.key for lease in leases)), {}, "no live worker")
    by_key = {lease.key: lease for lease in leases}
    books = _Books(ids, by_key, _weights(leases, unmeasured), settings)
    pool: list[LeaseLoad] = []
    for lease in leases:
        if lease.owner in books.held and not lease.expired:
            books.give(lease.key, None, lease.owner)
        else:
            pool.append(lease)
    books.capacity, unbalanced = _capacities(workers, books.load, settings)
    rebalance = rebalance and unbalanced
    # A worker that let one of its leases expire while reporting metrics receives nothing
    # this round (unless nobody else can): it may be stuck, and giving it leases back churns.
    books.suspects = {lease.owner for lease in pool if lease.owner in books.held}

    moves: list[Move] = []
    spill: list[str] = []
    rng.shuffle(pool)  # equal weights: no bias by key from round to round
    for lease in sorted(pool, key=lambda lease: -books.weight[lease.key]):
        w = books.weight[lease.key]
        allowed = [x for x in ids if x not in released.get(lease.key, ()) and books.room(x, lease.key)]
        candidates = [x for x in allowed if x not in books.suspects] or allowed
        if not candidates:
            spill.append(lease.key)
            continue
        to = min(candidates, key=lambda x: (books.fill(x, w), len(books.held[x]), x))
        books.give(lease.key, None, to)  # a pool lease counts for no worker until assigned
        moves.append(Move(lease.key, lease.owner, to, handoff=False))

    handoffs = 0
    for _ in range(len(leases) + 1 if rebalance else 0):  # each move lowers the sum of squared fills
        move = _next_handoff(books, settling | {m.key for m in moves},
                             {k: {*(left or {}).get(k, ()), *released.get(k, ())} for k in {*(left or {}), *released}})
        if move is None:
            break
        key, frm, to = move
        books.give(key, frm, to)
        moves.append(Move(key, frm, to, handoff=True))
        handoffs += 1
    counts = {w: len(books.held[w]) for w in ids}
    waiting = sum(1 for key in spill if released.get(key))
    reason = (f"{len(leases)} leases, {len(ids)} workers: assigned {len(moves) - handoffs}, "
              f"handed over {handoffs}, spilled {len(spill)}"
              + (f" ({waiting} given up by the only workers that could take it: it waits)" if waiting else "")
              + f"; leases per worker {min(counts.values())}..{max(counts.values())}")
    return AssignmentPlan(tuple(moves), tuple(sorted(spill)), counts, reason)


def _next_handoff(books: _Books, settling: Set[str],
                  left: Mapping[str, Set[str]]) -> tuple[str, str, str] | None:
    """The most filled donor, the least filled receiver that can take one of its leases,
    and the heaviest such lease meeting the move condition (module docstring, step 4)."""
    margin = books.settings.rebalance_threshold_percentage / 100.0
    ids = list(books.held)
    receivers = sorted((x for x in ids if x not in books.suspects),
                       key=lambda x: (books.fill(x), len(books.held[x]), x))
    for donor in sorted(ids, key=lambda x: (-books.fill(x), x)):
        movable = sorted((k for k in books.held[donor] if not books.by_key[k].handing_over and k not in settling),
                         key=lambda k: (-books.weight[k], k))
        for receiver in receivers:
            if books.fill(receiver) >= books.fill(donor):
                break
            for key in movable:
                w = books.weight[key]
                if (receiver not in left.get(key, ()) and books.room(receiver, key)
                        and books.fill(receiver, w) + margin * w / books.capacity[receiver] < books.fill(donor)):
                    return key, donor, receiver
    return None


def written_counters(moves: Iterable[Move], leases: Mapping[str, Lease]) -> dict[str, int]:
    """The counter each moved lease has once its new owner may start it: an assignment
    writes counter + 1; a handoff leaves the counter and the old owner's release (its
    final checkpoint) adds 1."""
    return {m.key: leases[m.key].counter + 1 for m in moves if m.key in leases}


def settling(written: Mapping[str, int], leases: Mapping[str, Lease]) -> frozenset[str]:
    """The leases the leader moved whose new owner has not renewed them yet (counter not past
    ``written_counters``): a handoff of one of them would wait for the graceful timeout, as
    the old owner has nothing to checkpoint. Leases gone from the table drop out.

    >>> settling({"s0": 3, "s1": 3}, {"s0": Lease("s0", "B", 3), "s1": Lease("s1", "B", 4)})
    frozenset({'s0'})
    """
    return frozenset(k for k, c in written.items() if k in leases and leases[k].counter <= c)


def spread(counts: Mapping[str, int]) -> int:
    return max(counts.values()) - min(counts.values()) if counts else 0

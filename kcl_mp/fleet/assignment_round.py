"""The 3.x leader's round around the assignment: what to write, from one scan. Pure (decision
table: tests/decisions/assignment_round_cases.json).

The leader (``leader_round``) scans every renewal interval and carries a ``Memory`` from scan
to scan. Each scan:

1. *Watch* (``watch``): fold the scan into the observations; a round runs when it is due
   (every leaseAssignmentIntervalMillis) or, between rounds, when a lease lies expired or
   unowned that the last round did not spill over (an assignment-only round: no
   rebalancing), so a dead worker's leases wait about failoverTimeMillis, not a round.
2. *Overdue handoffs*: a handoff pending (``checkpointOwner`` set) for longer than
   gracefulLeaseHandoffTimeoutMillis, as first seen by this leader, is assigned outright
   to its new owner (its old owner died or does not answer).
3. *Workers* (``plan_round``), from the worker-metrics items read for the round:
   - a worker renewing its leases (and the leader) is alive whatever its metrics item says
     (a late report, a restarted Java worker's first one): moving its leases now would only
     move them back;
   - a worker that let every lease it owns expire has stopped, whatever its metrics item (a
     stopped Java worker's stays live for two report periods): it is *gone* and gets nothing
     until it reports again (its ``lut`` moves past the one seen then);
   - leases go only to workers shown alive: renewing leases, or (in a full round, so a new
     worker gets its share) reporting within the last report period + a renewal interval +
     1 s; between rounds only a worker renewing its own gets expired leases.
4. *Assign* (``assignment.plan_assignment``): leases pending a handoff stay out (as Java:
   reassigning one whose new owner looks dead for a moment only moves it back later), as do
   those ``settling``; a lease moved away from a worker goes back to it in none of the next
   LEFT_ROUNDS rounds; a lease a worker gave up (``released_by``) goes to none of them.
   The rebalance follows kclmp.leaseAssignmentStrategy: WORKER_UTILIZATION_AWARE, that
   module's own; LEASE_COUNT_BASED, the same with every lease and worker alike (no
   throughput, no CPU: counts, spread <= 1); both only on a new leader's first round and
   then every varianceBalancingFrequency-th (Java's LeaseAssignmentManager: its
   ``lamRunCounter``, reset on a leader switch), except that a new leader moves no lease for
   balance until it has watched the leases for failoverTimeMillis (``Memory.led_since``):
   before that it cannot tell a dead owner's leases (the old leader's, when it died) from a
   live one's, and a handoff from a dead owner waits out a failover at its receiver where
   an assignment a round later would not (Java hands them over at once); COST_BASED, every round, the assignment's
   steps without its rebalance, then ``cost_balance.plan_cost_moves`` over the leases as assigned (those just
   assigned, settling or pending a handoff stay; ``left`` and ``released`` bar their workers;
   maxLeasesForWorker bounds a receiver).
5. *Remember* (``RoundPlan.remember``), from the writes that succeeded: where each moved
   lease came from (``left``) and the counter its new owner starts at (``written``).

Worked example: leader A, worker B renewing s1, s0 unowned, a round due: s0 is assigned to
the emptier of A and B; had B let s1 expire while still reporting, B would be gone and s0
and s1 would both go to A.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from kcl_mp.config.settings import LeaseAssignmentStrategy
from kcl_mp.fleet import assignment, cost_balance
from kcl_mp.fleet.assignment import AssignmentPlan, AssignmentSettings, LeaseLoad, Move, WorkerLoad
from kcl_mp.fleet.cost_balance import CostSettings
from kcl_mp.leases import balance
from kcl_mp.leases.lease import Lease, released_by

LEFT_ROUNDS = 10  # rounds a handed-away-from worker stays barred from getting the lease back


@dataclass(frozen=True)
class RoundSettings:
    me: str  # the leader's worker id
    failover_s: float  # failoverTimeMillis
    handoff_timeout_s: float  # gracefulLeaseHandoffTimeoutMillis
    report_period_s: float  # workerMetricsReporterFreqInMillis
    renew_interval_s: float
    assignment: AssignmentSettings = field(default_factory=AssignmentSettings)
    strategy: LeaseAssignmentStrategy = "WORKER_UTILIZATION_AWARE"  # kclmp.leaseAssignmentStrategy
    cost: CostSettings = field(default_factory=CostSettings)
    balance_every: int = 3  # varianceBalancingFrequency: rounds per rebalance (not COST_BASED)


@dataclass(frozen=True)
class Memory:
    """What the leader carries from scan to scan."""

    observations: Mapping[str, balance.Observation] = field(default_factory=dict)
    rounds: int = 0  # full rounds run
    spilled: frozenset[str] = frozenset()  # what the last round could give nobody
    handoff_seen: Mapping[str, float] = field(default_factory=dict)  # lease -> when its handoff was first seen
    written: Mapping[str, int] = field(default_factory=dict)  # leases moved, not yet renewed by their new owner
    left: Mapping[str, tuple[int, frozenset[str]]] = field(default_factory=dict)  # lease -> (round, handed away from)
    gone: Mapping[str, float] = field(default_factory=dict)  # worker seen with every lease expired -> its lut then
    balance_count: int = 0  # Java's lamRunCounter: a round rebalances at 0; 0 again on becoming the leader
    led_since: float = -math.inf  # when this host last became the leader (its clock): rebalance after failover


@dataclass(frozen=True)
class Watch:
    """One scan folded in: whether a round runs, and the leases as the leader sees them."""

    memory: Memory
    loads: tuple[LeaseLoad, ...]
    runs: bool
    due: bool


@dataclass(frozen=True)
class RoundPlan:
    overdue: tuple[Move, ...]  # handoffs pending past the timeout: assigned outright to their new owner
    assignment: AssignmentPlan | None  # None: no workers read (the round is skipped)
    memory: Memory  # as of the plan, before its writes
    renewing: frozenset[str]  # owners of unexpired leases (the table migration's leader step reads them)

    def remember(self, done: Iterable[Move], leases: Mapping[str, Lease]) -> Memory:
        """The memory after the writes in ``done`` (the moves of ``assignment`` that succeeded)."""
        done = tuple(done)
        left = dict(self.memory.left)
        for move in done:
            if move.owner and move.owner != move.to:  # never back to it for LEFT_ROUNDS rounds from now
                left[move.key] = (self.memory.rounds, frozenset({*left.get(move.key, (0, frozenset()))[1], move.owner}))
        unstarted = assignment.settling(self.memory.written, leases)
        written = {k: c for k, c in self.memory.written.items() if k in unstarted}
        written.update(assignment.written_counters(done, leases))
        return replace(self.memory, left=left, written=written)


def watch(memory: Memory, leases: Mapping[str, Lease], now: float, due: bool, failover_s: float) -> Watch:
    """Every scan (module docstring, step 1); ``due``: the round's interval has passed."""
    observations = balance.observe(memory.observations, leases.values(), now)
    loads = tuple(assignment.lease_loads(leases.values(), observations, now, failover_s))
    runs = due or any(load.expired and not load.handing_over and load.key not in memory.spilled for load in loads)
    return Watch(replace(memory, observations=observations, rounds=memory.rounds + due), loads, runs, due)


def plan_round(watched: Watch, leases: Mapping[str, Lease], workers: Sequence[WorkerLoad] | None,
               reported: Mapping[str, float], now: float, wall_s: float, settings: RoundSettings,
               rng: random.Random) -> RoundPlan:
    """A round that runs (module docstring, steps 2-4). ``workers``: the live workers from the
    metrics items (None: they could not be read: only the overdue handoffs); ``reported``: each
    item's ``lut`` (epoch s); ``now``: the leader's clock, ``wall_s``: the wall clock."""
    memory = watched.memory
    seen_handoffs = {k: t for k, t in memory.handoff_seen.items() if k in leases and leases[k].checkpoint_owner}
    overdue = []
    for key, current in leases.items():
        if current.checkpoint_owner and not current.is_shard_end:
            first = seen_handoffs.setdefault(key, now)
            if now - first > settings.handoff_timeout_s and current.owner:
                overdue.append(Move(key, current.owner, current.owner, handoff=False))
    memory = replace(memory, handoff_seen=seen_handoffs)
    renewing = frozenset(load.owner for load in watched.loads if load.owner and not load.expired)
    if workers is None:
        return RoundPlan(tuple(overdue), None, memory, renewing)
    me = {settings.me}
    live = {w.worker_id for w in workers}
    gone = dict(memory.gone)
    for owner in {load.owner for load in watched.loads if load.owner and load.expired} - renewing - me:
        gone.setdefault(owner, reported.get(owner, 0.0))
    gone = {w: lut for w, lut in gone.items() if reported.get(w, 0.0) <= lut}
    candidates = [w for w in workers if w.worker_id not in gone]
    candidates += [WorkerLoad(owner) for owner in sorted((renewing | me) - live)]
    fresh_s = settings.report_period_s + settings.renew_interval_s + 1.0
    candidates = [w for w in candidates if w.worker_id in renewing | me
                  or (watched.due and wall_s - reported.get(w.worker_id, 0.0) <= fresh_s)] or candidates
    left = {k: v for k, v in memory.left.items() if memory.rounds - v[0] < LEFT_ROUNDS and k in leases}
    # leases moved within LEFT_ROUNDS rounds count at the average throughput (a catch-up burst)
    released = {key: {by} for key, lease in leases.items() if (by := released_by(lease, int(wall_s * 1000)))}
    loads = [load for load in watched.loads if not load.handing_over]
    assignable = candidates
    if settings.strategy == "LEASE_COUNT_BASED":
        loads = [replace(load, throughput_kbps=None) for load in loads]
        assignable = [WorkerLoad(w.worker_id) for w in candidates]
    settling = assignment.settling(memory.written, leases)
    barred = {k: v[1] for k, v in left.items()}
    watched_long = now - memory.led_since >= settings.failover_s  # step 4: it tells dead owners from live ones
    balance_now = watched.due and memory.balance_count == 0 and watched_long
    plan = assignment.plan_assignment(loads, assignable, settings.assignment, rng, settling, barred, set(left),
                                      rebalance=balance_now and settings.strategy != "COST_BASED",
                                      released=released)
    if settings.strategy == "COST_BASED" and watched.due and watched_long:
        plan = _cost_moves(plan, watched.loads, candidates, settings, settling,
                           {k: {*barred.get(k, ()), *released.get(k, ())} for k in {*barred, *released}})
    advances = watched.due and (watched_long or memory.balance_count > 0)  # a deferred first rebalance stays due
    balance_count = (memory.balance_count + 1) % max(1, settings.balance_every) if advances else memory.balance_count
    memory = replace(memory, gone=gone, left=left, spilled=frozenset(plan.spillover), balance_count=balance_count)
    return RoundPlan(tuple(overdue), plan, memory, renewing)


def _cost_moves(plan: AssignmentPlan, loads: Sequence[LeaseLoad], workers: Sequence[WorkerLoad],
                settings: RoundSettings, settling: frozenset[str], barred: Mapping[str, set[str]]) -> AssignmentPlan:
    """COST_BASED: the assignment's plan plus the cost-based handoffs over the leases as it leaves them."""
    to = {m.key: m.to for m in plan.moves}
    owned = [replace(load, owner=to.get(load.key, load.owner), expired=False) if load.key in to else load
             for load in loads if not load.expired or load.key in to]
    cap = settings.assignment.max_leases_for_worker
    costed = cost_balance.plan_cost_moves(owned, workers, settings.cost, settling | set(to), barred,
                                          lambda host, key, held: held[host] < cap)
    counts = dict(plan.counts)
    for move in costed.moves:
        counts[move.owner or ""] -= 1
        counts[move.to] += 1
    return replace(plan, moves=plan.moves + costed.moves, counts=counts, reason=f"{plan.reason}; {costed.reason}")

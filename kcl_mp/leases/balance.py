"""Lease balancing: which leases this worker should take or steal next. Pure.

Both rules share the KCL's view of the fleet, built from one table scan:

1. A lease is *expired* when it has no owner, or when its counter has not moved for
   longer than failoverTimeMillis by this worker's own clock (the table holds no time;
   each worker times the counters it sees). A lease seen for the first time with an
   owner is assumed fresh; without an owner it is expired at once.
2. Live workers are the owners of unexpired leases, plus this worker.
3. ``target = ceil(leases / workers)`` (at least 1, at most maxLeasesForWorker).
4. ``needed = target - mine``. If expired leases exist, take up to ``needed`` of them:
   unowned ones first (priority assignment), then the other expired ones, each group
   in random order (``rng``) so racing workers spread out.

They differ in stealing, when nothing is expired (the Java KCL 2.x taker's rule, the
reference the simulation benchmark compares against, is ``devtools/java_rule.py``'s):

``plan_leases`` (kcl-mp): steal one lease at a time, up to ``min(needed,
maxLeasesToStealAtOneTime)``, each from a worker holding at least two more than this
worker will then hold, the most loaded first, ties broken at random, and only a lease
whose owner has started processing it (below). So:

- every steal moves a lease from a worker with ``a`` to one with ``b <= a - 2`` and
  lowers the sum of squared counts: rounds cannot oscillate or ping-pong a lease;
- while the spread is 2 or more, the least loaded worker is below target and has a
  victim (its leases count as started after failoverTimeMillis at the latest, unless
  they wait for a parent), so a fleet only stops moving leases at ``max - min <= 1``;
- thieves that start together pick different victims instead of emptying one;
- one round may take from several victims (water-filling), so a join settles in fewer
  rounds;
- which of the victim's leases is stolen follows their measured cost (``kclmpCpuPercent``,
  leases/cost.py) where any is known (``_pick``): the costliest that leaves the thief no
  hotter than the victim (its cost at most half the gap between the victim's leases' cost
  and the thief's), else the cheapest; none known: one at random.

Worked example (cost): B holds b0 (60 %), b1 (30 %), b2 and b3 (5 %); us, nothing. The gap
is 100 points: b0 would leave us at 60 against B's 40: b1 (30 <= 50); then, gap 40, a 5 % one.

Worked example (kcl-mp): 7 leases, A (us) 0, B 4, C 3, maxLeasesToStealAtOneTime 3.
Workers 3, target 3, needed 3. Steal 1 from B (4 >= 0 + 2): B 3, us 1. Then B and C
both hold 3 >= 1 + 2: a random one of them, say C: C 2, us 2. Then B holds 3 < 2 + 2:
stop. Two steals; the fleet is at 3/2/2.

kcl-mp steals only leases whose owner has shown it processes them (``is_started``): a
steal is a handoff, and the Java KCL 3.1.3 never answers one asked while its shard
consumer is still WAITING_ON_PARENT_SHARDS (its first second, or while a parent is
unfinished): the consumer then ends through ShutdownTask, which neither checkpoints nor
hands the lease over, and the worker goes on renewing a lease it no longer processes, so
the shard waited for gracefulLeaseHandoffTimeoutMillis. Shown means, from this worker's
scans: its checkpoint moved while this owner held it, or this owner has held it for
failoverTimeMillis; and no parent lease is unfinished. When the only leases worth
stealing are not started yet, the plan steals nothing and says ``deferred``: the
coordinator tries again at the next scan instead of a take interval later.

A lease being handed over (``checkpointOwner`` set: KCL 3.x graceful handoff) counts
for its new owner and is never stolen again until the handoff ends. Leases checkpointed
at SHARD_END are finished work: neither counted, taken nor stolen. Clock and randomness
come in as arguments, so the decision tables in tests/decisions/balance_cases.json pin exact
plans.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from kcl_mp.config import LeaseSettings
from kcl_mp.leases import cost
from kcl_mp.leases.lease import Lease
from kcl_mp.leases.shard_sync import unfinished_parents
from kcl_mp.sequence import ExtendedSequenceNumber


@dataclass(frozen=True)
class Observation:
    """The last counter, owner and checkpoint seen for a lease; when the counter (or owner)
    last changed; since when this owner holds it, and whether its checkpoint moved since."""

    counter: int
    owner: str | None
    changed_at: float
    owner_since: float
    checkpoint: ExtendedSequenceNumber | None
    checkpointed: bool  # the checkpoint moved while this owner held the lease


@dataclass(frozen=True)
class Plan:
    target: int
    take: tuple[str, ...]
    steal: tuple[str, ...]
    live_workers: tuple[str, ...]
    reason: str
    deferred: bool = False  # steals put off: the leases worth stealing have not started yet


def observe(previous: Mapping[str, Observation], leases: Iterable[Lease], now: float) -> dict[str, Observation]:
    """Fold one table scan into the observations (leases gone from the table are dropped).

    An unowned lease never seen before gets ``changed_at = -inf`` so it is expired at once.
    A lease seen for the first time, or under a new owner, is held ``owner_since`` now.
    """
    out: dict[str, Observation] = {}
    for lease in leases:
        before = previous.get(lease.key)
        if before is None:
            changed_at = now if lease.owner else -math.inf
        elif before.counter != lease.counter or before.owner != lease.owner:
            changed_at = now
        else:
            changed_at = before.changed_at
        if before is None or before.owner != lease.owner:
            owner_since, checkpointed = now, False
        else:
            owner_since = before.owner_since
            checkpointed = before.checkpointed or before.checkpoint != lease.checkpoint
        out[lease.key] = Observation(lease.counter, lease.owner, changed_at, owner_since, lease.checkpoint,
                                     checkpointed)
    return out


def is_expired(lease: Lease, observation: Observation | None, now: float, failover_s: float) -> bool:
    if not lease.owner:
        return True
    if observation is None:
        return False
    return now - observation.changed_at > failover_s


def is_started(lease: Lease, observation: Observation | None, leases: Mapping[str, Lease], now: float,
               failover_s: float) -> bool:
    """Has the owner shown it processes ``lease`` (so it can answer a handoff)? Its
    checkpoint moved under this owner, or this owner has held it for failoverTimeMillis,
    and no parent is unfinished (the owner's processor waits for them). Unknown: no.

    >>> a = Lease("s0", "B", 5)
    >>> is_started(a, Observation(5, "B", 99.0, 95.0, None, checkpointed=False), {}, now=100.0, failover_s=10.0)
    False
    >>> is_started(a, Observation(5, "B", 99.0, 95.0, None, checkpointed=True), {}, now=100.0, failover_s=10.0)
    True
    >>> is_started(a, Observation(5, "B", 99.0, 90.0, None, checkpointed=False), {}, now=100.0, failover_s=10.0)
    True
    """
    if observation is None or observation.owner != lease.owner or unfinished_parents(lease, leases):
        return False
    return observation.checkpointed or now - observation.owner_since >= failover_s


@dataclass(frozen=True)
class TakerView:
    """The fleet as one worker sees it after a scan."""

    active: Mapping[str, Lease]
    expired: tuple[str, ...]  # sorted
    counts: Counter[str]  # owner -> unexpired leases held (this worker always present)
    live: tuple[str, ...]
    target: int
    mine: int

    @property
    def summary(self) -> str:
        return f"{len(self.active)} leases, {len(self.live)} workers, target {self.target}, held {self.mine}"


def _view(worker_id: str, leases: Mapping[str, Lease], observations: Mapping[str, Observation],
          now: float, settings: LeaseSettings) -> TakerView:
    failover_s = settings.failover_time_ms / 1000.0
    active = {key: lease for key, lease in leases.items() if not lease.is_shard_end}
    expired = tuple(sorted(k for k, lease in active.items()
                           if is_expired(lease, observations.get(k), now, failover_s)))
    gone = set(expired)
    counts: Counter[str] = Counter(lease.owner for k, lease in active.items() if k not in gone and lease.owner)
    counts.setdefault(worker_id, 0)
    live = tuple(sorted(counts))
    target = 0
    if active:
        target = min(max(1, math.ceil(len(active) / len(live))), settings.max_leases_for_worker)
    return TakerView(active, expired, counts, live, target, counts[worker_id])


@dataclass(frozen=True)
class FleetFigures:
    """The fleet figures a scan gives (the metrics' total_leases, unclaimed_leases ...)."""

    total_leases: int  # finished ones included
    open_leases: int  # not at SHARD_END: the open shards the table tracks
    unclaimed: int  # open leases with no owner, or one that stopped renewing
    worker_leases: dict[str, int]  # live worker -> open leases it holds (this worker always present)


def figures(worker_id: str, leases: Mapping[str, Lease], observations: Mapping[str, Observation], now: float,
          settings: LeaseSettings) -> FleetFigures:
    view = _view(worker_id, leases, observations, now, settings)
    return FleetFigures(len(leases), len(view.active), len(view.expired), dict(sorted(view.counts.items())))


def _take_or_stay(view: TakerView, needed: int, rng: random.Random) -> Plan | None:
    """Steps shared by both rules: nothing to do, or take expired leases; None: go on to steal."""
    if not view.active:
        return Plan(0, (), (), view.live, "no leases")
    if needed <= 0:
        return Plan(view.target, (), (), view.live, f"{view.summary}: balanced")
    if not view.expired:
        return None
    unowned = [k for k in view.expired if not view.active[k].owner]
    stale = [k for k in view.expired if view.active[k].owner]
    rng.shuffle(unowned)
    rng.shuffle(stale)
    take = tuple((unowned + stale)[:needed])
    return Plan(view.target, take, (), view.live,
                f"{view.summary}: taking {len(take)} of {len(view.expired)} available")


def stealable(view: TakerView, owner: str) -> list[str]:
    """``owner``'s leases a thief may steal: unexpired and not being handed over."""
    gone = set(view.expired)
    return sorted(k for k, lease in view.active.items()
                  if lease.owner == owner and k not in gone and not lease.checkpoint_owner)


def first_steps(worker_id: str, leases: Mapping[str, Lease], observations: Mapping[str, Observation], now: float,
           settings: LeaseSettings, rng: random.Random) -> tuple[TakerView, int, Plan | None]:
    """What both rules (this one and the Java 2.x one, devtools/java_rule.py) do first: the
    view, the leases needed, and the plan if taking decides."""
    view = _view(worker_id, leases, observations, now, settings)
    needed = view.target - view.mine
    return view, needed, _take_or_stay(view, needed, rng)


def plan_leases(
    worker_id: str,
    leases: Mapping[str, Lease],
    observations: Mapping[str, Observation],
    now: float,
    settings: LeaseSettings,
    rng: random.Random,
    may_steal: bool = True,
) -> Plan:
    """kcl-mp's rule (see the module docstring). ``may_steal=False``: take expired only."""
    view, needed, early = first_steps(worker_id, leases, observations, now, settings, rng)
    if early is not None:
        return early
    if not may_steal:
        return Plan(view.target, (), (), view.live, f"{view.summary}: nothing expired; steals wait for the taker")
    projected = {owner: count for owner, count in view.counts.items() if owner != worker_id}
    failover_s = settings.failover_time_ms / 1000.0
    pools: dict[str, list[str]] = {}
    unstarted: dict[str, int] = {}
    for owner in projected:
        theirs = stealable(view, owner)
        pools[owner] = [k for k in theirs if is_started(leases[k], observations.get(k), leases, now, failover_s)]
        unstarted[owner] = len(theirs) - len(pools[owner])
    mine = view.mine
    costs = {k: c for k, lease in view.active.items() if (c := cost.measured(lease.extra)) is not None}
    spent = {owner: sum(costs.get(k, 0.0) for k in stealable(view, owner)) for owner in [*projected, worker_id]}
    steal: list[str] = []
    victims: list[str] = []
    deferred = False
    limit = min(needed, settings.max_leases_to_steal_at_one_time)
    while len(steal) < limit:
        loaded = [o for o, count in projected.items() if count >= mine + 2]
        candidates = [o for o in loaded if pools[o]]
        if not candidates:
            deferred = not steal and any(unstarted[o] for o in loaded)
            break
        top = max(projected[o] for o in candidates)
        victim = rng.choice(sorted(o for o in candidates if projected[o] == top))
        key = _pick(pools[victim], costs, spent[victim] - spent[worker_id], rng)
        pools[victim].remove(key)
        spent[victim] -= costs.get(key, 0.0)
        spent[worker_id] += costs.get(key, 0.0)
        steal.append(key)
        victims.append(victim)
        projected[victim] -= 1
        mine += 1
    if deferred:
        return Plan(view.target, (), (), view.live, f"{view.summary}: nothing to steal yet (no lease worth "
                    "stealing has been seen processed by its owner)", deferred=True)
    if not steal:
        return Plan(view.target, (), (), view.live,
                    f"{view.summary}: nothing to steal (no worker holds 2 more than this one)")
    sources = ", ".join(f"{n} from {o}" for o, n in sorted(Counter(victims).items()))
    return Plan(view.target, (), tuple(steal), view.live, f"{view.summary}: stealing {sources}")


def _pick(pool: list[str], costs: Mapping[str, float], gap: float, rng: random.Random) -> str:
    """The lease to steal from ``pool`` (the module docstring); ``gap``: the victim's cost less the thief's.

    >>> _pick(["b0", "b1", "b2", "b3"], {"b0": 60.0, "b1": 30.0, "b2": 5.0, "b3": 5.0}, 100.0, random.Random(0))
    'b1'
    >>> _pick(["b0", "b2"], {"b0": 60.0, "b2": 5.0}, -10.0, random.Random(0))
    'b2'
    """
    if not any(k in costs for k in pool):
        return pool[rng.randrange(len(pool))]
    fits = [k for k in pool if 2 * costs.get(k, 0.0) <= gap]
    if fits:
        return max(fits, key=lambda k: (costs.get(k, 0.0), k))
    return min(pool, key=lambda k: (costs.get(k, 0.0), k))


def plan_rescue(
    worker_id: str,
    leases: Mapping[str, Lease],
    observations: Mapping[str, Observation],
    now: float,
    settings: LeaseSettings,
    after_s: float,
    rng: random.Random,
) -> Plan:
    """A KCL 3.x follower's takes while its leader cannot be replaced soon (fleet/role.py):
    the 2.x rule without steals, where *expired* means that nobody renewed, assigned or handed
    the lease over for ``after_s`` (failover + one assignment interval) by this worker's scans.
    Unlike the 2.x rule an unowned lease is not free at once: it counts from when this worker
    first saw it unowned, since a live leader assigns new leases (a split's children) itself.
    A lease pending a handoff is left to the handoff's own timeouts (the coordinator's
    ``_check_incoming`` on its new owner, the old owner's gracefulLeaseHandoffTimeoutMillis).

    >>> seen = {"s0": Observation(1, "dead", 0.0, 0.0, None, False), "s1": Observation(4, "b", 50.0, 0.0, None, False),
    ...         "s2": Observation(0, None, -math.inf, 50.0, None, False)}
    >>> leases = {"s0": Lease("s0", "dead", 1), "s1": Lease("s1", "b", 4), "s2": Lease("s2", None, 0)}
    >>> plan_rescue("a", leases, seen, 60.0, LeaseSettings("t", failover_time_ms=6000), 18.0, random.Random(0)).take
    ('s0',)
    """
    view = _view(worker_id, leases, observations, now, replace(settings, failover_time_ms=round(after_s * 1000)))
    fresh = {k for k in view.expired if view.active[k].checkpoint_owner or not view.active[k].owner
             and (k not in observations or now - observations[k].owner_since <= after_s)}
    view = replace(view, expired=tuple(k for k in view.expired if k not in fresh))
    plan = _take_or_stay(view, view.target - view.mine, rng)
    return plan or Plan(view.target, (), (), view.live, f"{view.summary}: nothing abandoned")

"""Lease balancing: which leases this worker should take or steal next. Pure.

The rule is the Java KCL's lease taker (``DynamoDBLeaseTaker``), so a fleet of kcl-mp
hosts converges the way a KCL 2.x fleet does:

1. A lease is *expired* when it has no owner, or when its counter has not moved for
   longer than failoverTimeMillis by this worker's own clock (the table holds no time;
   each worker times the counters it sees). A lease seen for the first time with an
   owner is assumed fresh; without an owner it is expired at once.
2. Live workers are the owners of unexpired leases, plus this worker.
3. ``target = ceil(leases / workers)`` (at least 1, at most maxLeasesForWorker).
4. ``needed = target - mine``. If expired leases exist, take up to ``needed`` of them:
   unowned ones first (priority assignment), then the other expired ones, each group
   in random order (``rng``) so racing workers spread out.
5. Otherwise steal from the most loaded worker, only if it holds at least ``target``:
   ``min(needed, its_count - target)`` leases, or 1 when that is 0 and ``needed > 1``,
   at most maxLeasesToStealAtOneTime.

Worked example: 4 leases, A holds 3, B (us) holds 1, all renewed. Workers 2, target 2,
needed 1, nothing expired; A holds 3 >= 2, so steal min(1, 3 - 2) = 1 lease of A's.

Leases checkpointed at SHARD_END are finished work: they are neither counted nor taken.
Clock and randomness come in as arguments, so the decision tables in
tests/unit/balance_cases.json pin exact plans.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Mapping

from .config import LeaseSettings
from .lease import Lease


@dataclass(frozen=True)
class Observation:
    """The last counter (and owner) seen for a lease, and when it last changed."""

    counter: int
    owner: str | None
    changed_at: float


@dataclass(frozen=True)
class Plan:
    target: int
    take: tuple[str, ...]
    steal: tuple[str, ...]
    live_workers: tuple[str, ...]
    reason: str


def observe(previous: Mapping[str, Observation], leases: Iterable[Lease], now: float) -> dict[str, Observation]:
    """Fold one table scan into the observations (leases gone from the table are dropped).

    An unowned lease never seen before gets ``changed_at = -inf`` so it is expired at once.
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
        out[lease.key] = Observation(lease.counter, lease.owner, changed_at)
    return out


def is_expired(lease: Lease, observation: Observation | None, now: float, failover_s: float) -> bool:
    if not lease.owner:
        return True
    if observation is None:
        return False
    return now - observation.changed_at > failover_s


def plan_leases(
    worker_id: str,
    leases: Mapping[str, Lease],
    observations: Mapping[str, Observation],
    now: float,
    settings: LeaseSettings,
    rng: random.Random,
) -> Plan:
    failover_s = settings.failover_time_ms / 1000.0
    active = {key: lease for key, lease in leases.items() if not lease.is_shard_end}
    expired = sorted(k for k, lease in active.items() if is_expired(lease, observations.get(k), now, failover_s))
    counts = Counter(active[k].owner for k in active if k not in expired)
    counts.setdefault(worker_id, 0)
    live = tuple(sorted(owner for owner in counts if owner))
    if not active:
        return Plan(0, (), (), live, "no leases")
    target = max(1, math.ceil(len(active) / len(live)))
    target = min(target, settings.max_leases_for_worker)
    mine = counts[worker_id]
    needed = target - mine
    summary = f"{len(active)} leases, {len(live)} workers, target {target}, held {mine}"
    if needed <= 0:
        return Plan(target, (), (), live, f"{summary}: balanced")
    if expired:
        unowned = [k for k in expired if not active[k].owner]
        stale = [k for k in expired if active[k].owner]
        rng.shuffle(unowned)
        rng.shuffle(stale)
        take = tuple((unowned + stale)[:needed])
        return Plan(target, take, (), live, f"{summary}: taking {len(take)} of {len(expired)} available")
    others = [(count, owner) for owner, count in counts.items() if owner != worker_id]
    if not others:
        return Plan(target, (), (), live, f"{summary}: nothing to take")
    # Most loaded first; ties broken by name so the decision is reproducible.
    top_count, top_owner = max(others, key=lambda item: (item[0], item[1]))
    steal_count = 0
    if top_count >= target:
        steal_count = min(needed, top_count - target)
        if needed > 1 and steal_count == 0:
            steal_count = 1
        steal_count = min(steal_count, settings.max_leases_to_steal_at_one_time)
    if steal_count <= 0:
        return Plan(target, (), (), live, f"{summary}: nothing to steal ({top_owner} holds {top_count})")
    theirs = sorted(k for k, lease in active.items() if lease.owner == top_owner and k not in expired)
    rng.shuffle(theirs)
    steal = tuple(theirs[:steal_count])
    return Plan(target, (), steal, live, f"{summary}: stealing {len(steal)} from {top_owner} (holds {top_count})")

"""The Java KCL 2.x taker's rule (``DynamoDBLeaseTaker``), the reference the simulation
benchmark (bench/balance_sim.py, ``fleet_sim``) and the balance decision table compare
kcl-mp's rule (``leases.balance.plan_leases``) against. Pure; the runtime never uses it.

Taking expired leases is the same as kcl-mp's (``balance.first_steps``). When nothing is
expired: steal from *the* most loaded worker (the first in a fixed order, so every thief in
the fleet picks the same one), only if it holds at least ``target``: ``min(needed,
its_count - target)`` leases, or 1 when that is 0 and ``needed > 1``, at most
maxLeasesToStealAtOneTime.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from kcl_mp.config import LeaseSettings
from kcl_mp.leases import balance
from kcl_mp.leases.lease import Lease


def plan_leases_java(
    worker_id: str,
    leases: Mapping[str, Lease],
    observations: Mapping[str, balance.Observation],
    now: float,
    settings: LeaseSettings,
    rng: random.Random,
) -> balance.Plan:
    """The Java KCL 2.x taker's rule (the module docstring)."""
    view, needed, early = balance.first_steps(worker_id, leases, observations, now, settings, rng)
    if early is not None:
        return early
    others = [(owner, count) for owner, count in sorted(view.counts.items()) if owner != worker_id]
    if not others:
        return balance.Plan(view.target, (), (), view.live, f"{view.summary}: nothing to take")
    top_owner, top_count = others[0]
    for owner, count in others:  # Java keeps the first maximum of its map's iteration order
        if count > top_count:
            top_owner, top_count = owner, count
    steal_count = 0
    if top_count >= view.target:
        steal_count = min(needed, top_count - view.target)
        if needed > 1 and steal_count == 0:
            steal_count = 1
        steal_count = min(steal_count, settings.max_leases_to_steal_at_one_time)
    if steal_count <= 0:
        return balance.Plan(view.target, (), (), view.live,
                            f"{view.summary}: nothing to steal ({top_owner} holds {top_count})")
    theirs = balance.stealable(view, top_owner)
    rng.shuffle(theirs)
    steal = tuple(theirs[:steal_count])
    return balance.Plan(view.target, (), steal, view.live,
                        f"{view.summary}: stealing {len(steal)} from {top_owner} (holds {top_count})")

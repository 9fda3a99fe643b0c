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


def plan_variance_java(cpu: Mapping[str, float], leases: Mapping[str, tuple[str, float]], rng: random.Random,
                       dampening_percentage: int = 60, threshold_percentage: int = 10) -> list[tuple[str, str, str]]:
    """One variance-balancing pass of the Java KCL 3.x leader (VarianceBasedLeaseAssignmentDecider
    .balanceWorkerVariance, CPU only), the reference ``devtools/cost_sim.py`` compares
    COST_BASED with: ``cpu`` worker -> reported utilisation (%), ``leases`` key -> (owner,
    throughputKBps); the moves ``(key, from, to)``.

    The fleet's average CPU; nothing unless a worker is outside average x (1 +- threshold);
    givers: the workers at or above the upper limit (else the most loaded). Each gives
    ``throughput x (cpu - avg) / cpu x dampening``: its leases shuffled, each taken while the
    rest to take stays above 0, or the least one if none (allowThroughputOvershoot). Each
    goes to the worker furthest below the average, whose CPU is extrapolated by
    ``kbps x avg / (total kbps / workers)``; none once that would pass the average.
    """
    if not cpu:
        return []
    avg = sum(cpu.values()) / len(cpu)
    upper, lower = avg * (1 + threshold_percentage / 100), avg * (1 - threshold_percentage / 100)
    if all(lower <= v <= upper for v in cpu.values()):
        return []
    givers = [w for w in cpu if cpu[w] >= upper] or [max(cpu, key=lambda w: cpu[w])]
    held: dict[str, list[str]] = {w: [] for w in cpu}
    for key, (owner, _) in sorted(leases.items()):
        if owner in held:
            held[owner].append(key)
    total = {w: sum(leases[k][1] for k in keys) for w, keys in held.items()}
    average_kbps = sum(total.values()) / len(cpu)
    value = dict(cpu)
    take = {w: total[w] * (cpu[w] - avg) / cpu[w] * dampening_percentage / 100 if cpu[w] > 0 else 0.0 for w in givers}
    moves = []
    for giver in sorted(givers, key=lambda w: -take[w]):
        mine = list(held[giver])
        rng.shuffle(mine)
        chosen, remaining = [], take[giver]
        if total[giver] == 0 and mine:
            chosen = mine[:1]
        else:
            for key in mine:
                if remaining - leases[key][1] > 0:
                    remaining -= leases[key][1]
                    chosen.append(key)
            if not chosen and mine:
                chosen = [min(mine, key=lambda k: leases[k][1])]
        for key in chosen:
            to = min((w for w in cpu if w != giver), key=lambda w: (value[w] - avg) / avg if avg else value[w],
                     default=None)
            added = leases[key][1] * avg / average_kbps if average_kbps > 0 else 0.0
            if to is None or value[to] + added > avg:
                break
            value[to] += added
            moves.append((key, giver, to))
    return moves

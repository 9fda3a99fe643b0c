"""Each held lease's measured CPU cost, written on its renewals beside ``throughputKBps``. Pure.

A lease costs its host the CPU of its processor's process tree (``worker/usage.py`` samples
it in the pool process every few seconds) plus a share of the pool process's own CPU (the
threads that fetch, de-aggregate and encode the lease's records): the pool's CPU is split
among the shards it drives in proportion to the bytes each delivered since the last
sample (``pool_shares``; evenly when none delivered any, since then the pool's CPU is the
shards' polling, the same for each).

The figure is percent of one core, smoothed like the throughput (an exponential moving
average, alpha 0.5, the first sample taken as is) and written on each renewal as
``kclmpCpuPercent`` N, rounded to 3 decimals. It is kcl-mp's own attribute: a Java worker
neither reads nor writes it, and a Java renewal leaves it as it was (an UpdateItem names
only its own attributes). A kcl-mp leader reads it (``fleet/cost_balance.py``) only from
leases a kcl-mp host owns (one with ``kclmpCores`` in its worker-metrics item): a lease a
Java worker took over keeps the figure kcl-mp wrote last, which no longer says anything.

Worked example: a pool process at 30 % drives s0 (3000 bytes since the last sample) and
s1 (1000): s0's share is 22.5 %, s1's 7.5 %. s0's processor used 40 %: its sample is 62.5 %;
the next 42.5 % smooths to 52.5 %.

>>> pool_shares(30.0, {"s0": 3000, "s1": 1000})
{'s0': 22.5, 's1': 7.5}
>>> c = LeaseCost(); c.record("s0", 40.0 + 22.5); c.record("s0", 42.5)
>>> c.percent("s0"), c.percent("s1"), renewal_attributes(c.percent("s0"))
(52.5, None, {'kclmpCpuPercent': {'N': '52.5'}})
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kcl_mp.leases.lease import CPU_PERCENT
from kcl_mp.leases.throughput import ALPHA


def pool_shares(pool_percent: float, delivered: Mapping[str, int]) -> dict[str, float]:
    """The pool process's CPU split among its shards by the bytes each delivered (evenly if none did)."""
    if not delivered:
        return {}
    total = sum(max(0, n) for n in delivered.values())
    if total <= 0:
        return {key: pool_percent / len(delivered) for key in delivered}
    return {key: pool_percent * max(0, n) / total for key, n in delivered.items()}


class LeaseCost:
    """The smoothed CPU (% of a core) of each lease this host drives."""

    def __init__(self) -> None:
        self.smoothed: dict[str, float] = {}

    def record(self, key: str, percent: float) -> None:
        previous = self.smoothed.get(key)
        self.smoothed[key] = percent if previous is None else ALPHA * percent + (1 - ALPHA) * previous

    def percent(self, key: str) -> float | None:
        value = self.smoothed.get(key)
        return None if value is None else round(value, 3)

    def drop(self, key: str) -> None:
        self.smoothed.pop(key, None)


def renewal_attributes(percent: float | None) -> dict[str, Any]:
    """What a renewal writes for the cost: ``{"kclmpCpuPercent": {"N": ...}}``, or nothing (never sampled)."""
    return {} if percent is None else {CPU_PERCENT: {"N": repr(percent)}}


def measured(lease_extra: Mapping[str, Any]) -> float | None:
    """The cost a lease row carries (``kclmpCpuPercent``), or None.

    >>> measured({"kclmpCpuPercent": {"N": "12.5"}}), measured({}), measured({"kclmpCpuPercent": {"N": "x"}})
    (12.5, None, None)
    """
    raw = lease_extra.get(CPU_PERCENT)
    if not isinstance(raw, Mapping):
        return None
    try:
        value = float(raw["N"])
    except (KeyError, ValueError):
        return None
    return value if value >= 0 else None

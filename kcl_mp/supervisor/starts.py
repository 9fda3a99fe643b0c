"""Which held leases get a driver now: the spawn step's choice, paced.

A held lease without a running shard starts when all of these hold: its restart backoff is
over (``Restart.not_before``), every parent shard reached SHARD_END (a child is processed
only after its parents), and its last renewal is recent (``fencing.Hold``: a host that was
stopped or starved renews first, so a processor never starts for a lease another host may
have taken). At most ``per_turn`` start in one loop turn; the rest wait for the next turn,
which comes at once: starting processors for many new leases never delays a renewal.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kcl_mp.leases.fencing import Hold

STARTS_PER_TURN = 16  # shards handed to pool processes per loop turn


@dataclass
class Restart:
    attempts: int = 0
    not_before: float = 0.0


class Starts:
    def __init__(self, failover_s: float, log: logging.LoggerAdapter[logging.Logger],
                 per_turn: int = STARTS_PER_TURN):
        self.failover_s, self.log, self.per_turn = failover_s, log, per_turn
        self.restarts: dict[str, Restart] = {}  # shards that ended and wait for a restart
        self.waiting: dict[str, tuple[str, ...]] = {}  # held leases whose parents have not finished
        self.stale: set[str] = set()  # held leases not started for want of a recent renewal (logged once)
        self.more = False  # the last choice left leases for the next turn

    def choose(self, held: Mapping[str, Any], running: Container[str], now: float,
               waiting_for: Callable[[str], Iterable[str]]) -> list[str]:
        """The keys of ``held`` (key -> ``coordinator.Held``) to start now, at most ``per_turn``."""
        self.more = False
        self.stale &= set(held)
        for key in [k for k in self.waiting if k not in held]:
            del self.waiting[key]
        chosen: list[str] = []
        for key, lease in held.items():
            if key in running or now < self.restarts.get(key, Restart()).not_before:
                continue
            if self._waits_for_parents(key, tuple(waiting_for(key))):
                continue
            if not Hold(self.failover_s, lease.renewed_at).fresh(now):
                if key not in self.stale:
                    self.stale.add(key)
                    self.log.warning("not starting a processor for %s: its lease was last renewed %.1f s ago "
                                     "(another host may have taken it); waiting for the next renewal", key,
                                     now - lease.renewed_at)
                continue
            if len(chosen) == self.per_turn:
                self.more = True  # the loop comes back at once, after what else is due
                break
            self.stale.discard(key)
            chosen.append(key)
        return chosen

    def _waits_for_parents(self, key: str, parents: tuple[str, ...]) -> bool:
        if parents:
            if self.waiting.get(key) != parents:
                self.log.info("lease %s waits for its parent shard(s) %s to reach SHARD_END", key, ", ".join(parents))
            self.waiting[key] = parents
            return True
        if self.waiting.pop(key, None):
            self.log.info("the parents of %s are finished: starting it", key)
        return False

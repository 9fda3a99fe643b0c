"""A fleet on a virtual clock: an in-memory lease table and workers that renew, scan and
take exactly as the supervisor does, with no sleeping and no I/O.

Used by the property tests (tests/unit/test_balance.py) and the balance benchmark
(bench/balance_sim.py) to compare kcl-mp's rule with the Java KCL's. Each worker runs
three timers from its own start time: renew (failoverTimeMillis/3 - epsilon), scan
(kcl-mp: failoverTimeMillis + epsilon; Java: the take interval) and steal (the take
interval). A scan reads the table at once; its conditional writes (on the counter it
read) follow ``scan_latency_s`` later, one every ``write_s``, so workers that scan
together act on one snapshot and race write by write, as real ones do. A steal moves the
lease at once: the graceful handoff that follows it takes about one renew interval and does
not change who counts the lease.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import cast

from kcl_mp.config import LeaseSettings
from kcl_mp.leases import balance
from kcl_mp.leases.lease import Lease


class InvariantBroken(AssertionError):
    """Two workers both hold a lease at its current counter."""


@dataclass
class SimWorker:
    name: str
    rng: random.Random
    held: dict[str, int] = field(default_factory=dict)  # key -> counter this worker wrote last
    observations: dict[str, balance.Observation] = field(default_factory=dict)
    alive: bool = True
    last_steal_at: float = -math.inf


@dataclass
class Result:
    settled: bool
    cycles: float  # take intervals from the event to the last ownership change
    moves: int  # ownership changes after the event
    repeat_moves: int  # leases that moved more than once after the event
    spread: int  # max - min leases per live worker at the end


class Fleet:
    def __init__(self, leases: int, settings: LeaseSettings, rule: str = "kcl-mp", seed: int = 0,
                 scan_latency_s: float = 0.05, write_s: float = 0.005, check_invariants: bool = False):
        self.settings = settings
        if rule not in ("kcl-mp", "java"):
            raise ValueError(f"rule {rule!r}: expected 'kcl-mp' or 'java'")
        self.ours = rule == "kcl-mp"
        self.watch_s = settings.watch_interval_s if self.ours else settings.take_interval_s
        self.rng = random.Random(seed)
        self.table = {f"shardId-{i:012d}": Lease(f"shardId-{i:012d}") for i in range(leases)}
        self.workers: dict[str, SimWorker] = {}
        self.now = 0.0
        self.scan_latency_s = scan_latency_s
        self.write_s = write_s
        self.check_invariants = check_invariants
        self._events: list[tuple[float, int, str, str, object]] = []
        self._seq = 0
        self.moves: list[tuple[float, str]] = []  # (time, key) of every ownership change

    # -- set-up --------------------------------------------------------------------------

    def start(self, names: Iterable[str], at: float, jitter_s: float = 0.5) -> None:
        for name in names:
            worker = SimWorker(name, random.Random(self.rng.random()))
            self.workers[name] = worker
            self._push(at + self.rng.uniform(0, jitter_s), "scan", name)
            self._push(at + self.rng.uniform(0, self.settings.renew_interval_s), "renew", name)

    def assign(self, owners: dict[str, str]) -> None:
        """Give leases to (already started) workers directly, as a settled fleet would hold them."""
        for key, owner in owners.items():
            lease = self.table[key]
            self.table[key] = lease.with_(owner=owner, counter=lease.counter + 1)
            self.workers[owner].held[key] = lease.counter + 1

    def crash(self, names: Iterable[str]) -> None:
        for name in names:
            self.workers[name].alive = False

    # -- the clock -----------------------------------------------------------------------

    def _push(self, at: float, kind: str, name: str, payload: object = None) -> None:
        self._seq += 1
        heapq.heappush(self._events, (at, self._seq, kind, name, payload))

    def run_until(self, until: float) -> None:
        for _ in range(50_000_000):  # bounded
            if not self._events or self._events[0][0] > until:
                break
            at, _, kind, name, payload = heapq.heappop(self._events)
            self.now = at
            worker = self.workers[name]
            if not worker.alive:
                continue
            getattr(self, f"_{kind}")(worker, payload)
            if self.check_invariants:
                self.check()
        self.now = until

    def _renew(self, worker: SimWorker, _: object) -> None:
        for key, counter in list(worker.held.items()):
            lease = self.table.get(key)
            if lease is None or lease.counter != counter or lease.owner != worker.name:
                del worker.held[key]  # lost: someone took it
                continue
            self.table[key] = lease.with_(counter=counter + 1)
            worker.held[key] = counter + 1
        self._push(self.now + self.settings.renew_interval_s, "renew", worker.name)

    def _scan(self, worker: SimWorker, _: object) -> None:
        snapshot = dict(self.table)
        worker.observations = balance.observe(worker.observations, snapshot.values(), self.now)
        may_steal = self.now - worker.last_steal_at >= self.settings.take_interval_s - 1e-6
        if self.ours:
            plan = balance.plan_leases(worker.name, snapshot, worker.observations, self.now, self.settings,
                                       worker.rng, may_steal=may_steal)
        else:  # Java scans only every take interval, so it may always steal
            plan = balance.plan_leases_java(worker.name, snapshot, worker.observations, self.now, self.settings,
                                            worker.rng)
        if may_steal and not plan.deferred:  # as the coordinator: deferred steals try again next scan
            worker.last_steal_at = self.now
        for i, key in enumerate(plan.take + plan.steal):
            self._push(self.now + self.scan_latency_s + i * self.write_s, "write", worker.name,
                       (key, snapshot[key].counter))
        self._push(self.now + self.watch_s, "scan", worker.name)

    def _write(self, worker: SimWorker, write: object) -> None:
        key, seen = cast("tuple[str, int]", write)
        lease = self.table.get(key)
        if lease is None or lease.counter != seen:
            return  # the conditional write lost
        self.table[key] = lease.with_(owner=worker.name, counter=seen + 1)
        worker.held[key] = seen + 1
        if lease.owner != worker.name:
            self.moves.append((self.now, key))

    # -- what the tests and the benchmark ask -----------------------------------------

    def check(self) -> None:
        for key, lease in self.table.items():
            holders = [w.name for w in self.workers.values() if w.alive and w.held.get(key) == lease.counter]
            if len(holders) > 1 or (holders and holders[0] != lease.owner):
                raise InvariantBroken(f"{key} at counter {lease.counter}: held by {holders}, owner {lease.owner}")

    def counts(self) -> dict[str, int]:
        live = {name: 0 for name, w in self.workers.items() if w.alive}
        for lease in self.table.values():
            if lease.owner in live:
                live[lease.owner] += 1
        return live

    def balanced(self) -> bool:
        counts = self.counts()
        owned = sum(counts.values()) == len(self.table)
        return owned and (not counts or max(counts.values()) - min(counts.values()) <= 1)

    def settle(self, since: float, max_cycles: float, quiet_cycles: float = 5.0) -> Result:
        """Run until balanced with no move for ``quiet_cycles`` take intervals, or ``max_cycles``."""
        take_s = self.settings.take_interval_s
        deadline = since + max_cycles * take_s
        settled = False
        while self.now < deadline:
            self.run_until(min(deadline, self.now + take_s))
            last_move = max((t for t, _ in self.moves if t >= since), default=since)
            if self.balanced() and self.now - last_move >= quiet_cycles * take_s:
                settled = True
                break
        after = [key for t, key in self.moves if t >= since]
        last_move = max((t for t, _ in self.moves if t >= since), default=since)
        counts = self.counts().values()
        per_key: dict[str, int] = {}
        for key in after:
            per_key[key] = per_key.get(key, 0) + 1
        return Result(
            settled=settled,
            cycles=(last_move - since) / take_s if settled else max_cycles,
            moves=len(after),
            repeat_moves=sum(1 for n in per_key.values() if n > 1),
            spread=(max(counts) - min(counts)) if counts else 0,
        )

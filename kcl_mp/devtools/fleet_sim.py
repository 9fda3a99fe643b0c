"""A fleet on a virtual clock: an in-memory lease table and workers that renew, scan and
take exactly as the supervisor does, with no sleeping and no I/O.

Used by the property tests (tests/unit/test_balance.py, test_fleet_sim_3x.py) and the
balance benchmark (bench/balance_sim.py) to compare kcl-mp's rule with the Java KCL's, and
the 2.x rules with a 3.x fleet (``LeaderFleet``, below). Each worker runs
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

from kcl_mp.config import LEASE_EPSILON_MS, LeaseSettings
from kcl_mp.devtools import java_rule
from kcl_mp.fleet import assignment
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
    back_and_forth: int = 0  # leases that went back to a worker they had left
    rounds: int = 0  # 3.x: assignment rounds from the event to the last one that moved a lease


class _Sim:
    """What both simulations share: the event queue, the table, the workers."""

    table: dict[str, Lease]
    workers: dict[str, SimWorker]
    _events: list[tuple[float, int, str, str, object]]
    _seq: int

    def _push(self, at: float, kind: str, name: str, payload: object = None) -> None:
        self._seq += 1
        heapq.heappush(self._events, (at, self._seq, kind, name, payload))

    def assign(self, owners: dict[str, str]) -> None:
        """Give leases to (already started) workers directly, as a settled fleet would hold them."""
        for key, owner in owners.items():
            lease = self.table[key]
            self.table[key] = lease.with_(owner=owner, counter=lease.counter + 1)
            self.workers[owner].held[key] = lease.counter + 1

    def crash(self, names: Iterable[str]) -> None:
        for name in names:
            self.workers[name].alive = False

    def counts(self) -> dict[str, int]:
        live = {name: 0 for name, w in self.workers.items() if w.alive}
        for lease in self.table.values():
            if lease.owner in live:
                live[lease.owner] += 1
        return live


class TakerFleet(_Sim):
    """A fleet of workers that take and steal by a 2.x rule (kcl-mp's or the Java one, ``rule``)."""

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

    # -- the clock -----------------------------------------------------------------------

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
            plan = java_rule.plan_leases_java(worker.name, snapshot, worker.observations, self.now, self.settings,
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


def _back_and_forth(owners: dict[str, list[str]]) -> int:
    return sum(1 for seq in owners.values() if len(seq) != len(set(seq)))


class LeaderFleet(_Sim):
    """A KCL 3.x fleet of kcl-mp workers: one leader runs ``assignment.plan_assignment``
    every leaseAssignmentIntervalMillis (2 x failoverTimeMillis), the first at once; workers
    publish their metrics 2 s after start and then every 30 s (no CPU metric: balance by
    load), so a cold start's first round sees nobody, as in Java; they find the leases assigned to them
    every interval / 2 - epsilon (Java's LeaseDiscoverer) and renew them every renew
    interval. A handoff sets ``checkpoint_owner``; the old owner gives the lease up at its
    next renewal (it checkpoints), and the new owner starts at its next discovery. The
    leader hands over no lease its owner has not renewed yet (``assignment.settling``). The
    leader is the first worker started (it wins the lock); when it dies the first live
    worker by name takes over after the lock's 120 s. Leader writes are conditioned on the
    owner it read, ``scan_latency_s`` after its scan, one every ``write_s``.
    """

    METRICS_FIRST_S = 2.0  # Java: first report after 2 x inMemoryWorkerMetricsCaptureFrequencyMillis
    METRICS_S = 30.0
    METRICS_LIVE_S = 60.0
    LOCK_S = 120.0

    def __init__(self, leases: int, settings: LeaseSettings, seed: int = 0, scan_latency_s: float = 0.05,
                 write_s: float = 0.0005, assignment_settings: assignment.AssignmentSettings | None = None):
        self.settings = settings
        self.assignment = assignment_settings or assignment.AssignmentSettings(
            max_leases_for_worker=settings.max_leases_for_worker)
        self.interval_s = 2 * settings.failover_time_ms / 1000.0
        self.discover_s = self.interval_s / 2 - LEASE_EPSILON_MS / 1000.0
        self.rng = random.Random(seed)
        self.table = {f"shardId-{i:012d}": Lease(f"shardId-{i:012d}") for i in range(leases)}
        self.workers: dict[str, SimWorker] = {}
        self.metrics_at: dict[str, float] = {}
        self.leader: str | None = None
        self._leader_since = math.inf
        self.observations: dict[str, balance.Observation] = {}
        self.written: dict[str, int] = {}  # leases moved, not yet renewed by their new owner
        self.left: dict[str, set[str]] = {}  # lease -> workers the leader handed it away from
        self.now = 0.0
        self.scan_latency_s, self.write_s = scan_latency_s, write_s
        self._events: list[tuple[float, int, str, str, object]] = []
        self._seq = 0
        self.moves: list[tuple[float, str]] = []
        self.owners: dict[str, list[str]] = {}  # key -> owners in order (after the event mark)
        self.rounds: list[tuple[float, int]] = []  # (time, writes) of every leader round

    def start(self, names: Iterable[str], at: float, jitter_s: float = 0.5) -> None:
        before = self.leader
        for name in names:
            begin = at + self.rng.uniform(0, jitter_s)
            self.workers[name] = SimWorker(name, random.Random(self.rng.random()))
            self._push(begin + self.METRICS_FIRST_S, "publish", name)
            self._push(begin + self.rng.uniform(0, self.discover_s), "discover", name)
            self._push(begin + self.rng.uniform(0, self.settings.renew_interval_s), "renew", name)
            if self.leader is None or (before is None and begin < self._leader_since):
                self.leader, self._leader_since = name, begin  # the first to start wins the lock
        if before is None and self.leader is not None:
            self._push(self._leader_since, "round", self.leader)  # LAM's first run: at once

    def crash(self, names: Iterable[str]) -> None:
        super().crash(names)
        if self.leader is not None and not self.workers[self.leader].alive:
            heir = min(n for n, w in self.workers.items() if w.alive)
            self.leader, self._leader_since = heir, self.now + self.LOCK_S
            self._push(self._leader_since, "round", heir)

    def mark(self) -> None:
        """Start counting moves from now (owners as they are)."""
        self.owners = {key: [lease.owner] if lease.owner else [] for key, lease in self.table.items()}

    def run_until(self, until: float) -> None:
        for _ in range(50_000_000):  # bounded
            if not self._events or self._events[0][0] > until:
                break
            at, _, kind, name, payload = heapq.heappop(self._events)
            self.now = at
            if kind != "write" and not self.workers[name].alive:
                continue
            getattr(self, f"_{kind}")(self.workers.get(name), payload)
        self.now = until

    def _publish(self, worker: SimWorker, _: object) -> None:
        self.metrics_at[worker.name] = self.now
        self._push(self.now + self.METRICS_S, "publish", worker.name)

    def _discover(self, worker: SimWorker, _: object) -> None:
        for key, lease in self.table.items():
            if lease.owner == worker.name and lease.checkpoint_owner is None and key not in worker.held:
                worker.held[key] = lease.counter
        self._push(self.now + self.discover_s, "discover", worker.name)

    def _renew(self, worker: SimWorker, _: object) -> None:
        for key, counter in list(worker.held.items()):
            lease = self.table[key]
            if lease.checkpoint_owner == worker.name:  # handed over: checkpoint, give it up
                self.table[key] = lease.with_(checkpoint_owner=None, counter=lease.counter + 1)
                del worker.held[key]
            elif lease.owner != worker.name or lease.counter != counter:
                del worker.held[key]  # assigned away
            else:
                self.table[key] = lease.with_(counter=counter + 1)
                worker.held[key] = counter + 1
        self._push(self.now + self.settings.renew_interval_s, "renew", worker.name)

    def _round(self, worker: SimWorker, _: object) -> None:
        if worker.name != self.leader:
            return
        snapshot = dict(self.table)
        self.observations = balance.observe(self.observations, snapshot.values(), self.now)
        loads = assignment.lease_loads(snapshot.values(), self.observations, self.now,
                                       self.settings.failover_time_ms / 1000.0)
        live = [assignment.WorkerLoad(n) for n, at in sorted(self.metrics_at.items())
                if self.now - at <= self.METRICS_LIVE_S]
        unstarted = assignment.settling(self.written, snapshot)
        plan = assignment.plan_assignment(loads, live, self.assignment, self.rng, unstarted, self.left)
        for move in plan.handoffs:
            self.left.setdefault(move.key, set()).add(move.owner or "")
        self.written = {k: c for k, c in self.written.items() if k in unstarted}
        self.written.update(assignment.written_counters(plan.moves, snapshot))
        self.rounds.append((self.now, len(plan.moves)))
        for i, move in enumerate(plan.moves):
            self._push(self.now + self.scan_latency_s + i * self.write_s, "write", worker.name, move)
        self._push(self.now + self.interval_s, "round", worker.name)

    def _write(self, _: object, move: object) -> None:
        m: assignment.Move = move  # type: ignore[assignment]
        lease = self.table[m.key]
        if lease.owner != m.owner or (m.handoff and lease.checkpoint_owner is not None):
            return  # the conditional write lost
        if m.handoff:
            self.table[m.key] = lease.with_(owner=m.to, checkpoint_owner=m.owner)
        else:
            self.table[m.key] = lease.with_(owner=m.to, checkpoint_owner=None, counter=lease.counter + 1)
        self.moves.append((self.now, m.key))
        self.owners.setdefault(m.key, []).append(m.to)

    def balanced(self) -> bool:
        """Every lease owned by a live worker that processes it, no handoff under way, spread <= 1."""
        counts = self.counts()
        processed = all(lease.checkpoint_owner is None and lease.owner in counts
                        and key in self.workers[lease.owner].held for key, lease in self.table.items())
        return processed and (not counts or max(counts.values()) - min(counts.values()) <= 1)

    def settle(self, since: float, max_rounds: int, quiet_rounds: int = 3) -> Result:
        """Run until balanced with no move for ``quiet_rounds`` rounds, or ``max_rounds``."""
        deadline = since + max_rounds * self.interval_s + self.LOCK_S
        settled = False
        while self.now < deadline:
            self.run_until(min(deadline, self.now + self.interval_s))
            last_move = max((t for t, _ in self.moves if t >= since), default=since)
            if self.balanced() and self.now - last_move >= quiet_rounds * self.interval_s:
                settled = True
                break
        after = [key for t, key in self.moves if t >= since]
        per_key: dict[str, int] = {}
        for key in after:
            per_key[key] = per_key.get(key, 0) + 1
        moving = [t for t, writes in self.rounds if t >= since and writes]
        rounds = sum(1 for t, _ in self.rounds if since <= t <= moving[-1]) if moving else 0
        last_move = max((t for t, _ in self.moves if t >= since), default=since)
        counts = self.counts().values()
        return Result(
            settled=settled,
            cycles=(last_move - since) / self.interval_s if settled else float(max_rounds),
            moves=len(after),
            repeat_moves=sum(1 for n in per_key.values() if n > 1),
            spread=(max(counts) - min(counts)) if counts else 0,
            back_and_forth=_back_and_forth(self.owners),
            rounds=rounds,
        )

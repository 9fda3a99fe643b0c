"""The lease coordinator: the supervisor's side of the lease table.

It renews what this worker holds (all at once: ``renewer``), scans the table to take and
steal (``balance`` decides, this module writes), runs the KCL 3.x graceful handoff in both
directions (``handoffs``), and keeps the table in step with the stream's shards (a ``ShardSyncer`` it
holds). It never touches processes: it reports what changed and the supervisor starts,
stops or warns the shards' drivers accordingly.

A steal is a handoff (``handoffs`` tells the exchange and its bounds), so a planned rebalance
re-delivers nothing; with isGracefulLeaseHandoffEnabled false it is a plain take, as in KCL 2.x.
Which leases to take or steal, and a 3.x follower's rescue, are the ``taker``'s.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kcl_mp.config import Config
from kcl_mp.config.settings import StreamSettings
from kcl_mp.errors import DependencyError
from kcl_mp.fleet.discovery import OwnerIndexDiscovery
from kcl_mp.fleet.leader import UNREADABLE
from kcl_mp.fleet.role import FleetRole
from kcl_mp.leases import cost, shard_sync
from kcl_mp.leases.lease import Lease
from kcl_mp.leases.multi_stream import split_key
from kcl_mp.leases.renewer import Renewer
from kcl_mp.leases.shard_syncer import ShardSyncer, TableView
from kcl_mp.leases.stream_syncers import StreamSyncers
from kcl_mp.leases.table import LeaseTable
from kcl_mp.leases.throughput import LeaseThroughput, renewal_attributes
from kcl_mp.logs import LeaseEvent, ShardLog, lease_event
from kcl_mp.metrics.catalogue import Recorder
from kcl_mp.sequence import SHARD_END, ExtendedSequenceNumber
from kcl_mp.supervisor.handoffs import Handoffs, Incoming
from kcl_mp.supervisor.taker import Taker

GIVE_UP_COOLDOWN_S = 60.0


@dataclass
class Held:
    """A lease this worker holds, as last written, and when it was last renewed: the time the
    renewal (or take) was SENT, since others start counting only once it has landed, after
    that (``fencing`` builds on this)."""

    lease: Lease
    renewed_at: float


@dataclass(frozen=True)
class Renewal:
    """What one renewal round found."""

    lost: tuple[str, ...] = ()  # no longer ours (the fence step then tells their processors leaseLost)
    handoffs: tuple[str, ...] = ()  # another worker asked for them: shutdownRequested, then finish
    acquired: tuple[str, ...] = ()  # handed over to this worker: start their processors
    became_leader: bool = False  # this host now leads the 3.x fleet: scan at once (its first round)


@dataclass
class LeaseCoordinator:
    config: Config
    table: LeaseTable
    kinesis: Any
    log: ShardLog
    clock: Callable[[], float]
    rng: random.Random
    held: dict[str, Held] = field(default_factory=dict)
    metrics: Recorder = field(default_factory=lambda: Recorder(enabled=False))
    renewals: LeaseTable | None = None  # through the renewals' own client (renewer.renewal_table); None: table
    wall: Callable[[], float] = time.time

    def __post_init__(self) -> None:
        self.fleet = FleetRole(self.config, self.table.client, self.table, self.log, self.clock, self.wall, self.rng,
                             self.metrics)
        self.throughput = LeaseThroughput(int(self.config.lease.renew_interval_s * 1000))
        self.cost = cost.LeaseCost()  # fed by the shards' usage samples (``Shards.record_cost``)
        self.renewer = Renewer(self.renewals or self.table, self.config.lease, self.me, self.clock, random.Random(),
                               self._renewal_attributes)
        self.discovery = OwnerIndexDiscovery(self.table, self.me, self.log)
        self.scanned_all = False  # the last scan read the whole table (a 3.x follower reads its own leases)
        self.view = TableView()
        self.sync: ShardSyncer | StreamSyncers = (StreamSyncers if self.config.streams else ShardSyncer)(
            self.config, self.table, self.kinesis, self.log, self.view)
        self.draining: frozenset[str] = frozenset()  # streams that left the list: nobody takes or assigns them
        self.handoffs = Handoffs(self.config, self.table, self.log, self.clock, self.metrics)
        self.taker = Taker(self.config, self.log, self.clock, self.rng, self.metrics, self.handoffs, self.view,
                           self._take)

    def record_bytes(self, key: str, nbytes: int) -> None:
        """Bytes a shard's driver handed its processor: the lease's throughputKBps (KCL 3.x)."""
        self.throughput.record(key, nbytes, int(self.wall() * 1000))

    def _renewal_attributes(self, key: str) -> dict[str, Any]:
        return {**renewal_attributes(self.throughput.kbps(key, int(self.wall() * 1000))),
                **cost.renewal_attributes(self.cost.percent(key))}

    def join_fleet(self) -> None:
        """Start-up: settle the fleet's client version (clientVersionConfig), take up its role."""
        self.fleet.join()

    @property
    def me(self) -> str:
        return self.config.worker_id

    @property
    def last_seen(self) -> dict[str, Lease]:
        """The last scan, plus this host's own writes since (shared with the shard syncer)."""
        return self.view.last_seen

    @last_seen.setter
    def last_seen(self, leases: dict[str, Lease]) -> None:
        self.view.last_seen = leases

    def waiting_for(self, key: str) -> list[str]:
        """The parents a held lease still waits for (their leases exist and are not at SHARD_END)."""
        held = self.held.get(key)
        return shard_sync.unfinished_parents(held.lease, self.last_seen) if held else []

    # -- start-up ---------------------------------------------------------------------

    def adopt_own_leases(self, leases: list[Lease], why: str = "from an earlier run of this worker id",
                         taken_at: Mapping[str, float] | None = None) -> None:
        """Pick up where an earlier run of this worker id left off (as Java does), or what a
        3.x leader assigned to this worker. ``taken_at``: the leases this host's own leader
        round just took for it, each with when the take was sent: that write set the owner
        and moved the counter, as a renewal does, so they are held as written (Java's
        DynamoDBLeaseDiscoverer hands an assigned lease to the renewer without a write)."""
        now = self.clock()
        taken_at = taken_at or {}
        for lease in leases:
            if lease.is_shard_end:
                continue
            if lease.checkpoint_owner == self.me and lease.owner != self.me:
                if self.table.handoff_finish(lease.key, self.me):  # its processor is gone already
                    self.log.info("finished the handoff of %s to %s left by an earlier run", lease.key, lease.owner)
            elif lease.owner == self.me and lease.checkpoint_owner:
                self.handoffs.incoming[lease.key] = Incoming(lease, now, now)
            elif lease.owner == self.me:
                renewed = lease if lease.key in taken_at else self.table.renew(lease, self.me)
                if renewed is not None:
                    self.held[lease.key] = Held(renewed, taken_at.get(lease.key, now))
                    self.log.info("kept lease %s %s", lease.key, why, extra=lease_event(LeaseEvent.KEPT, lease.key))

    # -- renewing ---------------------------------------------------------------------

    def renew(self) -> Renewal:
        """One round: every held lease renewed at once (``renewer``), then what came of each."""
        became_leader = self.fleet.tick()
        lost: list[str] = []
        handoffs: list[str] = []
        failover_s = self.config.lease.failover_time_ms / 1000.0
        started = self.clock()
        for key, held in self.held.items():
            if started - held.renewed_at > failover_s / 2:
                self.log.warning("lease %s renewed late: %.1f s since its last renewal (others may take it after "
                                 "%.1f s)", key, started - held.renewed_at, failover_s)
        due = [(key, held.lease, held.renewed_at) for key, held in self.held.items()]
        for outcome in self.renewer.renew_all(due, started):
            key, held, renewed = outcome.key, self.held[outcome.key], outcome.lease
            if outcome.error is not None:
                self.metrics.add("lease_renewals", 0)
                if outcome.ended_at - held.renewed_at < failover_s:
                    self.log.warning("renewing lease %s failed (%s); still held for %.1f s",
                                     key, outcome.error, failover_s - (outcome.ended_at - held.renewed_at))
                    continue
                # A fault this host recovers from by itself (it was paused, or DynamoDB did not
                # answer): the lease is checked again below, and another host may have it by now.
                self.log.warning("lease %s expired locally: no renewal for %.1f s (%s); its processor stops "
                                 "delivering until a renewal succeeds", key, outcome.ended_at - held.renewed_at,
                                 outcome.error)
            if renewed is None:
                self.drop(key, "taken by another worker or not renewable")
                lost.append(key)
                continue
            self.metrics.add("lease_renewals", 1)
            self.held[key] = Held(renewed, outcome.sent_at)
            if renewed.owner != self.me and self.handoffs.asked_of_me(key, renewed.owner, outcome.sent_at):
                handoffs.append(key)
        for key in self.handoffs.overdue(self.held):
            self.finish_handoff(key)
            lost.append(key)
        arrived = self.handoffs.check_incoming(self._take)
        for key, handed in arrived.items():
            if handed is not None:
                self.held[key] = Held(handed.lease, handed.renewed_at)
        acquired = tuple(arrived)
        self.metrics.add("renew_time", self.clock() - started)
        self.metrics.add("leases_held", len(self.held))
        self.metrics.add("leases_lost", 0)  # a sample every round, as Java's; each loss adds 1 (drop)
        return Renewal(tuple(lost), tuple(handoffs), acquired, became_leader)

    # -- taking and stealing ----------------------------------------------------------

    def scan_interval_s(self) -> float:
        """How long until the next scan: the watch interval in a 2.x role; the renewal interval in
        a 3.x role, where the leader times every lease's expiry by its scans and a follower finds
        what it was assigned through the owner index (one Query) or, while it rescues, scans
        (fleet/role.py's docstring: a dead worker's shards wait about failoverTimeMillis, not a round)."""
        if self.fleet.role.takes:
            return self.config.lease.watch_interval_s
        return self.config.lease.renew_interval_s

    def scan(self) -> tuple[str, ...]:
        """One look at the table: take expired leases; steal at most once per take interval.
        In a 3.x role (``fleet.role``): take nothing; as the leader assign; start what the leader
        assigned here (this host's own assignments at once)."""
        self.fleet.follow()
        if self._index_follower():
            return self._discover_by_index()
        try:
            leases = {lease.key: lease for lease in self.table.list_leases()}
        except DependencyError as exc:
            self.log.warning("lease taker skipped a round: %s", exc)
            return ()
        self.last_seen = leases
        self.scanned_all = True
        for key in [key for key in self.held if key not in leases or leases[key].holder != self.me]:
            holder = leases[key].holder if key in leases else None
            self.drop(key, f"the lease table shows {holder or 'nobody'} holding it")
        if self.draining:  # held ones are kept (renewed until drained: stream_changes), others left alone
            leases = {key: lease for key, lease in leases.items() if not self.is_draining(key)}
        if not self.fleet.role.takes:
            before = set(self.held)
            sent_at = self.clock()  # no later than any write of the round
            written = self.fleet.lead(leases)
            leases.update(written)
            if self.fleet.rescues():
                self._rescue(leases)
            taken = {key: sent_at for key, lease in written.items()
                     if lease.owner == self.me and not lease.checkpoint_owner}
            self.adopt_own_leases(self.fleet.assigned_here(leases.values(), [*self.held, *self.handoffs.incoming]),
                                  "assigned by the leader", taken)
            return tuple(key for key in self.held if key not in before)
        self.fleet.monitor_flip(leases)
        return self.taker.round(leases, lambda key: self.held[key].lease)

    def _rescue(self, leases: Mapping[str, Lease]) -> None:
        """A 3.x follower's rescue (``taker``), told who should have reassigned what lies abandoned."""
        lock = self.fleet.election.last_read if self.fleet.election else None
        leader = ("nobody (the leader lock cannot be read)" if lock is UNREADABLE else
                  f"{lock.owner}, whose lock lasts {lock.lease_duration_ms / 1000:.0f} s," if lock else "the leader")
        self.taker.rescue(leases, self.fleet.rescue_after_s, leader)

    def _index_follower(self) -> bool:
        """A 3.x follower whose lease table has an ACTIVE lease-owner index (``discovery``), and
        that does not rescue (``FleetRole.rescues``: then it scans the whole table)."""
        return (not self.fleet.role.takes and not self.fleet.is_leader() and not self.fleet.rescues()
                and self.discovery.usable())

    def _discover_by_index(self) -> tuple[str, ...]:
        """The leases the leader assigned here, through the index; losses show in the renewals."""
        before = set(self.held)
        try:
            found = self.discovery.discover({*self.held, *self.handoffs.incoming}, self.last_seen)
        except DependencyError as exc:
            self.log.warning("finding the leases assigned to this worker failed: %s", exc)
            return ()
        self.scanned_all = False
        self.adopt_own_leases(found, "assigned by the leader")
        return tuple(key for key in self.held if key not in before)

    # -- streams that change (a multi-stream application: supervisor.stream_changes) --------

    def streams_changed(self, streams: tuple[StreamSettings, ...], draining: frozenset[str]) -> None:
        """The streams this host reads or drains now: the leases the table shows it (``not_a_lease``),
        and among them those of ``draining`` streams, which it neither takes nor assigns."""
        names = frozenset(stream.name for stream in streams)
        self.table.streams = names
        if self.renewals is not None:
            self.renewals.streams = names
        self.draining = draining
        assert isinstance(self.sync, StreamSyncers)  # only a multi-stream application changes streams
        self.sync.streams_changed(tuple(stream for stream in streams if stream.name not in draining))

    def is_draining(self, key: str) -> bool:
        split = split_key(key)
        return split is not None and split[0].name in self.draining

    def release(self, key: str) -> bool:
        """Let a held lease go at once (its stream was drained): False when the write failed
        (it then expires instead) or found it another worker's."""
        self.held.pop(key, None)
        self.throughput.drop(key)
        try:
            released = self.table.release(key, self.me)
        except DependencyError as exc:
            self.log.warning("releasing lease %s failed (%s); it will expire instead", key, exc)
            return False
        if released:
            self.metrics.add("leases_released", 1)
        return released

    def delete_stream(self, name: str) -> list[str]:
        """Delete every lease of stream ``name`` (a former stream whose wait has passed), whoever
        holds it (Java's deletion too: its holders' processors then lose them); the keys deleted."""
        former = LeaseTable(self.table.client, self.table.name, {name})
        return [lease.key for lease in former.list_leases() if former.delete(lease.key)]

    def runs_shard_sync(self) -> bool:
        """Whether this host runs the periodic shard sync: every host in a 2.x role (kcl-mp's
        leaderless audit), only the leader in a 3.x role (Java's PeriodicShardSyncManager
        asks the leader decider), once a scan has shown it the whole table."""
        if self.fleet.role.takes:
            return True
        return self.fleet.is_leader() and self.scanned_all

    def _take(self, lease: Lease, what: str, event: LeaseEvent = LeaseEvent.TAKEN) -> bool:
        sent_at = self.clock()
        try:
            taken = self.table.take(lease, self.me)
        except DependencyError as exc:
            self.log.warning("taking lease %s failed: %s", lease.key, exc)
            return False
        if taken is None:
            self.log.info("lease %s moved before it could be taken", lease.key)
            return False
        self.log.info("%s, checkpoint %s", what, taken.checkpoint,
                      extra=lease_event(event, lease.key, **{"from": lease.holder}))
        self.held[lease.key] = Held(taken, sent_at)
        self.metrics.add("leases_taken", 1)
        return True

    # -- giving leases up -------------------------------------------------------------

    def finish_handoff(self, key: str) -> None:
        """The processor has made its last checkpoint: let the new owner start."""
        self.held.pop(key, None)
        self.handoffs.finish(key)

    def give_up(self, key: str) -> float:
        """Release a lease whose processor keeps failing here, and leave it alone for a while
        (two take intervals, at least a minute) so another host takes it. The cool-down, s.
        The write says so in the lease (``table.give_up``), so a 3.x leader, this host
        included, assigns it to another worker meanwhile, or leaves it unowned."""
        cooldown = max(GIVE_UP_COOLDOWN_S, 2 * self.config.lease.take_interval_s)
        self.taker.avoid[key] = self.clock() + cooldown
        self.held.pop(key, None)
        self.metrics.add("leases_released", 1)
        try:
            self.table.give_up(key, self.me, int((self.wall() + cooldown) * 1000))
        except DependencyError as exc:
            self.log.warning("releasing lease %s failed (%s); it will expire instead", key, exc)
        return cooldown

    def drop(self, key: str, why: str) -> None:
        """Forget a lease that is no longer ours (no write: someone else has it)."""
        self.throughput.drop(key)
        self.cost.drop(key)
        if self.held.pop(key, None) is not None:
            self.metrics.add("leases_lost", 1)
            self.log.warning("lost lease %s: %s", key, why, extra=lease_event(LeaseEvent.LOST, key))
        self.handoffs.handing_off.pop(key, None)

    def shard_ended(self, key: str) -> None:
        """Its processor checkpointed SHARD_END: stop renewing (finished leases are neither
        counted nor taken), and let this host's waiting children see it at once."""
        held = self.held.pop(key, None)
        seen = self.last_seen.get(key) or (held.lease if held else None)
        if seen is not None:
            self.last_seen[key] = seen.with_(checkpoint=ExtendedSequenceNumber(SHARD_END))

    def release_all(self) -> list[str]:
        """On shutdown: release held leases, finish handoffs out, cancel handoffs in."""
        released = []
        for key in list(self.held):
            try:
                if key in self.handoffs.handing_off:
                    self.finish_handoff(key)
                elif self.table.release(key, self.me):
                    released.append(key)
                    self.metrics.add("leases_released", 1)
            except DependencyError as exc:
                self.log.warning("releasing lease %s failed (%s); it will expire instead", key, exc)
        self.handoffs.cancel_all()
        self.held.clear()
        self.fleet.release()
        return released

    def refresh(self, key: str) -> None:
        """A restarted worker resumes from the checkpoint its predecessor wrote."""
        try:
            current = self.table.get(key)
        except DependencyError:
            return
        if key not in self.held:
            return
        if current is not None and current.holder == self.me:
            self.held[key] = Held(current, self.held[key].renewed_at)
        else:
            self.drop(key, f"the lease table shows {current.holder if current else 'nobody'} holding it")

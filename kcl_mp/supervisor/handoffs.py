"""The KCL 3.x graceful handoff's writes and bookkeeping, both directions, for the lease
coordinator (``leases.handoff`` judges the incoming side).

A steal is a handoff, so a planned rebalance re-delivers nothing::

    thief: handoff_start          leaseOwner = thief, checkpointOwner = owner
    owner: next renewal sees it   -> its processor gets shutdownRequested, checkpoints
    owner: handoff_finish         REMOVE checkpointOwner, counter + 1
    thief: next renewal sees it   -> starts its processor from that checkpoint

Only leases whose owner has shown it processes them are stolen (``balance.is_started``):
the Java KCL 3.1.3 never answers a handoff asked while its shard consumer is still
waiting on parent shards. A lease at SHARD_END is never asked for nor taken (the table's
conditions refuse it too); a handoff whose lease reaches SHARD_END meanwhile is dropped.

Bounds: the owner finishes at the latest gracefulLeaseHandoffTimeoutMillis after it saw
the request (a processor that does not answer loses its lease the hard way); the thief
takes the lease by force once that timeout has passed, as soon as the owner stopped
renewing for failoverTimeMillis (it died mid-handoff), or, for a lease never seen
checkpointing under that owner, once failoverTimeMillis has passed since the request and
the owner renewed it twice meanwhile, without a checkpoint or the handover (it saw the
request and is not answering: what a Java worker whose consumer had not started does).
With isGracefulLeaseHandoffEnabled false, a steal is a plain take, as in KCL 2.x.

Out: another worker asked for a lease this one holds (a renewal found it the owner): the
processor is asked for a last checkpoint, then ``finish`` clears ``checkpointOwner``, or the
handoff is overdue after gracefulLeaseHandoffTimeoutMillis and finished without it.
In: this worker asked for a lease (``ask``) or a leader assigned it one still held by another;
each renewal round reads it and judges (``check_incoming``) until it is handed over, taken by
force, or gone.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from dataclasses import dataclass, field

from kcl_mp.config import Config
from kcl_mp.errors import DependencyError
from kcl_mp.leases.handoff import Verdict, judge_incoming
from kcl_mp.leases.lease import Lease
from kcl_mp.leases.table import LeaseTable
from kcl_mp.logs import LeaseEvent, ShardLog, lease_event
from kcl_mp.metrics.catalogue import Recorder


@dataclass
class Incoming:
    """A lease being handed to this worker: waiting for its old owner's last checkpoint."""

    lease: Lease
    asked_at: float
    changed_at: float  # when its counter last moved (the old owner renewing)
    asked: Lease | None = None  # as the request left it (None: asked by an earlier run)
    seen_checkpointing: bool = True  # its checkpoint had moved under the old owner before the ask


@dataclass(frozen=True)
class HandedOver:
    """A lease its old owner let go: held as its last write left it, renewed as of ``renewed_at``."""

    lease: Lease
    renewed_at: float


@dataclass
class Handoffs:
    config: Config
    table: LeaseTable
    log: ShardLog
    clock: Callable[[], float]
    metrics: Recorder
    incoming: dict[str, Incoming] = field(default_factory=dict)
    handing_off: dict[str, float] = field(default_factory=dict)  # key -> when the request was seen

    @property
    def me(self) -> str:
        return self.config.worker_id

    # -- out ----------------------------------------------------------------------------

    def asked_of_me(self, key: str, thief: str | None, seen_at: float) -> bool:
        """A renewal found ``thief`` the lease's owner: True the first time (ask the processor)."""
        if key in self.handing_off:
            return False
        self.handing_off[key] = seen_at
        self.log.info("lease %s: %s asked for it; stopping its processor for a last checkpoint", key, thief)
        return True

    def overdue(self, held: Container[str]) -> list[str]:
        """The handoffs out whose processor did not finish within gracefulLeaseHandoffTimeoutMillis."""
        timeout_s = self.config.lease.handoff_timeout_s
        late = [key for key, asked_at in self.handing_off.items()
                if key in held and self.clock() - asked_at > timeout_s]
        for key in late:
            self.log.warning("lease %s: the processor did not finish within gracefulLeaseHandoffTimeoutMillis "
                             "(%.0f s); handing the lease over without its last checkpoint", key, timeout_s)
        return late

    def finish(self, key: str) -> None:
        """The processor has made its last checkpoint (or will not): let the new owner start."""
        self.handing_off.pop(key, None)
        try:
            if self.table.handoff_finish(key, self.me):
                self.log.info("handed lease %s over", key, extra=lease_event(LeaseEvent.HANDED_OFF, key))
        except DependencyError as exc:
            self.log.warning("finishing the handoff of %s failed (%s); the new owner will take it after "
                             "gracefulLeaseHandoffTimeoutMillis", key, exc)

    # -- in -----------------------------------------------------------------------------

    def ask(self, lease: Lease, seen_checkpointing: bool) -> bool:
        """Ask the owner to hand ``lease`` over; whether the request was written."""
        try:
            started = self.table.handoff_start(lease, self.me)
        except DependencyError as exc:
            self.log.warning("asking for lease %s failed: %s", lease.key, exc)
            return False
        if started is None:
            self.log.info("lease %s moved before its handoff could start", lease.key)
            return False
        now = self.clock()
        self.incoming[lease.key] = Incoming(started, now, now, started, seen_checkpointing)
        self.log.info("asked %s to hand lease %s over", lease.owner, lease.key,
                      extra=lease_event(LeaseEvent.ASKED, lease.key))
        return True

    def check_incoming(self, take: Callable[[Lease, str, LeaseEvent], bool]) -> dict[str, HandedOver | None]:
        """One read and judgement of each lease coming in. The ones now this worker's: handed
        over by their old owner, or taken by force through ``take`` (None: ``take`` holds them)."""
        arrived: dict[str, HandedOver | None] = {}
        failover_s = self.config.lease.failover_time_ms / 1000.0
        for key, waiting in list(self.incoming.items()):
            now = self.clock()
            try:
                current = self.table.get(key)
            except DependencyError as exc:
                self.log.warning("checking the handoff of %s failed: %s", key, exc)
                continue
            judged = judge_incoming(self.me, current, waiting.lease, waiting.asked, waiting.asked_at,
                                    waiting.changed_at, waiting.seen_checkpointing, now, failover_s,
                                    self.config.lease.handoff_timeout_s)
            if judged.verdict is Verdict.GONE:
                del self.incoming[key]
                self.log.info("lease %s went to %s instead", key, current.owner if current else "nobody (deleted)")
            elif judged.verdict is Verdict.ENDED:  # its old owner finished the shard: nothing left to process
                del self.incoming[key]
                self.log.info("lease %s reached SHARD_END during its handoff: not taking it", key)
            elif judged.verdict is Verdict.HANDED_OVER:
                assert current is not None
                del self.incoming[key]
                # The old owner's last write landed after a read that still saw the handoff (the
                # one that set changed_at): a safe "renewed" time, where `now` could be too late.
                arrived[key] = HandedOver(current, waiting.changed_at)
                self.metrics.add("leases_taken", 1)
                self.log.info("lease %s handed over at checkpoint %s", key, current.checkpoint,
                              extra=lease_event(LeaseEvent.HANDED_IN, key))
            else:
                assert current is not None
                waiting.lease, waiting.changed_at = current, judged.changed_at
                if judged.verdict is Verdict.TAKE and take(
                        current, f"took lease {key} from {current.checkpoint_owner} ({judged.why})", LeaseEvent.FORCED):
                    del self.incoming[key]
                    arrived[key] = None
        return arrived

    def cancel_all(self) -> None:
        """On shutdown: withdraw every request in, so the old owners keep their leases."""
        for key, waiting in self.incoming.items():
            try:
                self.table.handoff_cancel(key, self.me, waiting.lease.checkpoint_owner or "")
            except DependencyError as exc:
                self.log.warning("cancelling the handoff of %s failed (%s)", key, exc)
        self.incoming.clear()

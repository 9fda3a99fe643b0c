"""The supervisor: one per host. It owns the leases; the pool processes drive the shards.

One loop, in the manner of gunicorn's arbiter: wait for the next deadline (or a signal,
or a message from a pool process), handle what arrived, then do what is due:

    renew   every failoverTimeMillis/3 - 25 ms: bump the counter of each held lease, all
            at once (``renewer``: at most maxLeaseRenewalThreads in flight, each retried
            only while its lease is still ours); a lease that cannot be renewed is lost and its
            shard told so; a lease another worker asked for gets its processor stopped for a
            last checkpoint. In a KCL 3.x role the same step runs the leader election's
            heartbeat and publishes this worker's metrics item, each when due
            (``fleet.role.FleetRole.tick``)
    scan    in a 2.x role every failoverTimeMillis + 25 ms: take expired leases; once per take
            interval (2 * (failoverTimeMillis + 25 ms)) also steal to balance (``balance``
            decides, ``coordinator`` writes). In a 3.x role (the default) every renewal
            interval: the leader assigns the fleet's leases (``fleet.assignment_round``
            decides, ``fleet.role`` writes) and a follower takes up what the leader assigned
            it, through the owner index (``fleet.discovery``)
    sync    every shardSyncIntervalMillis: delete finished leases whose children are being
            processed; list the shards only if the leases leave a gap (``shard_sync.audit``)
    parents every parentShardPollIntervalMillis: re-read the parents held children wait for
    streams a multi-stream application, every streamListReadIntervalMillis: read the list again,
            start appended streams, drain removed ones, delete former ones' leases; each turn
            release the drained leases (``stream_changes``)
    reap    notice shards that ended, or whose pool process died (``supervisor.shards``);
            restart them with backoff from the last checkpoint while the lease is held
            (a processor that did not checkpoint at SHARD_END is
            restarted the same way, so the shard end is retried, loudly); after
            kclmp.processorMaxRestarts failures in a row, release the lease for another
            host; with kclmp.processorFailure = EXIT, stop the host instead (Java's way)
    usage   every minute, log the processors' CPU and memory (sampled by the pool processes);
            every second ship the figures to the metrics process (``reports``)
    fence   send each pool process the send times of its leases' last successful renewals
            (one ``Renewed`` batch: a shard delivers only while that is recent, ``fencing``);
            tell leaseLost to a shard whose lease is no longer held (a renewal failed, or a
            scan or read showed another holder)
    spawn   hand every held lease that has no driver to the least loaded pool process, once
            its parents finished, and only while its last renewal is recent (a host that was
            stopped or starved renews first: a processor never starts for a lease another
            host may have taken); at most STARTS_PER_TURN a turn (``starts``)

The messages to and from the pool processes are ``worker.channel``'s; the pool processes fork
the processor children, so a start costs the supervisor one message.

A shard read to its end: its driver sends its ChildShards; the supervisor creates the
children's leases at once (``shard_syncer``), then scans, so they are taken at once.

Each step runs through ``steps`` (an unexpected exception costs one turn; five in a row stop
the host with exit status 70); a failure of the stop itself still ends the pool processes
(which would otherwise keep the exit waiting on their pipes) and exits 70. When each step is
due is ``schedule``'s.

SIGTERM/SIGINT (queued by ``signals``) start the graceful stop: every shard's processor gets
shutdownRequested and may checkpoint while the supervisor keeps renewing; then the leases are
released (so another host takes them at once), the processors get leaseLost, and the process
exits 0. A second signal skips the wait; during start-up a signal ends it at once (exit 0),
whatever call is waiting or retrying. On every way out the metrics process is ended first:
it waits on its pipe, and a Python exit waits for it.
"""

from __future__ import annotations

import gc
import logging
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from multiprocess.connection import wait as wait_for

from kcl_mp.aws.clients import client as aws_client
from kcl_mp.config import Config
from kcl_mp.config.settings import StreamKind
from kcl_mp.errors import EXIT_CONFIG, EXIT_INTERNAL, EXIT_OK
from kcl_mp.leases.renewer import renewal_table
from kcl_mp.leases.table import LeaseTable
from kcl_mp.logs import LeaseEvent, ShardLog, lease_event
from kcl_mp.metrics.catalogue import Recorder
from kcl_mp.retrieval import fanout
from kcl_mp.retrieval.streams import stream_client
from kcl_mp.sequence import ExtendedSequenceNumber
from kcl_mp.supervisor.coordinator import LeaseCoordinator, Renewal
from kcl_mp.supervisor.exits import Exits
from kcl_mp.supervisor.reports import Reports
from kcl_mp.supervisor.schedule import METRICS_EVERY_S, USAGE_LOG_S, Schedule
from kcl_mp.supervisor.shard_life import CHECKPOINTED, TOLD_LOST, Event, ShardState
from kcl_mp.supervisor.shards import RunningShard, Shards
from kcl_mp.supervisor.signals import SignalQueue, StartupInterrupted
from kcl_mp.supervisor.starts import Starts
from kcl_mp.supervisor.steps import MAX_FAILURES, Steps
from kcl_mp.supervisor.stream_changes import StreamChanges
from kcl_mp.worker import channel

LEASE_LOST_WAIT_S = 30.0  # how long a shard may take to finish after leaseLost


@dataclass
class Supervisor:
    config: Config
    log_level: str = "INFO"
    log_format: str = "text"
    progress_every_s: float | None = None
    clock: Callable[[], float] = time.monotonic
    rng: random.Random = field(default_factory=random.Random)

    def __post_init__(self) -> None:
        self.log = ShardLog(logging.getLogger("kcl_mp.supervisor"), self.config.worker_id)
        self.table = LeaseTable(aws_client("dynamodb", self.config.dynamodb), self.config.lease.table_name,
                                self.config.stream_names)
        self.metrics = Recorder(enabled=self.config.metrics.enabled)
        self.leases = LeaseCoordinator(self.config, self.table, stream_client(self.config),
                                       self.log, self.clock, self.rng, metrics=self.metrics,
                                       renewals=renewal_table(self.config))
        self.consumer_arn: str | None = None  # enhanced fan-out's consumer, found or registered at start
        self.loop_lag_s = 0.0
        self.shards = Shards(self.config, self.log_level, self.log_format, self.log, self.metrics, self.clock,
                             self.leases.cost.record)
        self.starts = Starts(self.config.lease.failover_time_ms / 1000.0, self.log)
        self.restarts = self.starts.restarts  # key -> Restart: shards waiting to be restarted
        self.exits = Exits(self.config, self.leases, self.restarts, self.log, self.metrics, self.rng)
        self.reports = Reports(self.config, self.log, self.metrics, self.leases, self.shards, self.starts, self.exits,
                               self.clock)
        self.stream_changes = (StreamChanges(self.config, self.leases, self.shards, self.log, self.metrics, self.clock)
                               if self.config.streams else None)  # a multi-stream application's list, looked at again
        self.counters = self.exits.counters  # events an operator should see (the metrics issue publishes them)
        self.steps = Steps(self.log, self.metrics, self.counters, self.config.lease.renew_interval_s, self.clock)
        self.schedule = Schedule(self.config.lease, self.progress_every_s)
        self.due = self.schedule.due
        self.signals = SignalQueue()
        self.stopping = False
        self.quick = False  # a second signal: skip the wait for final checkpoints
        self.exit_code = EXIT_OK

    # -- the loop ---------------------------------------------------------------------

    def run(self) -> int:
        try:
            self._start_up()
        except StartupInterrupted as stop:
            self.log.warning("%s received during start-up: stopped before processing any lease",
                             signal.Signals(stop.signum).name)
            self.reports.stop_metrics()
            return EXIT_OK
        except BaseException:
            self.signals.starting = False  # a signal now only queues: it must not cut the stop below short
            self.reports.stop_metrics()  # left running, it would keep this process from exiting (it waits on the pipe)
            raise
        try:
            self._loop()
            return self.shutdown()
        except Exception:  # a bug outside any step (the stop itself): end what runs, never hang
            self.log.critical("the supervisor failed; ending its pool processes and exiting with status %d",
                              EXIT_INTERNAL, exc_info=True)
            self._end_pools()
            return EXIT_INTERNAL
        except BaseException:
            self._end_pools()
            raise

    def _loop(self) -> None:
        """Until a signal, or a step that keeps failing (``steps``), run what is due."""
        lease_settings = self.config.lease
        due = self.due
        step = self.steps.run
        while not self.stopping:
            now = self.clock()
            wake = self.schedule.wake(now, self.starts.more)
            step("read", partial(self.wait, max(0.0, wake - now)))
            self.handle_signals()
            if self.stopping:
                break
            now = self.clock()
            if now >= due["renew"]:
                self.loop_lag_s = now - due["renew"]
                self.metrics.add("loop_lag", self.loop_lag_s)
                step("renew", partial(self.renew, now))
                due["renew"] = now + lease_settings.renew_interval_s
            if now >= due["scan"]:
                step("scan", self.leases.scan)
                self.reports.note_other_rows(self.table.others)
                due["scan"] = self.clock() + self.leases.scan_interval_s()
            if now >= due["sync"]:
                due["sync"] = now + lease_settings.shard_sync_interval_ms / 1000.0  # unless the audit sets it
                if self.leases.runs_shard_sync():  # not a 3.x follower: the leader syncs
                    step("sync", lambda: self._after_sync(self.leases.sync.audit(), self.clock(),
                                                          self.leases.sync.confirming))
            if now >= due["parents"]:
                step("parents", lambda: self.leases.sync.poll_parents(
                    sorted({p for parents in self.starts.waiting.values() for p in parents})))
                due["parents"] = now + lease_settings.parent_shard_poll_interval_ms / 1000.0
            if self.stream_changes is not None and now >= due["streams"]:
                step("streams", self.look_at_streams)
                due["streams"] = now + self.config.stream_list.read_interval_ms / 1000.0
            if now >= due["usage"]:
                step("usage", self.reports.log_usage)
                due["usage"] = now + USAGE_LOG_S
            if self.reports.metrics_link is not None and self.clock() >= due["metrics"]:  # at once after a long round
                step("metrics", self.ship_metrics)
                due["metrics"] = now + METRICS_EVERY_S
            step("fence", self.fence_workers)
            step("reap", self.reap_workers)
            if self.stream_changes is not None:
                step("drain", self.stream_changes.drain)
            step("spawn", self.spawn_workers)
            if self.progress_every_s and now >= due["progress"]:
                step("progress", self.reports.show_progress)
                due["progress"] = now + self.progress_every_s
            if (failed := self.steps.failed) is not None and not self.stopping:
                self.log.error("loop step %s failed %d turns in a row: stopping (exit status %d)", failed,
                               MAX_FAILURES, EXIT_INTERNAL)
                self.exit_code = EXIT_INTERNAL
                self.stopping = True

    def _end_pools(self) -> None:
        """The way out when the stop itself failed: every pool process ended (its pipe closed,
        then SIGTERM, SIGKILL), the process groups of killed ones stopped, the metrics process too."""
        try:
            for killed in self.shards.pools.stop(5.0):
                self.shards.pools.stop_groups(killed, set(killed.groups))
        finally:
            self.reports.stop_metrics()

    def _start_up(self) -> None:
        """Everything before the loop, in an order that writes nothing for a stream that
        does not exist. An error raises (the CLI prints it; exit 1); a signal ends the
        start-up at once, even inside a call that is waiting or retrying."""
        if self.metrics.enabled:  # first: it must be forked before any thread or pool process exists
            self.reports.start_metrics(self.log_level, self.log_format)
        self.signals.starting = True
        self.signals.install()
        lease_settings = self.config.lease
        self.log.info(
            "starting: stream %s, lease table %s, renew every %.2f s, scan every %.2f s, steal at most every %.2f s",
            self.config.stream_name, lease_settings.table_name, lease_settings.renew_interval_s,
            lease_settings.watch_interval_s, lease_settings.take_interval_s)
        stream_arn = self.leases.sync.describe_stream()
        created = self.table.ensure_table(
            deletion_protection=lease_settings.deletion_protection_enabled, pitr=lease_settings.pitr_enabled)
        if created:
            self.log.info("created lease table %s", lease_settings.table_name)
        self.leases.join_fleet()  # the fleet's client version and this host's role in it (fleet/role.py)
        if self.config.retrieval.mode == "FANOUT" and self.stream_changes is not None:
            self.stream_changes.find_consumers()  # one consumer per stream
        elif self.config.retrieval.mode == "FANOUT":
            self.consumer_arn = fanout.consumer_arn(self.config, stream_arn, self.leases.kinesis, self.log)
        found = self.table.scan()
        leases = list(found.leases)
        self.reports.note_other_rows(found.others)
        self.leases.last_seen = {lease.key: lease for lease in leases}
        now = self.clock()
        self.schedule.start(now)
        if not (lease_settings.skip_shard_sync_at_startup_if_leases_exist and leases):
            self._after_sync(self.leases.sync.sync_shards(self.leases.last_seen, "start-up"), now)
        self.leases.adopt_own_leases(leases)
        self.signals.starting = False  # from here a signal is queued for the loop: the graceful stop
        # Everything made so far (modules, service models, clients) is shared with the pool
        # processes forked from here on; keep the collector from touching it, so those pages
        # stay shared instead of being copied into every pool process (gc.freeze's purpose).
        gc.freeze()

    def _after_sync(self, ok: bool, now: float, confirming: bool = False) -> None:
        if failures := self.schedule.after_sync(ok, now, confirming):
            self.log.error("shard sync failed %d times in a row; next try in shardSyncIntervalMillis", failures)

    def wait(self, timeout: float) -> None:
        ready = wait_for([self.signals.wake_fd] + self.shards.pools.connections(), timeout)
        for item in ready:
            if item == self.signals.wake_fd:
                self.signals.drain_wakeups()
                continue
            pool = self.shards.pools.by_conn(item)
            if pool is not None:
                for shard, message in self.shards.read(pool):
                    self._act(shard, message)

    def _act(self, shard: RunningShard, message: channel.FromPool) -> None:
        """A shard's report that concerns its lease."""
        match message:
            case channel.ShutdownReady() if shard.state is ShardState.HANDED_OVER:
                self.leases.finish_handoff(shard.key)
                self.shards.tell(shard, channel.LeaseLost)
            case channel.Progress(delivered_bytes=delivered_bytes):
                self.leases.record_bytes(shard.key, delivered_bytes - shard.bytes_seen)
                shard.bytes_seen = delivered_bytes
            case channel.LeaseMoved():
                self.leases.drop(shard.key, "a checkpoint was refused: the lease belongs to another worker")
            case channel.Children(children=children):
                if self.leases.sync.create_children(shard.key, children):
                    self.due["scan"] = self.clock()  # take the new leases now, not a scan later
                else:
                    self.log.info("shard %s ended without ChildShards: syncing shards now", shard.key)
                    self.due["sync"] = self.clock()
                self.shards.tell(shard, channel.ChildrenCreated)  # its processor may hear shardEnded now

    def handle_signals(self) -> None:
        while self.signals.pending:
            signum = self.signals.pending.pop(0)
            if not self.stopping:
                self.log.info("%s received: stopping gracefully (a second signal stops at once)",
                              signal.Signals(signum).name)
                self.stopping = True
            else:
                self.quick = True

    # -- leases -----------------------------------------------------------------------

    def renew(self, now: float) -> None:
        """The renew step: one round, its results carried out; the shards hear of it at once
        (``fence_workers``: the one path by which a shard whose lease is gone, lost in a
        renewal or dropped by a scan, is told leaseLost)."""
        renewal = self.leases.renew()
        self.handle_renewal(renewal)
        self.fence_workers()
        if renewal.became_leader:  # its first round now, not a scan interval later
            self.due["scan"] = now

    def handle_renewal(self, renewal: Renewal) -> None:
        for key in renewal.handoffs:
            shard = self.shards.active.get(key)
            if shard is None or shard.state in TOLD_LOST:
                self.leases.finish_handoff(key)  # no processor to stop: its last checkpoint stands
            else:
                self.shards.ask_shutdown(shard, Event.HANDOFF)
        for key in renewal.acquired:
            self.restarts.pop(key, None)

    # -- shards -----------------------------------------------------------------------

    def fence_workers(self) -> None:
        """Each shard learns of its lease's renewals. The times are the supervisor's clock,
        ``time.monotonic()``: host-wide, so the pool processes' own clocks read the same."""
        self.shards.fence({key: held.renewed_at for key, held in self.leases.held.items()})

    def look_at_streams(self) -> None:
        """A multi-stream application's list, looked at again (``stream_changes``)."""
        assert self.stream_changes is not None
        if self.stream_changes.look():  # a stream appended: the host that syncs creates its leases now
            self.due["sync"] = self.clock()

    def spawn_workers(self) -> None:
        if self.stopping:
            return
        for key in self.starts.choose(self.leases.held, self.shards.active, self.clock(), self.leases.waiting_for):
            if self.leases.is_draining(key):  # its stream left the list: released, not started (stream_changes)
                continue
            held = self.leases.held[key]
            streams = self.stream_changes
            fresh = ExtendedSequenceNumber(self.config.initial_position.kind, 0)  # no checkpoint yet
            self.shards.start(key, held.lease.checkpoint or fresh,
                              streams.consumer_of(key) if streams else self.consumer_arn, held.renewed_at,
                              streams.stream_of(key) if streams else None,
                              held.lease.hash_range if self.config.stream_kind is StreamKind.KINESIS else None)

    def reap_workers(self) -> None:
        ended, actions = self.shards.ended((self.config.processor.timeout_s or 0) + LEASE_LOST_WAIT_S)
        for shard, message in actions:
            self._act(shard, message)
        for shard in ended:
            if self.exits.after_exit(shard, shard.exit_code, self.clock(), self.stopping):
                self.exit_code = EXIT_CONFIG
                self.stopping = True

    def ship_metrics(self) -> None:
        self.reports.ship_metrics(self.loop_lag_s, self.stopping)

    # -- the graceful stop ------------------------------------------------------------

    def shutdown(self) -> int:
        grace_s = self.config.processor.shutdown_grace_ms / 1000.0
        self.log.info("shutting down: %d workers, %d leases, waiting up to %.1f s for final checkpoints",
                      len(self.shards.active), len(self.leases.held), grace_s)
        self.reports.log_usage()  # the last figures, for the record
        for shard in self.shards.active.values():
            self.shards.ask_shutdown(shard, Event.STOP)
        deadline = self.clock() + grace_s
        next_renew = self.clock() + self.config.lease.renew_interval_s
        while self.clock() < deadline and not self.quick:
            pending = [w for w in self.shards.active.values() if w.state not in CHECKPOINTED and self.shards.running(w)]
            if not pending:
                break
            self.wait(min(0.5, max(0.0, deadline - self.clock())))
            self.handle_signals()
            if self.clock() >= next_renew:  # keep the leases while processors checkpoint
                self.handle_renewal(self.leases.renew())
                self.fence_workers()  # final checkpoints are written only while the hold is fresh
                next_renew = self.clock() + self.config.lease.renew_interval_s
            self.ship_metrics()  # /healthz stays fresh while processors checkpoint
        for key in self.leases.release_all():
            self.log.info("released lease %s (checkpoint %s)", key,
                          self.shards.active[key].progress.checkpoint if key in self.shards.active else "-",
                          extra=lease_event(LeaseEvent.RELEASED, key))
        if self.progress_every_s:
            self.reports.show_progress(stopped=True)  # the final figures, after the last checkpoints
        self.shards.finish(self.wait)
        if self.reports.metrics_link is not None:
            self.reports.metrics_link.flush(2.0)
            self.ship_metrics()  # the last figures; then the metrics process publishes them and ends
        self.reports.stop_metrics()
        self.log.info("stopped")
        return self.exit_code

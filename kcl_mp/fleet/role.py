"""This host's part in a KCL 3.x fleet: the client version it follows, and its 3.x role.

Every lease coordinator holds one (``clientVersionConfig`` unset means
CLIENT_VERSION_CONFIG_3X, as in Java) and calls it at three points; in a 2.x role the
coordinator takes and steals by the 2.x rules::

    join       start-up: settle KCL 3.5's table migration (``table_migrator``: where the
               state and metrics are read and written), create the own tables where a
               Java worker would, settle ``Migration3.0`` for the config
               (``client_version.initial``), pick the role, log it with the config and
               where it came from; a lock role checks the election at once, so a leader's
               first round runs on the first scan (Java's LAM runs its first at start)
    scan       every scan (in a 3.x role every renewal interval): read ``TableMigration3.5``
               until COMPLETE (then everything moves to the lease table), read ``Migration3.0``
               again (both at most every watch interval) and follow a flip or a rollback
               (``client_version.follow``, logged and counted); in a 3.x role a follower finds
               its leases through the owner index (``discovery``), the leader scans, adopts
               what ``assigned_here`` shows assigned to it and runs its assignment round (``lead``)
    tick       every renewal round: the leader election's heartbeat (lock-based roles; a
               contender reads ``TableMigration3.5`` before it takes the own table's lock)
               and the worker-metrics item (roles that publish), each on its own period;
               whether this host has just become the leader (the supervisor scans at once)

The leader's round (``lead``) is Java's LeaseAssignmentManager with kcl-mp's balance rule
(``assignment.plan_assignment``): every leaseAssignmentIntervalMillis it scans the leases
and every worker's metrics item, assigns unowned and expired leases (a take conditioned on
the counter it saw), hands leases over gracefully to balance, and assigns outright a
handoff pending longer than gracefulLeaseHandoffTimeoutMillis (its old owner died or does
not answer). ``lead`` reads and writes; what to write is ``assignment_round.plan_round``'s
(its docstring has the rules: which workers are live, ``left``, ``settling``).

A dead worker costs its shards seconds, not a round or a lock's two minutes:
- The leader folds every scan (every renewal interval) into its observations and, between
  its rounds, runs an assignment-only round (no rebalancing) as soon as a scan shows a lease
  expired or unowned that the last round did not spill over: a lease is reassigned within
  about failoverTimeMillis of its owner's last renewal.
- A kcl-mp leader's lock lasts failoverTimeMillis (``Config.leader_lock_ms``), so a dead or
  paused kcl-mp leader is replaced within about that; the new leader scans at once.
- A Java leader's lock lasts 120 s and nothing may shorten it. While the lock a follower reads
  would outlast failover + one assignment interval (``rescues``), the follower scans the whole
  table and takes, as a 2.x taker without steals, the leases that nobody renewed, assigned or
  handed over for that long (``balance.plan_rescue``): a live leader reassigns an expired
  lease within that time, so only a dead or stuck one leaves work to a follower. The take is
  the same conditional write on the counter as every take; a Java leader's next round sees a
  lease renewed by a live worker, which it leaves or hands over like any other.

Worker metrics: kcl-mp publishes what a Java worker on this host would (``kclmp.workerMetric``
AUTO, the default, ``host_probe``): the host's CPU with the operating range [100] on
EC2/ECS/EKS under Linux, else Java's "default worker metric" (empty ``sts``/``opr``);
CPU or DEFAULT forces one. The CPU is sampled every renewal round (``tick``) and the
average published every report period.
A Java leader compares each metric only among the workers reporting it, so a fleet must
report one kind (docs/kcl3-facts.md section 4); kcl-mp's leader balances a mixed fleet by
load (``assignment``). The leader deletes stale metrics items after each round
(``fleet_metrics``).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from kcl_mp.config import Config
from kcl_mp.errors import DependencyError
from kcl_mp.fleet import assignment, assignment_round, client_version, cost_balance, fleet_metrics, host_probe
from kcl_mp.fleet.client_version import ClientVersion, Role
from kcl_mp.fleet.flip_monitor import FlipMonitor
from kcl_mp.fleet.leader import LeaderElection, LockTable
from kcl_mp.fleet.state_store import CoordinatorStateStore, StateTables
from kcl_mp.fleet.table_migrator import TableMigrator
from kcl_mp.fleet.worker_metrics import CPU, FIRST_REPORT_S, WorkerMetricsReporter
from kcl_mp.leases import owner_index
from kcl_mp.leases.lease import Lease
from kcl_mp.leases.rows import WorkerMetrics
from kcl_mp.leases.table import LeaseTable
from kcl_mp.logs import TABLE_MIGRATION_COMPLETE, LeaseEvent, ShardLog, lease_event
from kcl_mp.metrics.catalogue import Recorder


class FleetRole:
    """The client version this host follows and what its role does (module docstring)."""

    def __init__(self, config: Config, client: Any, table: LeaseTable, log: ShardLog, clock: Callable[[], float],
                 wall: Callable[[], float], rng: random.Random, metrics: Recorder):
        self.config, self.client, self.table, self.log = config, client, table, log
        self.clock, self.wall, self.rng, self.metrics = clock, wall, rng, metrics
        self.settings = config.kcl3
        self.version = ClientVersion.INIT
        self.tables: StateTables | None = None
        self.store: CoordinatorStateStore | None = None
        self.election: LeaderElection | None = None
        self.reporter: WorkerMetricsReporter | None = None
        self.metric: str | None = None  # kclmp.workerMetric resolved (AUTO: once, when the role first publishes)
        self.migration = TableMigrator(client, config.application_name, config.lease.table_name, self.me,
                                       migrate_all=self.settings.migrate_all_entities_to_lease_table,
                                       complete_bake_s=self.settings.table_migration_complete_bake_s,
                                       coordinator_table=self.settings.coordinator_state_table_name,
                                       metrics_table=self.settings.worker_metrics_table_name,
                                       clock_ms=lambda: int(self.wall() * 1000))
        self.next_check = self.next_publish = self.next_round = self.next_follow = 0.0
        self.memory = assignment_round.Memory()  # what the leader carries from scan to scan
        self.metrics_rows: list[WorkerMetrics] = []  # the last round's worker-metrics items
        self.flip_monitor = FlipMonitor(self.me, client, config.lease.table_name, log, clock, wall)
        self.round_settings = assignment_round.RoundSettings(
            self.me, config.lease.failover_time_ms / 1000.0, config.lease.handoff_timeout_s,
            self.settings.worker_metrics_reporter_freq_ms / 1000.0, config.lease.renew_interval_s,
            assignment.AssignmentSettings(
                dampening_percentage=self.settings.dampening_percentage,
                rebalance_threshold_percentage=self.settings.rebalance_threshold_percentage,
                max_throughput_per_host_kbps=self.settings.max_throughput_per_host_kbps,
                max_leases_for_worker=config.lease.max_leases_for_worker),
            self.settings.lease_assignment_strategy,
            cost_balance.CostSettings(self.settings.cost_band_percent, self.settings.cost_min_gain_percent,
                                      self.settings.cost_moves_per_round),
            self.settings.variance_balancing_frequency)

    @property
    def me(self) -> str:
        return self.config.worker_id

    @property
    def role(self) -> Role:
        return client_version.role(self.version)

    def is_leader(self) -> bool:
        return self.election is not None and self.role.lock_leader and self.election.is_leader()

    @property
    def rescue_after_s(self) -> float:
        """How long a lease lies abandoned before a follower takes it: failover + one assignment interval."""
        return self.config.lease.failover_time_ms / 1000.0 + self.config.assignment_interval_s

    def rescues(self) -> bool:
        """Whether this follower takes abandoned leases (module docstring): the lock it last read
        is held, and for longer than a lease may lie abandoned (a Java leader's 120 s)."""
        if self.election is None or not self.role.lock_leader or self.election.is_leader():
            return False
        lock = self.election.last_read
        return lock is not None and not lock.released and lock.lease_duration_ms / 1000.0 > self.rescue_after_s

    # -- start-up ---------------------------------------------------------------------

    def join(self) -> None:
        """Settle the table migration, create the own tables where needed, settle ``Migration3.0``, take up the role."""
        self.migration.start()
        self._place()
        assert self.store is not None and self.tables is not None
        if self.store.ensure_table():
            self.log.info("created coordinator-state table %s", self.tables.coordinator_table)
        config = self.settings.client_version_config
        state = self.store.initialise_client_version(config)
        self.version = client_version.parse(state.value) if state is not None else ClientVersion.INIT
        self.log.info("table migration %s: coordinator state and worker metrics written to %s",
                      self.migration.local, self.tables.coordinator_table)
        source = self.settings.client_version_config_from
        self.log.info("%s; client version %s (created by %s): %s",
                      f"clientVersionConfig {config} ({source})" if source else
                      f"clientVersionConfig unset: {config}, as the Java daemon", self.version.value,
                      state.modified_by if state is not None else "nobody", self._describe())
        self._enter(first=True)
        self.tick()  # the election at once: an uncontended leader assigns on the first scan

    def _place(self) -> None:
        """The state store, the election and the reporter where the table migration puts them."""
        m = self.migration
        self.tables = m.writes
        self.store = CoordinatorStateStore(self.client, m.writes, self.me, lambda: int(self.wall() * 1000), m.reads)
        self.election = LeaderElection(LockTable(self.client, m.lock, self.me, self.config.leader_lock_ms),
                                       self.clock, may_take=lambda: True if m.complete else self._lock_stays())
        self.reporter = WorkerMetricsReporter(self.client, m.writes, self.me,
                                              report_period_s=self.settings.worker_metrics_reporter_freq_ms / 1000.0,
                                              clock=self.clock, wall=self.wall, cores=host_probe.capacity())

    def _lock_stays(self) -> bool:
        """Before taking the own table's lock: the migration still not COMPLETE, read now. Java's
        3.5 leader deletes that lock right after COMPLETE; a Java contender takes it, reads COMPLETE
        and deletes it again; kcl-mp reads first and never writes the table the fleet has left."""
        try:
            self.migration.refresh()
        except DependencyError as exc:
            self.log.warning("reading the table migration status failed (%s); not taking the leader lock", exc)
            return False
        return not self.migration.complete

    def _relocate(self, why: str) -> None:
        """TableMigration3.5 is COMPLETE: release the own table's lock; from now on everything is in the lease table."""
        self.release()
        self._place()
        self.log.warning("table migration COMPLETE (%s): coordinator state, leader lock and worker metrics "
                         "now in lease table %s", why, self.migration.lease.coordinator_table,
                         extra={"event": TABLE_MIGRATION_COMPLETE, "event_fields": {"why": why}})
        self._enter()

    def _describe(self) -> str:
        r = self.role
        if r.lock_leader:
            return "a 3.x worker, follower unless it leads"
        return "a 2.x taker" + (", publishing worker metrics" if r.publishes_metrics else "")

    def _enter(self, first: bool = False) -> None:
        """What a role needs before it runs: the metrics table, the owner index."""
        assert self.reporter is not None and self.tables is not None
        r = self.role
        if r.publishes_metrics and self.metric is None:
            self.metric, why = host_probe.worker_metric(self.settings.worker_metric)
            self.log.info("kclmp.workerMetric %s%s (%s)", "AUTO: " if self.settings.worker_metric == "AUTO" else "",
                          self.metric, why)
        if r.publishes_metrics and self.reporter.ensure_table():
            self.log.info("created worker-metrics table %s", self.tables.metrics_table)
        if r.owner_index in ("create", "wait"):
            status = owner_index.ensure_owner_index(self.client, self.config.lease.table_name)
            if r.owner_index == "wait" and status != "ACTIVE":
                owner_index.wait_for_owner_index(self.client, self.config.lease.table_name)
        now = self.clock()
        self.next_check = now
        self.next_publish = now + (FIRST_REPORT_S if first else 0.0)
        self.next_round = now

    # -- every scan -------------------------------------------------------------------

    def follow(self) -> bool:
        """Read ``Migration3.0`` (at most every watch interval) and move with a flip or a rollback;
        whether the role changed."""
        now = self.clock()
        if now < self.next_follow:
            return False
        self.next_follow = now + self.config.lease.watch_interval_s
        try:
            if self.migration.refresh():
                self._relocate("read")
        except DependencyError as exc:
            self.log.warning("reading the table migration status failed (%s)", exc)
        assert self.store is not None
        try:
            seen = self.store.client_version()
        except DependencyError as exc:
            self.log.warning("reading the fleet's client version failed (%s); staying %s", exc, self.version.value)
            return False
        move = client_version.follow(self.version, seen)
        if not move.changed:
            return False
        was = self.role
        self.version = move.version
        self.metrics.add("client_version_changes", 1)
        self.log.warning("client version %s: now %s", move.reason, self._describe())
        if was.lock_leader and not self.role.lock_leader and self.election is not None:
            self.election.release()
        self._enter()
        return was != self.role

    def assigned_here(self, leases: Iterable[Lease], held: Iterable[str]) -> list[Lease]:
        """The open leases the table assigns to this worker that it does not hold yet."""
        mine = set(held)
        return [lease for lease in leases
                if lease.owner == self.me and lease.key not in mine and not lease.is_shard_end]

    def monitor_flip(self, leases: Mapping[str, Lease]) -> None:
        """UPGRADE_FROM_2X: the flip monitor's look, when due (``flip_monitor``)."""
        if self.version is not ClientVersion.UPGRADE_FROM_2X:
            return
        assert self.store is not None
        self.flip_monitor.check(leases, self.store, lambda: {w.worker_id for w in self._workers()})

    # -- every renewal round ----------------------------------------------------------

    def tick(self) -> bool:
        """The election's heartbeat and the metrics item, each when due; whether this host has
        just become the leader."""
        now = self.clock()
        r = self.role
        became = False
        if r.lock_leader and self.election is not None and now >= self.next_check:
            self.next_check = now + self.config.leader_heartbeat_s
            was = self.election.is_leader()
            try:
                leads = self.election.check()
            except DependencyError as exc:
                self.log.warning("leader election: %s", exc)
                leads = self.election.is_leader()
            if self.election.lock.table != self.migration.lock.coordinator_table:  # _lock_stays read COMPLETE
                self._relocate("read")
                leads = False
            if leads != was:
                self.metrics.add("leader_changes", 1)
                self.log.info("worker %s %s the fleet's leader", self.me, "is now" if leads else "is no longer")
                self.next_round = now
                if leads:  # a new leader rebalances on its first round once it has watched the leases
                    self.memory = replace(self.memory, balance_count=0, led_since=now)
                became = leads
        if not r.publishes_metrics or self.reporter is None:
            return became
        cpu = self.metric == "CPU"
        if cpu:  # a sample every renewal round; the report averages those since the last one
            self.reporter.cpu.capture()
        if now >= self.next_publish:
            self.next_publish = now + self.reporter.report_period_s
            try:
                self.reporter.publish({CPU: self.reporter.cpu.report()} if cpu else {})
            except DependencyError as exc:
                self.log.warning("publishing worker metrics: %s", exc)
        return became

    def release(self) -> None:
        if self.election is not None and self.election.release():
            self.log.info("released the leader lock")

    # -- the leader's round -----------------------------------------------------------

    def lead(self, leases: Mapping[str, Lease]) -> dict[str, Lease]:
        """Every scan (leader only): the assignment round when due, else an assignment-only round
        when a lease lies expired or unowned (``assignment_round``); the leases it wrote, as written."""
        now = self.clock()
        if not self.is_leader():
            return {}
        due = now >= self.next_round
        watched = assignment_round.watch(self.memory, leases, now, due, self.round_settings.failover_s)
        self.memory = watched.memory
        if not watched.runs:
            return {}
        if due:
            self.next_round = now + self.config.assignment_interval_s
        failed: DependencyError | None = None
        try:
            workers = self._workers()
        except DependencyError as exc:
            failed, workers = exc, None
        reported = {row.worker_id: row.updated_at_s for row in self.metrics_rows}
        plan = assignment_round.plan_round(watched, leases, workers, reported, now, self.wall(), self.round_settings,
                                           self.rng)
        self.memory = plan.memory
        out: dict[str, Lease] = {}
        for move in plan.overdue:
            if done := self._write(move, leases[move.key]):
                out[move.key] = done
                self.log.warning("lease %s: handoff from %s pending over gracefulLeaseHandoffTimeoutMillis; "
                                 "assigned to %s outright", move.key, leases[move.key].checkpoint_owner, move.to)
        if plan.assignment is None:
            self.log.warning("leader: round skipped: %s", failed)
            return out
        written: list[assignment.Move] = []
        for move in plan.assignment.moves:
            if done := self._write(move, leases[move.key]):
                out[move.key] = done
                written.append(move)
        self.memory = plan.remember(written, leases)
        if written or plan.assignment.spillover:
            self.log.info("leader: %s%s", plan.assignment.reason,
                          "" if due else " (between rounds: leases lay expired)")
        if due:
            self._delete_stale()
            self._migrate({seen.owner for seen in leases.values() if seen.owner}, set(plan.renewing))
        return out

    def _migrate(self, owners: set[str], unexpired: set[str]) -> None:
        """The table migration's leader step, from what this round saw."""
        period_s = self.settings.worker_metrics_reporter_freq_ms / 1000.0
        try:
            step = self.migration.lead(owners, unexpired, self.wall(), period_s)
        except DependencyError as exc:
            self.log.warning("table migration: %s", exc)
            return
        if step.kind != "none":
            self.log.info("%s", step.words())
        if step.kind == "complete":
            self._relocate("by this leader" if step.status else step.why)

    def _write(self, move: assignment.Move, seen: Lease) -> Lease | None:
        try:
            done = (self.table.handoff_start(seen, move.to) if move.handoff else self.table.take(seen, move.to))
        except DependencyError as exc:
            self.log.warning("leader: moving lease %s to %s failed: %s", move.key, move.to, exc)
            return None
        if done is None:
            return None
        self.log.info("leader: %s lease %s to %s%s", "handing" if move.handoff else "assigned", move.key, move.to,
                      f" from {move.owner}" if move.owner else "",
                      extra=lease_event(LeaseEvent.HANDOFF_STARTED if move.handoff else LeaseEvent.ASSIGNED, move.key,
                                        to=move.to, **{"from": move.owner or None}))
        return done

    def _workers(self) -> list[assignment.WorkerLoad]:
        """Every live worker of the fleet, Java ones included, from their metrics items (each
        table the table migration reads)."""
        self.metrics_rows = self.migration.worker_metrics()
        live_s = 2 * self.settings.worker_metrics_reporter_freq_ms / 1000.0
        return fleet_metrics.live_workers(self.metrics_rows, self.wall(), live_s)

    def _delete_stale(self) -> None:
        """After a round, as Java's LAM: the items not updated for staleWorkerMetricsEntryCleanupDuration
        (in the table this worker writes; an item only in the other one fails its condition)."""
        assert self.tables is not None
        try:
            deleted = fleet_metrics.delete_stale(self.client, self.tables, self.metrics_rows, self.wall(),
                                                 self.settings.stale_worker_metrics_s)
        except DependencyError as exc:
            self.log.warning("leader: deleting stale worker metrics: %s", exc)
            return
        if deleted:
            self.log.info("leader: deleted the worker metrics of %s (not updated for %.0f s)",
                          ", ".join(deleted), self.settings.stale_worker_metrics_s)

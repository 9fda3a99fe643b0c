"""The supervisor: one per host. It owns the leases; shard workers own the records.

One loop, in the manner of gunicorn's arbiter: wait for the next deadline (or a signal,
or a message from a worker), handle what arrived, then do what is due:

    renew   every failoverTimeMillis/3 - 25 ms: bump the counter of each held lease;
            a lease that cannot be renewed is lost and its worker told so
    take    every 2 * (failoverTimeMillis + 25 ms): scan the table, ask ``balance`` for a
            plan, take (or steal) what it says with conditional writes
    sync    every shardSyncIntervalMillis: list the shards, create missing leases
    reap    notice workers that exited; restart them with backoff while the lease is held
    spawn   start a worker for every held lease that has none

Signal handlers only queue the signal. SIGTERM/SIGINT start the graceful stop: every
worker's processor gets shutdownRequested and may checkpoint while the supervisor keeps
renewing; then the leases are released (so another host takes them at once), the
processors get leaseLost, and the process exits 0. A second signal skips the wait.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import multiprocess
from multiprocess.connection import wait as wait_for

from . import balance, shard_worker
from .aws import AWS_ERRORS, translate
from .backoff import Backoff
from .config import Config
from .credentials import client as aws_client
from .errors import DependencyError
from .lease import ExtendedSequenceNumber, Lease
from .lease_table import LeaseTable
from .logs import ShardLog
from .progress import ShardProgress, render
from .shard_sync import Shard, plan_new_leases

RESTART_BACKOFF = Backoff(base_s=1.0, cap_s=60.0)
HEALTHY_AFTER_S = 60.0  # a worker that ran this long resets its restart count
LEASE_LOST_WAIT_S = 30.0  # how long a worker may take to finish after leaseLost


@dataclass
class Held:
    """A lease this worker holds, as last written, and when it was last renewed."""

    lease: Lease
    renewed_at: float


@dataclass
class Worker:
    key: str
    process: Any
    conn: Any
    started_at: float
    progress: ShardProgress
    told_lost_at: float | None = None
    shutdown_ready: bool = False
    shard_end: bool | None = None
    failure: str | None = None


@dataclass
class Restart:
    attempts: int = 0
    not_before: float = 0.0


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
        self.table = LeaseTable(aws_client("dynamodb", self.config.dynamodb), self.config.lease.table_name)
        self.kinesis = aws_client("kinesis", self.config.kinesis)
        self.held: dict[str, Held] = {}
        self.workers: dict[str, Worker] = {}
        self.restarts: dict[str, Restart] = {}
        self.finished: set[str] = set()  # shards this host saw to SHARD_END
        self.observations: dict[str, balance.Observation] = {}
        self.signals: list[int] = []
        self.stopping = False
        self.quick = False  # a second signal: skip the wait for final checkpoints
        self.exit_code = 0
        self._fork = multiprocess.get_context("fork")

    # -- signals ----------------------------------------------------------------------

    def _install_signals(self) -> None:
        self._wake_r, wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._queue_signal)

    def _queue_signal(self, signum: int, frame: Any) -> None:
        """NO LOGGING HERE: only queue the signal; the loop handles it."""
        self.signals.append(signum)

    def _drain_wakeups(self) -> None:
        try:
            while os.read(self._wake_r, 512):
                pass
        except BlockingIOError:
            pass

    # -- the loop ---------------------------------------------------------------------

    def run(self) -> int:
        self._install_signals()
        lease_settings = self.config.lease
        self.log.info(
            "starting: stream %s, lease table %s, renew every %.2f s, take every %.2f s",
            self.config.stream_name, lease_settings.table_name,
            lease_settings.renew_interval_s, lease_settings.take_interval_s)
        created = self.table.ensure_table(
            deletion_protection=lease_settings.deletion_protection_enabled, pitr=lease_settings.pitr_enabled)
        if created:
            self.log.info("created lease table %s", lease_settings.table_name)
        leases = self.table.list_leases()
        if not (lease_settings.skip_shard_sync_at_startup_if_leases_exist and leases):
            self.sync_shards({lease.key: lease for lease in leases})
        self.adopt_own_leases()
        now = self.clock()
        due = {"renew": now + lease_settings.renew_interval_s, "take": now,
               "sync": now + lease_settings.shard_sync_interval_ms / 1000.0,
               "progress": now + (self.progress_every_s or 0)}
        while not self.stopping:
            now = self.clock()
            wake = min(due["renew"], due["take"], due["sync"], now + 1.0)
            if self.progress_every_s:
                wake = min(wake, due["progress"])
            self.wait(max(0.0, wake - now))
            self.handle_signals()
            if self.stopping:
                break
            now = self.clock()
            if now >= due["renew"]:
                self.renew_leases()
                due["renew"] = now + lease_settings.renew_interval_s
            if now >= due["take"]:
                self.take_leases()
                due["take"] = self.clock() + lease_settings.take_interval_s
            if now >= due["sync"]:
                self.sync_shards({lease.key: lease for lease in self.table_leases_or_empty()})
                due["sync"] = self.clock() + lease_settings.shard_sync_interval_ms / 1000.0
            self.reap_workers()
            self.spawn_workers()
            if self.progress_every_s and now >= due["progress"]:
                self.show_progress()
                due["progress"] = now + self.progress_every_s
        return self.shutdown()

    def wait(self, timeout: float) -> None:
        ready = wait_for([self._wake_r] + [w.conn for w in self.workers.values()], timeout)
        for item in ready:
            if item == self._wake_r:
                self._drain_wakeups()
                continue
            worker = next((w for w in self.workers.values() if w.conn is item), None)
            if worker is not None:
                self._read_messages(worker)

    def _read_messages(self, worker: Worker) -> None:
        for _ in range(1000):  # bounded: a chatty worker cannot starve the loop
            try:
                if not worker.conn.poll():
                    return
                message = worker.conn.recv()
            except (EOFError, OSError):
                return
            kind = message[0]
            if kind == "progress":
                worker.progress.update(message[1], message[2], message[3])
            elif kind == "shutdown_ready":
                worker.shutdown_ready = True
                worker.progress.checkpoint = message[1]
            elif kind == "shard_end":
                worker.shard_end = bool(message[1])
            elif kind == "failed":
                worker.failure = message[1]

    def handle_signals(self) -> None:
        while self.signals:
            signum = self.signals.pop(0)
            if not self.stopping:
                self.log.info("%s received: stopping gracefully (a second signal stops at once)",
                              signal.Signals(signum).name)
                self.stopping = True
            else:
                self.quick = True

    # -- leases -----------------------------------------------------------------------

    def table_leases_or_empty(self) -> list[Lease]:
        try:
            return self.table.list_leases()
        except DependencyError as exc:
            self.log.warning("cannot read the lease table: %s", exc)
            return []

    def adopt_own_leases(self) -> None:
        """Leases this worker id held in an earlier run are renewed and kept (as Java does)."""
        for lease in self.table.list_leases():
            if lease.owner == self.config.worker_id and not lease.is_shard_end:
                renewed = self.table.renew(lease, self.config.worker_id)
                if renewed is not None:
                    self.held[lease.key] = Held(renewed, self.clock())
                    self.log.info("kept lease %s from an earlier run of this worker id", lease.key)

    def renew_leases(self) -> None:
        failover_s = self.config.lease.failover_time_ms / 1000.0
        for key, held in list(self.held.items()):
            now = self.clock()
            try:
                renewed = self.table.renew(held.lease, self.config.worker_id)
                if renewed is None:
                    renewed = self._recheck(held.lease)
            except DependencyError as exc:
                if now - held.renewed_at < failover_s:
                    self.log.warning("renewing lease %s failed (%s); still held for %.1f s",
                                     key, exc, failover_s - (now - held.renewed_at))
                    continue
                renewed = None
                self.log.error("lease %s expired locally: no renewal for %.1f s (%s)", key, now - held.renewed_at, exc)
            if renewed is None:
                self.lose_lease(key, "taken by another worker or not renewable")
            else:
                self.held[key] = Held(renewed, now)

    def _recheck(self, lease: Lease) -> Lease | None:
        """After a failed renewal: still ours (only the counter moved) means retry with it."""
        current = self.table.get(lease.key)
        if current is None or current.owner != self.config.worker_id or current.checkpoint_owner:
            return None
        return self.table.renew(current, self.config.worker_id)

    def lose_lease(self, key: str, why: str) -> None:
        self.held.pop(key, None)
        self.log.warning("lost lease %s: %s", key, why)
        worker = self.workers.get(key)
        if worker is not None and worker.told_lost_at is None:
            self._tell(worker, "lease_lost")

    def _tell(self, worker: Worker, command: str) -> None:
        if command == "lease_lost":
            worker.told_lost_at = self.clock()
        try:
            worker.conn.send((command,))
        except (OSError, EOFError):
            pass

    def take_leases(self) -> None:
        try:
            leases = {lease.key: lease for lease in self.table.list_leases()}
        except DependencyError as exc:
            self.log.warning("lease taker skipped a round: %s", exc)
            return
        now = self.clock()
        self.observations = balance.observe(self.observations, leases.values(), now)
        candidates = {k: v for k, v in leases.items() if k not in self.finished}
        plan = balance.plan_leases(self.config.worker_id, candidates, self.observations, now,
                                   self.config.lease, self.rng)
        if plan.take or plan.steal:
            self.log.info("taker: %s", plan.reason)
        for key in plan.take + plan.steal:
            lease = leases[key]
            try:
                taken = self.table.take(lease, self.config.worker_id)
            except DependencyError as exc:
                self.log.warning("taking lease %s failed: %s", key, exc)
                continue
            if taken is None:
                self.log.info("lease %s was taken by another worker first", key)
                continue
            verb = "stole" if key in plan.steal else "took"
            self.log.info("%s lease %s (from %s, checkpoint %s)", verb, key, lease.owner or "nobody", taken.checkpoint)
            self.held[key] = Held(taken, self.clock())
            self.restarts.pop(key, None)

    def sync_shards(self, leases: dict[str, Lease]) -> None:
        try:
            shards = self.list_shards()
        except DependencyError as exc:
            self.log.warning("shard sync skipped: %s", exc)
            return
        for lease in plan_new_leases(shards, leases, self.config.initial_position):
            try:
                if self.table.create_if_absent(lease):
                    self.log.info("created lease %s at %s", lease.key, lease.checkpoint)
            except DependencyError as exc:
                self.log.warning("creating lease %s failed: %s", lease.key, exc)

    def list_shards(self) -> list[Shard]:
        shards: list[Shard] = []
        kwargs: dict[str, Any] = {"StreamName": self.config.stream_name}
        for _ in range(10_000):  # bounded paging
            try:
                page = self.kinesis.list_shards(**kwargs)
            except AWS_ERRORS as exc:
                raise translate(exc, f"ListShards on {self.config.stream_name}") from exc
            shards.extend(Shard.from_api(s) for s in page.get("Shards", ()))
            token = page.get("NextToken")
            if not token:
                break
            kwargs = {"NextToken": token}
        return shards

    # -- workers ----------------------------------------------------------------------

    def spawn_workers(self) -> None:
        now = self.clock()
        for key, held in self.held.items():
            if key in self.workers or now < self.restarts.get(key, Restart()).not_before:
                continue
            parent_conn, child_conn = self._fork.Pipe(duplex=True)
            spec = shard_worker.WorkerSpec(self.config, key, held.lease.checkpoint or _fresh(self.config),
                                           self.log_level, self.log_format)
            process = self._fork.Process(target=shard_worker.run, args=(spec, child_conn),
                                         name=f"kcl-mp {key}", daemon=False)
            process.start()
            child_conn.close()
            self.workers[key] = Worker(key, process, parent_conn, now, ShardProgress(key))
            self.log.info("started shard worker for %s (pid %d)", key, process.pid)

    def reap_workers(self) -> None:
        now = self.clock()
        for key, worker in list(self.workers.items()):
            if worker.process.is_alive():
                if worker.told_lost_at is not None and now - worker.told_lost_at > self._lost_wait_s():
                    self.log.warning("shard worker for %s did not stop after leaseLost; terminating it", key)
                    worker.process.terminate()
                    worker.told_lost_at = now
                continue
            self._read_messages(worker)
            worker.process.join(0)
            code = worker.process.exitcode
            worker.conn.close()
            del self.workers[key]
            self._after_exit(worker, code, now)

    def _after_exit(self, worker: Worker, code: int | None, now: float) -> None:
        key = worker.key
        if worker.shard_end:
            self.finished.add(key)
            self.held.pop(key, None)  # a finished shard is not renewed; resharding cleans it up
            self.log.info("shard %s ended and was checkpointed at SHARD_END", key)
            return
        if key not in self.held or self.stopping:
            return
        if code == shard_worker.EXIT_START:
            self.log.error("stopping: the processor cannot be started (%s)", worker.failure)
            self.exit_code = 1
            self.stopping = True
            return
        restart = self.restarts.setdefault(key, Restart())
        if now - worker.started_at > HEALTHY_AFTER_S:
            restart.attempts = 0
        delay = RESTART_BACKOFF.next_delay(restart.attempts, self.rng)
        restart.attempts += 1
        restart.not_before = now + delay
        self.log.warning("shard worker for %s exited with status %s (%s); restart %d in %.1f s from the last checkpoint",
                         key, code, worker.failure or "no cause reported", restart.attempts, delay)
        self._refresh_checkpoint(key)

    def _refresh_checkpoint(self, key: str) -> None:
        """A restarted worker resumes from the checkpoint its predecessor wrote."""
        try:
            current = self.table.get(key)
        except DependencyError:
            return
        if current is not None and current.owner == self.config.worker_id and key in self.held:
            self.held[key] = Held(current, self.held[key].renewed_at)

    def _lost_wait_s(self) -> float:
        return (self.config.processor.timeout_s or 0) + LEASE_LOST_WAIT_S

    def show_progress(self) -> None:
        print(render([w.progress for w in self.workers.values()], len(self.held), self.clock()), flush=True)

    # -- the graceful stop ------------------------------------------------------------

    def shutdown(self) -> int:
        grace_s = self.config.processor.shutdown_grace_ms / 1000.0
        self.log.info("shutting down: %d workers, %d leases, waiting up to %.1f s for final checkpoints",
                      len(self.workers), len(self.held), grace_s)
        for worker in self.workers.values():
            self._tell(worker, "shutdown")
        deadline = self.clock() + grace_s
        next_renew = self.clock() + self.config.lease.renew_interval_s
        while self.clock() < deadline and not self.quick:
            pending = [w for w in self.workers.values() if not w.shutdown_ready and w.process.is_alive()]
            if not pending:
                break
            self.wait(min(0.5, max(0.0, deadline - self.clock())))
            self.handle_signals()
            if self.clock() >= next_renew:  # keep the leases while processors checkpoint
                self.renew_leases()
                next_renew = self.clock() + self.config.lease.renew_interval_s
        for key in list(self.held):
            try:
                if self.table.release(key, self.config.worker_id):
                    self.log.info("released lease %s (checkpoint %s)", key,
                                  self.workers[key].progress.checkpoint if key in self.workers else "-")
            except DependencyError as exc:
                self.log.warning("releasing lease %s failed (%s); it will expire instead", key, exc)
        if self.progress_every_s:
            self.show_progress()  # the final figures, after the last checkpoints
        self.held.clear()
        for worker in self.workers.values():
            self._tell(worker, "lease_lost")
        deadline = self.clock() + 10.0
        for worker in list(self.workers.values()):
            worker.process.join(max(0.1, deadline - self.clock()))
            if worker.process.is_alive():
                self.log.warning("shard worker for %s still running; terminating it", worker.key)
                worker.process.terminate()
                worker.process.join(5.0)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join(5.0)
        self.log.info("stopped")
        return self.exit_code


def _fresh(config: Config) -> ExtendedSequenceNumber:
    """A lease without a checkpoint starts at the configured initial position."""
    return ExtendedSequenceNumber(config.initial_position.kind, 0)


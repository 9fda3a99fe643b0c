"""The supervisor: one per host. It owns the leases; shard workers own the records.

One loop, in the manner of gunicorn's arbiter: wait for the next deadline (or a signal,
or a message from a worker), handle what arrived, then do what is due:

    renew   every failoverTimeMillis/3 - 25 ms: bump the counter of each held lease;
            a lease that cannot be renewed is lost and its worker told so; a lease
            another worker asked for gets its processor stopped for a last checkpoint
    scan    every failoverTimeMillis + 25 ms: take expired leases; once per take interval
            (2 * (failoverTimeMillis + 25 ms)) also steal to balance (``balance`` decides,
            ``lease_coordinator`` writes)
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

from . import shard_worker
from .backoff import Backoff
from .config import Config
from .credentials import client as aws_client
from .lease import ExtendedSequenceNumber
from .lease_coordinator import LeaseCoordinator, Renewal
from .lease_table import LeaseTable
from .logs import ShardLog
from .progress import ShardProgress, render

RESTART_BACKOFF = Backoff(base_s=1.0, cap_s=60.0)
HEALTHY_AFTER_S = 60.0  # a worker that ran this long resets its restart count
LEASE_LOST_WAIT_S = 30.0  # how long a worker may take to finish after leaseLost


@dataclass
class Worker:
    key: str
    process: Any
    conn: Any
    started_at: float
    progress: ShardProgress
    told_lost_at: float | None = None
    handing_off: bool = False  # stopping for a handoff (not for this host's shutdown)
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
        self.leases = LeaseCoordinator(self.config, self.table, aws_client("kinesis", self.config.kinesis),
                                       self.log, self.clock, self.rng)
        self.workers: dict[str, Worker] = {}
        self.restarts: dict[str, Restart] = {}
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
            "starting: stream %s, lease table %s, renew every %.2f s, scan every %.2f s, steal at most every %.2f s",
            self.config.stream_name, lease_settings.table_name, lease_settings.renew_interval_s,
            lease_settings.watch_interval_s, lease_settings.take_interval_s)
        created = self.table.ensure_table(
            deletion_protection=lease_settings.deletion_protection_enabled, pitr=lease_settings.pitr_enabled)
        if created:
            self.log.info("created lease table %s", lease_settings.table_name)
        leases = self.table.list_leases()
        if not (lease_settings.skip_shard_sync_at_startup_if_leases_exist and leases):
            self.leases.sync_shards({lease.key: lease for lease in leases})
        self.leases.adopt_own_leases(leases)
        now = self.clock()
        due = {"renew": now + lease_settings.renew_interval_s, "scan": now,
               "sync": now + lease_settings.shard_sync_interval_ms / 1000.0,
               "progress": now + (self.progress_every_s or 0)}
        while not self.stopping:
            now = self.clock()
            wake = min(due["renew"], due["scan"], due["sync"], now + 1.0)
            if self.progress_every_s:
                wake = min(wake, due["progress"])
            self.wait(max(0.0, wake - now))
            self.handle_signals()
            if self.stopping:
                break
            now = self.clock()
            if now >= due["renew"]:
                self.handle_renewal(self.leases.renew())
                due["renew"] = now + lease_settings.renew_interval_s
            if now >= due["scan"]:
                self.leases.scan()
                due["scan"] = self.clock() + lease_settings.watch_interval_s
            if now >= due["sync"]:
                self.leases.sync_shards(self.leases.last_seen)  # creation is conditional: a scan <= one
                # scan interval old is as good as a fresh one, and saves a scan
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
                if worker.handing_off:
                    self.leases.finish_handoff(worker.key)
                    self._tell(worker, "lease_lost")
            elif kind == "lease_moved":
                self.leases.drop(worker.key, "a checkpoint was refused: the lease belongs to another worker")
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

    def handle_renewal(self, renewal: Renewal) -> None:
        for key in renewal.lost:
            worker = self.workers.get(key)
            if worker is not None and worker.told_lost_at is None:
                self._tell(worker, "lease_lost")
        for key in renewal.handoffs:
            worker = self.workers.get(key)
            if worker is None or worker.told_lost_at is not None:
                self.leases.finish_handoff(key)  # no processor to stop: its last checkpoint stands
            else:
                worker.handing_off = True
                self._tell(worker, "shutdown")
        for key in renewal.acquired:
            self.restarts.pop(key, None)

    def _tell(self, worker: Worker, command: str) -> None:
        if command == "lease_lost":
            worker.told_lost_at = self.clock()
        try:
            worker.conn.send((command,))
        except (OSError, EOFError):
            pass

    # -- workers ----------------------------------------------------------------------

    def spawn_workers(self) -> None:
        now = self.clock()
        for key, held in self.leases.held.items():
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
            self.leases.shard_ended(key)
            self.log.info("shard %s ended and was checkpointed at SHARD_END", key)
            return
        if worker.handing_off and not worker.shutdown_ready and key in self.leases.held:
            self.leases.finish_handoff(key)  # it died while stopping: the last checkpoint stands
        if key not in self.leases.held or self.stopping:
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
        self.leases.refresh(key)

    def _lost_wait_s(self) -> float:
        return (self.config.processor.timeout_s or 0) + LEASE_LOST_WAIT_S

    def show_progress(self) -> None:
        print(render([w.progress for w in self.workers.values()], len(self.leases.held), self.clock()), flush=True)

    # -- the graceful stop ------------------------------------------------------------

    def shutdown(self) -> int:
        grace_s = self.config.processor.shutdown_grace_ms / 1000.0
        self.log.info("shutting down: %d workers, %d leases, waiting up to %.1f s for final checkpoints",
                      len(self.workers), len(self.leases.held), grace_s)
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
                self.handle_renewal(self.leases.renew())
                next_renew = self.clock() + self.config.lease.renew_interval_s
        for key in self.leases.release_all():
            self.log.info("released lease %s (checkpoint %s)", key,
                          self.workers[key].progress.checkpoint if key in self.workers else "-")
        if self.progress_every_s:
            self.show_progress()  # the final figures, after the last checkpoints
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


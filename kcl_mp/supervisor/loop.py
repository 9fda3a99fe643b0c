"""The supervisor: one per host. It owns the leases; shard workers own the records.

One loop, in the manner of gunicorn's arbiter: wait for the next deadline (or a signal,
or a message from a worker), handle what arrived, then do what is due:

    renew   every failoverTimeMillis/3 - 25 ms: bump the counter of each held lease, all
            at once (``renewer``: at most maxLeaseRenewalThreads in flight, each retried
            only while its lease is still ours); a lease that cannot be renewed is lost and its worker told so; a lease
            another worker asked for gets its processor stopped for a last checkpoint
    scan    every failoverTimeMillis + 25 ms: take expired leases; once per take interval
            (2 * (failoverTimeMillis + 25 ms)) also steal to balance (``balance`` decides,
            ``lease_coordinator`` writes)
    sync    every shardSyncIntervalMillis: delete finished leases whose children are being
            processed; list the shards only if the leases leave a gap (``shard_sync.audit``)
    parents every parentShardPollIntervalMillis: re-read the parents held children wait for
    reap    notice workers that exited; restart them with backoff from the last checkpoint
            while the lease is held (a processor that did not checkpoint at SHARD_END is
            restarted the same way, so the shard end is retried, loudly); after
            kclmp.processorMaxRestarts failures in a row, release the lease for another
            host; with kclmp.processorFailure = EXIT, stop the host instead (Java's way)
    usage   every minute, log the processors' CPU and memory (sampled by the workers)
    fence   send each worker the send time of its lease's last successful renewal
            (("renewed", at): the worker delivers only while that is recent, ``fencing``);
            tell leaseLost to a worker whose lease is no longer held (a renewal failed, or a
            scan or read showed another holder)
    spawn   start a worker for every held lease that has none, once its parents finished,
            and only while its last renewal is recent (a host that was stopped or starved
            renews first: a processor never starts for a lease another host may have taken)

A shard read to its end: the worker sends its ChildShards, then gives the processor
shardEnded; the supervisor records the children in the parent's lease and creates their
leases as soon as it reads them (then scans, so they are taken at once). A host that dies
in between leaves a finished lease whose children have no lease: the next audits of any host
list the shards and create them (``shard_sync`` rule 3).

Signal handlers only queue the signal. SIGTERM/SIGINT start the graceful stop: every
worker's processor gets shutdownRequested and may checkpoint while the supervisor keeps
renewing; then the leases are released (so another host takes them at once), the
processors get leaseLost, and the process exits 0. A second signal skips the wait.
During start-up (no lease processed yet) a signal ends it at once, whatever call is
waiting or retrying, and the process exits 0. On every way out, start-up errors included,
the metrics process is ended first: it waits on its pipe, and a Python exit waits for it.
"""

from __future__ import annotations

import gc
import logging
import os
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

import multiprocess
import orjson
from multiprocess.connection import wait as wait_for

from kcl_mp.supervisor import restart_policy

from kcl_mp.retrieval import fanout

from kcl_mp.metrics import process as metrics_process

from kcl_mp.worker import shard_worker
from kcl_mp.config import Config
from kcl_mp.aws.clients import client as aws_client
from kcl_mp.leases.fencing import Hold
from kcl_mp.sequence import ExtendedSequenceNumber
from kcl_mp.leases.coordinator import LeaseCoordinator, Renewal
from kcl_mp.leases.table import LeaseTable
from kcl_mp.logs import ShardLog
from kcl_mp.metrics.catalogue import Recorder, decode_samples, encode_samples
from kcl_mp.supervisor.progress import ShardProgress, render
from kcl_mp.leases.renewer import renewal_table
from kcl_mp.worker.usage import MB, Usage

USAGE_LOG_S = 60.0  # how often the processors' CPU and memory are logged
METRICS_EVERY_S = 1.0  # how often the metrics process gets what was recorded
LEASE_LOST_WAIT_S = 30.0  # how long a worker may take to finish after leaseLost


class StartupInterrupted(BaseException):
    """SIGTERM or SIGINT during start-up. A BaseException, as KeyboardInterrupt is, so that no
    ``except Exception`` on its way out of a boto3 call (botocore's retries) can swallow it."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


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
    usage: Usage | None = None  # the processor's process tree, as last sampled
    renewed_at: float = float("-inf")  # the last renewal time it was sent


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
        self.metrics = Recorder(enabled=self.config.metrics.enabled)
        self.leases = LeaseCoordinator(self.config, self.table, aws_client("kinesis", self.config.kinesis),
                                       self.log, self.clock, self.rng, metrics=self.metrics,
                                       renewals=renewal_table(self.config))
        self.metrics_link: metrics_process.Link | None = None
        self.consumer_arn: str | None = None  # enhanced fan-out's consumer, found or registered at start
        self.loop_lag_s = 0.0
        self.workers: dict[str, Worker] = {}
        self.restarts: dict[str, Restart] = {}
        self.waiting: dict[str, tuple[str, ...]] = {}  # held leases whose parents have not finished
        self.stale: set[str] = set()  # held leases not started for want of a recent renewal (logged once)
        self.counters: Counter[str] = Counter()  # events an operator should see (the metrics issue publishes them)
        self.due: dict[str, float] = {}
        self.sync_failures = 0
        self.signals: list[int] = []
        self.starting = False  # start-up calls are running: a signal interrupts them
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
        """NO LOGGING HERE: only queue the signal; the loop handles it. During start-up there
        is no loop yet, and a call may wait or retry for minutes: end the start-up at once."""
        if self.starting:
            self.starting = False  # once: a second signal must not break the stop of the metrics process
            raise StartupInterrupted(signum)
        self.signals.append(signum)

    def _drain_wakeups(self) -> None:
        try:
            while os.read(self._wake_r, 512):
                pass
        except BlockingIOError:
            pass

    # -- the loop ---------------------------------------------------------------------

    def run(self) -> int:
        try:
            self._start_up()
        except StartupInterrupted as stop:
            self.log.warning("%s received during start-up: stopped before processing any lease",
                             signal.Signals(stop.signum).name)
            self._stop_metrics()
            return 0
        except BaseException:
            self.starting = False  # a signal now only queues: it must not cut the stop below short
            self._stop_metrics()  # left running, it would keep this process from exiting (it waits on the pipe)
            raise
        lease_settings = self.config.lease
        due = self.due
        while not self.stopping:
            now = self.clock()
            wake = min(due["renew"], due["scan"], due["sync"], due["parents"], now + 1.0)
            if self.progress_every_s:
                wake = min(wake, due["progress"])
            self.wait(max(0.0, wake - now))
            self.handle_signals()
            if self.stopping:
                break
            now = self.clock()
            if now >= due["renew"]:
                self.loop_lag_s = now - due["renew"]
                self.metrics.add("loop_lag", self.loop_lag_s)
                self.handle_renewal(self.leases.renew())
                due["renew"] = now + lease_settings.renew_interval_s
            if now >= due["scan"]:
                self.leases.scan()
                due["scan"] = self.clock() + lease_settings.watch_interval_s
            if now >= due["sync"]:
                self._after_sync(self.leases.audit(), self.clock())
            if now >= due["parents"]:
                self.leases.poll_parents(sorted({p for parents in self.waiting.values() for p in parents}))
                due["parents"] = now + lease_settings.parent_shard_poll_interval_ms / 1000.0
            if now >= due["usage"]:
                self.log_usage()
                due["usage"] = now + USAGE_LOG_S
            if self.metrics_link is not None and self.clock() >= due["metrics"]:  # at once after a long round
                self.ship_metrics()
                due["metrics"] = now + METRICS_EVERY_S
            self.fence_workers()
            self.reap_workers()
            self.spawn_workers()
            if self.progress_every_s and now >= due["progress"]:
                self.show_progress()
                due["progress"] = now + self.progress_every_s
        return self.shutdown()

    def _start_up(self) -> None:
        """Everything before the loop, in an order that writes nothing for a stream that
        does not exist. An error raises (the CLI prints it; exit 1); a signal ends the
        start-up at once, even inside a call that is waiting or retrying."""
        if self.metrics.enabled:  # first: it must be forked before any thread or worker exists
            self.metrics_link = metrics_process.start(self.config, self.log_level, self.log_format)
        self.starting = True
        self._install_signals()
        lease_settings = self.config.lease
        self.log.info(
            "starting: stream %s, lease table %s, renew every %.2f s, scan every %.2f s, steal at most every %.2f s",
            self.config.stream_name, lease_settings.table_name, lease_settings.renew_interval_s,
            lease_settings.watch_interval_s, lease_settings.take_interval_s)
        stream_arn = self.leases.describe_stream()
        created = self.table.ensure_table(
            deletion_protection=lease_settings.deletion_protection_enabled, pitr=lease_settings.pitr_enabled)
        if created:
            self.log.info("created lease table %s", lease_settings.table_name)
        self.leases.join_fleet()  # clientVersionConfig set: the KCL 3.x role (leases/fleet3.py)
        if self.config.retrieval.mode == "FANOUT":
            self.consumer_arn = fanout.consumer_arn(self.config, stream_arn, self.leases.kinesis, self.log)
        found = self.table.scan()
        leases = list(found.leases)
        if found.others:
            self.log.info("lease table %s also holds %d rows that are not leases, left alone: %s",
                          lease_settings.table_name, len(found.others),
                          ", ".join(f"{row.key} ({row.entity_type or row.why})" for row in found.others))
        self.leases.last_seen = {lease.key: lease for lease in leases}
        sync_interval_s = lease_settings.shard_sync_interval_ms / 1000.0
        now = self.clock()
        self.due.update(renew=now + lease_settings.renew_interval_s, scan=now, sync=now + sync_interval_s,
                        parents=now + lease_settings.parent_shard_poll_interval_ms / 1000.0, usage=now + USAGE_LOG_S,
                        progress=now + (self.progress_every_s or 0), metrics=now)
        if not (lease_settings.skip_shard_sync_at_startup_if_leases_exist and leases):
            self._after_sync(self.leases.sync_shards(self.leases.last_seen, "start-up"), now)
        self.leases.adopt_own_leases(leases)
        self.starting = False  # from here a signal is queued for the loop: the graceful stop
        # Everything made so far (modules, service models, clients) is shared with the shard
        # workers forked from here on; keep the collector from touching it, so those pages
        # stay shared instead of being copied into every worker (gc.freeze's purpose).
        gc.freeze()

    def _after_sync(self, ok: bool, now: float) -> None:
        """Next sync: on the cadence, or after listShardsBackoffTimeInMillis if it failed."""
        settings = self.config.lease
        self.sync_failures = 0 if ok else self.sync_failures + 1
        if self.sync_failures and self.sync_failures <= settings.max_list_shards_retry_attempts:
            self.due["sync"] = now + settings.list_shards_backoff_ms / 1000.0
            return
        if self.sync_failures:
            self.log.error("shard sync failed %d times in a row; next try in shardSyncIntervalMillis",
                           self.sync_failures)
            self.sync_failures = 0
        self.due["sync"] = now + settings.shard_sync_interval_ms / 1000.0

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
                self.metrics.merge(decode_samples(message[4]))
            elif kind == "shutdown_ready":
                worker.shutdown_ready = True
                worker.progress.checkpoint = message[1]
                if worker.handing_off:
                    self.leases.finish_handoff(worker.key)
                    self._tell(worker, "lease_lost")
            elif kind == "lease_moved":
                self.leases.drop(worker.key, "a checkpoint was refused: the lease belongs to another worker")
            elif kind == "children":
                if self.leases.create_children(worker.key, message[1]):
                    self.due["scan"] = self.clock()  # take the new leases now, not a scan later
                else:
                    self.log.info("shard %s ended without ChildShards: syncing shards now", worker.key)
                    self.due["sync"] = self.clock()
            elif kind == "shard_end":
                worker.shard_end = bool(message[1])
            elif kind == "failed":
                worker.failure = message[1]
            elif kind == "usage":
                worker.usage = Usage(message[1], message[2])
                self.metrics.add("processor_cpu", worker.usage.cpu_percent, worker.key)
                self.metrics.add("processor_rss", worker.usage.rss_bytes, worker.key)

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

    def fence_workers(self) -> None:
        """Each worker learns of its lease's renewals; one whose lease is gone is told so. The
        times are the supervisor's clock, ``time.monotonic()``: host-wide, so the workers'
        own clocks read the same."""
        for key, worker in self.workers.items():
            if worker.told_lost_at is not None:
                continue
            held = self.leases.held.get(key)
            if held is None:
                self.log.info("shard %s: its lease is no longer held here; stopping its processor", key)
                self._tell(worker, "lease_lost")
            elif held.renewed_at > worker.renewed_at:
                worker.renewed_at = held.renewed_at
                try:
                    worker.conn.send(("renewed", held.renewed_at))
                except (OSError, EOFError):
                    pass

    def spawn_workers(self) -> None:
        if self.stopping:
            return
        now = self.clock()
        failover_s = self.config.lease.failover_time_ms / 1000.0
        self.stale &= set(self.leases.held)
        for key in [k for k in self.waiting if k not in self.leases.held]:
            del self.waiting[key]
        for key, held in self.leases.held.items():
            if key in self.workers or now < self.restarts.get(key, Restart()).not_before:
                continue
            if self._waits_for_parents(key):
                continue
            if not Hold(failover_s, held.renewed_at).fresh(now):
                if key not in self.stale:
                    self.stale.add(key)
                    self.log.warning("not starting a processor for %s: its lease was last renewed %.1f s ago "
                                     "(another host may have taken it); waiting for the next renewal", key,
                                     now - held.renewed_at)
                continue
            self.stale.discard(key)
            parent_conn, child_conn = self._fork.Pipe(duplex=True)
            spec = shard_worker.WorkerSpec(self.config, key, held.lease.checkpoint or _fresh(self.config),
                                           self.log_level, self.log_format, self.consumer_arn, held.renewed_at)
            process = self._fork.Process(target=shard_worker.run, args=(spec, child_conn),
                                         name=f"kcl-mp {key}", daemon=False)
            process.start()
            child_conn.close()
            self.workers[key] = Worker(key, process, parent_conn, now, ShardProgress(key), renewed_at=held.renewed_at)
            self.log.info("started shard worker for %s (pid %d)", key, process.pid)

    def _waits_for_parents(self, key: str) -> bool:
        """A child shard is processed only after every parent reached SHARD_END."""
        parents = tuple(self.leases.waiting_for(key))
        if parents:
            if self.waiting.get(key) != parents:
                self.log.info("lease %s waits for its parent shard(s) %s to reach SHARD_END", key, ", ".join(parents))
            self.waiting[key] = parents
            return True
        if self.waiting.pop(key, None):
            self.log.info("the parents of %s are finished: starting it", key)
        return False

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
        """Gather the facts, let ``restart_policy.after_exit`` decide, carry the decision out."""
        key = worker.key
        if not worker.shard_end and worker.handing_off and not worker.shutdown_ready and key in self.leases.held:
            self.leases.finish_handoff(key)  # it died while stopping: the last checkpoint stands
        cannot_start = code == shard_worker.EXIT_START
        if key in self.leases.held and not (self.stopping or worker.shard_end or cannot_start):
            self.leases.refresh(key)  # a restart resumes from the last checkpoint its predecessor wrote
        held = self.leases.held.get(key)
        gone = restart_policy.Gone(worker.shard_end, code, worker.failure, now - worker.started_at, held is not None,
                          self.stopping, held is not None and held.lease.is_shard_end, cannot_start,
                          code == shard_worker.EXIT_PROCESSOR)
        decision = restart_policy.after_exit(gone, self.restarts.get(key, Restart()).attempts, self.config.processor, self.rng)
        self.counters.update(decision.counters)
        limit = self.config.processor.max_restarts
        if decision.action == "finished":
            self.leases.shard_ended(key)
            self.restarts.pop(key, None)
            self.log.info("shard %s %s", key, decision.why)
        elif decision.action == "stop_host":
            self.log.error("%s: %s", key, decision.why)
            self.exit_code = 1
            self.stopping = True
        elif decision.action == "release":
            self.restarts.pop(key, None)
            cooldown = self.leases.give_up(key)
            self.log.error("shard %s: %s; %d failures in a row (kclmp.processorMaxRestarts = %d): released the lease "
                           "for another host to try; this host leaves it alone for %.0f s", key, decision.why,
                           decision.attempts, limit, cooldown)
        elif decision.action == "restart":
            self.restarts[key] = Restart(decision.attempts, now + decision.delay_s)
            self.metrics.add("processor_restarts", 1, key)
            self.log.error("shard %s: %s; restart %d of %d in %.1f s from the last checkpoint", key, decision.why,
                           decision.attempts, limit, decision.delay_s)

    def _lost_wait_s(self) -> float:
        return (self.config.processor.timeout_s or 0) + LEASE_LOST_WAIT_S

    def log_usage(self) -> None:
        """One line for the host's processors: CPU and memory in all, and the largest."""
        sampled = [(w.key, w.usage) for w in self.workers.values() if w.usage is not None]
        if not sampled:
            return
        key, largest = max(sampled, key=lambda item: item[1].rss_bytes)
        cpu = sum(u.cpu_percent for _, u in sampled)
        rss = sum(u.rss_bytes for _, u in sampled)
        restarts = self.counters["processor_restarts"]
        self.log.info("processors: %d sampled, cpu %.0f %% and rss %.0f MB in all; largest %s (%s); "
                      "%d restarts so far", len(sampled), cpu, rss / MB, key, largest, restarts)

    def ship_metrics(self) -> None:
        """Send what was recorded, with the current gauges, to the metrics process. If the
        last line is still in the pipe, keep recording into the same statistic sets."""
        link = self.metrics_link
        if link is None or not link.idle():
            return
        now = self.clock()
        workers = self.workers.values()
        fleet = self.leases.fleet
        gauges: dict[str, dict[str, float]] = {
            "leases_held": {"": len(self.leases.held)},
            "loop_lag": {"": self.loop_lag_s},
            "millis_behind_latest": {w.key: w.progress.millis_behind_latest for w in workers
                                     if w.progress.millis_behind_latest is not None},
            "processor_cpu": {w.key: w.usage.cpu_percent for w in workers if w.usage is not None},
            "processor_rss": {w.key: w.usage.rss_bytes for w in workers if w.usage is not None},
        }
        if fleet is not None:
            gauges.update(total_leases={"": fleet.total_leases}, total_shards={"": fleet.open_leases},
                          unclaimed_leases={"": fleet.unclaimed}, workers={"": len(fleet.worker_leases)},
                          worker_leases=fleet.worker_leases)
        oldest = min((held.renewed_at for held in self.leases.held.values()), default=None)
        state = {"held": len(self.leases.held), "workers_running": len(self.workers),
                 "renewed_s_ago": None if oldest is None else round(now - oldest, 3),
                 "loop_lag_s": round(self.loop_lag_s, 3), "stopping": self.stopping}
        link.send(orjson.dumps({"samples": encode_samples(self.metrics.drain()), "gauges": gauges,
                                "state": state, "leases": sorted(self.leases.held)}) + b"\n")

    def show_progress(self) -> None:
        print(render([w.progress for w in self.workers.values()], len(self.leases.held), self.clock()), flush=True)

    # -- the graceful stop ------------------------------------------------------------

    def shutdown(self) -> int:
        grace_s = self.config.processor.shutdown_grace_ms / 1000.0
        self.log.info("shutting down: %d workers, %d leases, waiting up to %.1f s for final checkpoints",
                      len(self.workers), len(self.leases.held), grace_s)
        self.log_usage()  # the last figures, for the record
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
                self.fence_workers()  # final checkpoints are written only while the hold is fresh
                next_renew = self.clock() + self.config.lease.renew_interval_s
            self.ship_metrics()  # /healthz stays fresh while processors checkpoint
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
        if self.metrics_link is not None:
            self.metrics_link.flush(2.0)
            self.ship_metrics()  # the last figures; then the metrics process publishes them and ends
        self._stop_metrics()
        self.log.info("stopped")
        return self.exit_code

    def _stop_metrics(self) -> None:
        """Close the pipe, so the metrics process publishes what it has and ends (bounded)."""
        if self.metrics_link is not None:
            self.metrics_link.close()
            self.metrics_link = None


def _fresh(config: Config) -> ExtendedSequenceNumber:
    """A lease without a checkpoint starts at the configured initial position."""
    return ExtendedSequenceNumber(config.initial_position.kind, 0)


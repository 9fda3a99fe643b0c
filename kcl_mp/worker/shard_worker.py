"""One shard's worker process: fetch records, drive the processor child, checkpoint.

Forked by the supervisor (``multiprocess``), one per held lease. It builds its own boto3
clients after the fork, reseeds its random generator, ignores the terminal's SIGINT (the
supervisor decides when to stop) and turns SIGTERM into an orderly exit that stops the
processor child's whole process group.

Fencing (``fencing.Hold``): the worker knows when its lease was last confirmed, as the send
time of the supervisor's last successful renewal (``time.monotonic()``, host-wide). It starts
the processor, hands it records or the shard's end, and writes its checkpoints only while
that is younger than failoverTimeMillis less a margin. Otherwise delivery pauses (logged,
with the age) until a renewal arrives or the lease is lost; a checkpoint asked for meanwhile
waits at most ``fencing.checkpoint_wait_s`` for one: lease lost -> the processor gets
ShutdownException, then leaseLost (as for a refused checkpoint); no renewal in time ->
KinesisClientLibDependencyException, which it may retry. A supervisor that is stopped or
starved therefore stops its workers' deliveries and checkpoints before another host may
take their leases, and a host that was stopped as a whole delivers nothing on waking.

Control channel (a duplex pipe), supervisor -> worker:

    ("renewed", at)   the lease was renewed by a request sent at ``at`` (the supervisor's
                      ``time.monotonic()``); the spawn carries the first (``WorkerSpec``)
    ("shutdown",)     graceful stop: no more records; the child gets shutdownRequested and
                      may checkpoint; the worker answers ("shutdown_ready", checkpoint) and
                      keeps the child until ("lease_lost",)
    ("lease_lost",)   the lease is gone (lost, stolen or released): leaseLost, then exit

worker -> supervisor:

    ("progress", records_delivered, last_checkpoint, millis_behind_latest, samples)   at most
                           1/s; samples: the metrics recorded since (``metrics.encode_samples``)
    ("shutdown_ready", last_checkpoint)
    ("children", child_shards)   the shard is read to its end: ChildShards (ListShards-like
                                 dicts, maybe empty), sent before the processor hears of it
    ("shard_end", checkpointed_shard_end)
    ("usage", cpu_percent, rss_bytes)   the processor's process tree, every SAMPLE_EVERY_S
    ("lease_moved",)       a checkpoint was refused (the lease is another worker's): the
                           child got the error, then leaseLost, and the worker exits
    ("failed", cause)      just before a non-zero exit

Exit status: 0 done (lease lost, shutdown, shard end); EXIT_PROCESSOR when the child broke
the protocol (restart with backoff); EXIT_DEPENDENCY when AWS kept failing; EXIT_START
when the executable cannot be started at all (a configuration error: stop the host).
"""

from __future__ import annotations

import logging
import os
import random
import signal
import threading
import time
from dataclasses import dataclass
from functools import partial
from typing import Any

from kcl_mp import logs
from kcl_mp.config import Config
from kcl_mp.aws.clients import client as aws_client
from kcl_mp.multilang.child import ProcessorChild
from kcl_mp.errors import KclMpError, ProcessorError, ProcessorStartError
from kcl_mp.retrieval.fanout import FanOutFetcher
from kcl_mp.leases.fencing import Hold, checkpoint_wait_s
from kcl_mp.retrieval.polling import Fetched, Fetcher, FetchFailed, ShardEnded
from kcl_mp.sequence import ExtendedSequenceNumber
from kcl_mp.leases.table import LeaseTable
from kcl_mp.metrics.catalogue import Recorder, encode_samples
from kcl_mp.worker.usage import MB, Sampler
from kcl_mp.multilang.wire import DEPENDENCY, LEASE_MOVED, make_batch

EXIT_OK = 0
EXIT_START = 3
EXIT_PROCESSOR = 4
EXIT_DEPENDENCY = 5

PROGRESS_EVERY_S = 1.0
SAMPLE_EVERY_S = 2.0
FAILED_GRACE_S = 1.0  # a processor that broke the protocol gets this long to exit before SIGTERM


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a shard worker needs, built before the fork."""

    config: Config
    shard_id: str
    checkpoint: ExtendedSequenceNumber
    log_level: str = "INFO"
    log_format: str = "text"
    consumer_arn: str | None = None  # enhanced fan-out: SubscribeToShard through this consumer
    renewed_at: float = float("-inf")  # the send time of the renewal that confirmed the lease at the spawn


class _Terminated(Exception):
    """SIGTERM from the supervisor: stop now, but still stop the child properly."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise _Terminated()


def run(spec: WorkerSpec, conn: Any) -> None:
    """Process entry point (runs in the forked child)."""
    signal.set_wakeup_fd(-1)  # the supervisor's wake-up pipe is not ours to write to
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _on_sigterm)
    random.seed()
    logs.setup(spec.log_level, spec.log_format, spec.config.worker_id)
    log = logs.ShardLog(logging.getLogger("kcl_mp.shard_worker"), spec.config.worker_id, spec.shard_id)
    try:
        code = ShardWorker(spec, conn, log).run()
    except _Terminated:
        log.warning("terminated by the supervisor")
        code = EXIT_OK
    conn.close()
    os._exit(code)  # skip atexit handlers inherited from the supervisor


class ShardWorker:
    def __init__(self, spec: WorkerSpec, conn: Any, log: logs.ShardLog):
        self.spec = spec
        self.config = spec.config
        self.conn = conn
        self.log = log
        self.delivered = 0
        self.last_progress = 0.0
        self.millis_behind: int | None = None
        self.metrics = Recorder(enabled=self.config.metrics.enabled)
        self.checkpointed_at = time.monotonic()  # the checkpoint's age counts from the lease's take
        self.stderr_dropped = 0  # the processor's dropped stderr lines already in the metrics
        self._send_lock = threading.Lock()  # the sampler thread reports too
        self.failover_s = self.config.lease.failover_time_ms / 1000.0
        self.hold = Hold(self.failover_s, spec.renewed_at)
        self.paused_at: float | None = None  # when delivery paused for a stale hold
        self.commands: list[str] = []  # commands that arrived while a checkpoint waited for a renewal

    def send(self, *message: Any) -> None:
        try:
            with self._send_lock:
                self.conn.send(message)
        except (OSError, EOFError):
            pass  # the supervisor is gone; the lease will expire on its own

    def run(self) -> int:
        config = self.config
        table = LeaseTable(aws_client("dynamodb", config.dynamodb), config.lease.table_name)
        shard_id = self.spec.shard_id
        owner = config.worker_id

        def checkpoint(position: ExtendedSequenceNumber) -> Any:
            refused = self._hold_for_checkpoint()
            if refused is not None:
                return refused
            started = time.monotonic()
            try:
                error = table.checkpoint(shard_id, owner, position)
            finally:
                self.metrics.add("checkpoint_time", time.monotonic() - started, shard_id)
            if error is None:
                self.checkpointed_at = time.monotonic()
            return error

        child = ProcessorChild(
            config.processor.command,
            shard_id,
            checkpoint,
            timeout_s=config.processor.timeout_s,
            log=self.log,
            stderr_lines_per_10s=config.processor.stderr_lines_per_10s,
        )
        fetcher_class = partial(FanOutFetcher, consumer_arn=self.spec.consumer_arn) if self.spec.consumer_arn else Fetcher
        fetcher = fetcher_class(
            aws_client("kinesis", config.kinesis, raw_records=True),
            config.stream_name,
            shard_id,
            self.spec.checkpoint,
            config.initial_position,
            config.retrieval,
            make_batch,
            self.log,
            measure_bytes=self.metrics.enabled,
        )
        grace_s = config.processor.shutdown_grace_ms / 1000.0
        limit_mb = config.processor.memory_limit_mb
        sampler: Sampler | None = None
        try:
            if not self._await_start():
                return EXIT_OK
            child.start()
            self.log.info("processor started: %s (pid %s) from checkpoint %s",
                          " ".join(config.processor.command), child.pid, self.spec.checkpoint)
            assert child.pid is not None
            sampler = Sampler(child.pid, SAMPLE_EVERY_S, limit_mb * MB,
                              lambda usage: self.send("usage", usage.cpu_percent, usage.rss_bytes))
            sampler.start()
            child.initialize(self.spec.checkpoint)
            fetcher.start()
            return self._loop(child, fetcher)
        except ProcessorStartError as exc:
            self.log.error("cannot start the processor: %s", exc)
            self.send("failed", str(exc))
            return EXIT_START
        except ProcessorError as exc:
            cause = str(exc)
            if sampler is not None and sampler.over_limit is not None:
                cause = (f"the processor's memory ({sampler.over_limit.rss_bytes / MB:.0f} MB) exceeded "
                         f"kclmp.processorMemoryLimitMB = {limit_mb}; it was killed ({exc})")
            self.log.error("processor failed: %s", cause)
            self.send("failed", cause)
            grace_s = min(grace_s, FAILED_GRACE_S)  # its conversation is broken: nothing to wait for
            return EXIT_PROCESSOR
        except KclMpError as exc:
            self.log.error("%s", exc)
            self.send("failed", str(exc))
            return EXIT_DEPENDENCY
        finally:
            if sampler is not None:
                sampler.stop()
            fetcher.stop()
            code = child.close(grace_s)
            self.log.info("processor exited with status %s", code)
            self._progress(child, force=True)  # the last figures

    def _loop(self, child: ProcessorChild, fetcher: Fetcher) -> int:
        item: Any = None  # fetched, not yet handed over (kept while delivery is paused)
        while True:
            command = self._control(0.0)
            if command == "lease_lost":
                fetcher.stop()
                child.lease_lost()
                return EXIT_OK
            if command == "shutdown":
                fetcher.stop()
                return self._shutdown(child)
            if item is None:
                item = fetcher.next(timeout=0.25)
                if item is None:
                    self._progress(child)
                    continue
            if isinstance(item, FetchFailed):
                raise item.error
            now = time.monotonic()
            if not self.hold.fresh(now):  # nothing reaches the processor until a renewal is confirmed
                self._pause(now)
                if command := self._control(0.25):
                    self.commands.append(command)
                self._progress(child)
                continue
            self._resume(now)
            if isinstance(item, Fetched):
                started = time.monotonic()
                child.process_records(item.batch)
                self._record(item, time.monotonic() - started)
                item = None
                self._progress(child)
                if child.lease_moved:
                    fetcher.stop()
                    self.send("lease_moved")
                    child.lease_lost()
                    return EXIT_OK
            elif isinstance(item, ShardEnded):
                self.send("children", item.children)  # the supervisor creates the children's leases
                return self._shard_end(child)

    # -- fencing ----------------------------------------------------------------------

    def _pause(self, now: float) -> None:
        if self.paused_at is None:
            self.paused_at = now
            self.log.warning("delivery paused for shard %s: last renewal %.1f s ago (another host may take the "
                             "lease %.1f s after it); waiting for a renewal", self.spec.shard_id, self.hold.age(now),
                             self.failover_s)

    def _resume(self, now: float) -> None:
        if self.paused_at is not None:
            self.log.info("delivery resumed for shard %s after %.1f s: renewed %.1f s ago", self.spec.shard_id,
                          now - self.paused_at, self.hold.age(now))
            self.paused_at = None

    def _await_start(self) -> bool:
        """The processor starts only while the hold is fresh (the supervisor checked it before
        the fork, which may have been a while ago). False: the lease went away first."""
        while True:
            now = time.monotonic()
            if self.hold.fresh(now):
                self._resume(now)
                return True
            self._pause(now)
            command = self._control(0.25)
            if command == "shutdown":  # nothing was started: nothing to checkpoint
                self.send("shutdown_ready", str(self.spec.checkpoint))
            if command in ("shutdown", "lease_lost"):
                self.log.info("shard %s: not starting its processor (the lease was %s before a renewal came)",
                              self.spec.shard_id, "lost" if command == "lease_lost" else "given up")
                return False

    def _hold_for_checkpoint(self) -> str | None:
        """None when a checkpoint may be written now (at once, or once a renewal came); else
        the error the processor gets: LEASE_MOVED if the lease was lost meanwhile, DEPENDENCY
        if no renewal came within ``checkpoint_wait_s``."""
        now = time.monotonic()
        if self.hold.fresh(now):
            return None
        self._pause(now)
        deadline = now + checkpoint_wait_s(self.failover_s)
        while now < deadline:
            command = self._control(min(0.25, deadline - now))
            if command is not None:
                self.commands.append(command)  # obeyed once the exchange is over
            if command == "lease_lost":
                return LEASE_MOVED
            now = time.monotonic()
            if self.hold.fresh(now):
                self._resume(now)
                return None
        self.log.warning("checkpoint of shard %s not written: no renewal for %.1f s (its lease may be another "
                         "host's by now)", self.spec.shard_id, self.hold.age(now))
        return DEPENDENCY

    def _record(self, item: Fetched, seconds: float) -> None:
        shard_id = self.spec.shard_id
        self.delivered += item.count
        self.millis_behind = item.millis_behind_latest
        self.metrics.add("records", item.count, shard_id)
        self.metrics.add("bytes", item.data_bytes, shard_id)
        self.metrics.add("process_time", seconds, shard_id)
        if item.millis_behind_latest is not None:
            self.metrics.add("millis_behind_latest", item.millis_behind_latest, shard_id)

    def _control(self, timeout: float) -> str | None:
        """The next command from the supervisor (renewals are taken in on the way)."""
        if self.commands:
            return self.commands.pop(0)
        try:
            ready = self.conn.poll(timeout)
            while ready:
                message = self.conn.recv()
                if message[0] != "renewed":
                    return message[0]
                self.hold.renewed(message[1])
                ready = self.conn.poll(0)
        except (OSError, EOFError):
            return "lease_lost"  # the supervisor died: we cannot renew, so we do not own it
        return None

    def _progress(self, child: ProcessorChild, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self.last_progress >= PROGRESS_EVERY_S:
            self.last_progress = now
            if self.metrics.enabled:
                shard_id, dropped = self.spec.shard_id, child.stderr_dropped
                self.metrics.add("checkpoint_age", now - self.checkpointed_at, shard_id)
                self.metrics.add("processor_stderr_dropped", dropped - self.stderr_dropped, shard_id)
                self.stderr_dropped = dropped
            samples = encode_samples(self.metrics.drain()) if self.metrics.enabled else []
            self.send("progress", self.delivered, str(child.last_checkpoint), self.millis_behind, samples)

    def _shutdown(self, child: ProcessorChild) -> int:
        child.shutdown_requested()
        self._progress(child, force=True)
        self.send("shutdown_ready", str(child.last_checkpoint))
        # Keep the child until the supervisor has released the lease (Java's order:
        # shutdownRequested, then leaseLost). Bounded: the supervisor's own grace.
        deadline = time.monotonic() + self.config.processor.shutdown_grace_ms / 1000.0 + 30.0
        while time.monotonic() < deadline:
            if self._control(0.5) == "lease_lost":
                break
        child.lease_lost()
        return EXIT_OK

    def _shard_end(self, child: ProcessorChild) -> int:
        checkpointed = child.shard_ended()
        self._progress(child, force=True)
        self.send("shard_end", checkpointed)  # the supervisor logs, counts and retries a missed one
        return EXIT_OK


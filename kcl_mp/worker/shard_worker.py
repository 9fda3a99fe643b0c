"""One shard's driver: fetch records, drive the processor child, checkpoint.

It runs on its own thread inside a pool process (``worker.pool``), which drives many shards
and shares one set of boto3 clients between them. The supervisor's messages for this shard
(``worker.channel``) reach it through an inbox; what it reports goes out through ``send``.

Fencing (``fencing.Hold``): the driver knows when its lease was last confirmed, as the send
time of the supervisor's last successful renewal (``time.monotonic()``, host-wide; the pool
process updates the hold as ``Renewed`` batches arrive). It starts the processor, hands it
records or the shard's end, and writes its checkpoints only while that is younger than
failoverTimeMillis less a margin. Otherwise delivery pauses (logged, with the age) until a
renewal arrives or the lease is lost; a checkpoint asked for meanwhile waits at most
``fencing.checkpoint_wait_s`` for one: lease lost -> the processor gets ShutdownException,
then leaseLost (as for a refused checkpoint); no renewal in time ->
KinesisClientLibDependencyException, which it may retry. A supervisor that is stopped or
starved therefore stops its shards' deliveries and checkpoints before another host may
take their leases, and a host that was stopped as a whole delivers nothing on waking.

The processor starts only once the fetcher has its first shard iterator (``Positioned``): a
lease whose shard is not in the stream (ResourceNotFound, confirmed by ListShards) never
starts one; its lease is checkpointed at SHARD_END here, as Java ends such a shard, and the
shard sync deletes it.

Its result is the code of ``channel.ShardExited``: EXIT_OK done (lease lost, shutdown,
shard end); EXIT_PROCESSOR when the child broke the protocol (restart with backoff);
EXIT_DEPENDENCY when AWS kept failing; EXIT_START when the executable cannot be started at
all (a configuration error: stop the host).
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kcl_mp import logs
from kcl_mp.config import Config
from kcl_mp.errors import (
    EXIT_DEPENDENCY,
    EXIT_OK,
    EXIT_PROCESSOR,
    EXIT_START,
    CheckpointOutcome,
    KclMpError,
    ProcessorError,
    ProcessorStartError,
)
from kcl_mp.leases.fencing import Hold, checkpoint_wait_s
from kcl_mp.leases.table import LeaseTable
from kcl_mp.metrics.catalogue import Recorder, encode_samples
from kcl_mp.multilang.child import ProcessorChild
from kcl_mp.multilang.wire import Batch
from kcl_mp.retrieval.polling import Fetched, Fetcher, FetchFailed, FetchResult, ShardEnded
from kcl_mp.retrieval.prefetch import PoolBudget
from kcl_mp.retrieval.streams import lease_stream, open_fetcher
from kcl_mp.sequence import SHARD_END, ExtendedSequenceNumber
from kcl_mp.worker import channel
from kcl_mp.worker.usage import MB, Tracker, Watch

PROGRESS_EVERY_S = 1.0
FAILED_GRACE_S = 1.0  # a processor that broke the protocol gets this long to exit before SIGTERM

# What the pool process puts in a shard's inbox (renewals go straight to its ``hold``).
SHUTDOWN, LEASE_LOST, TERMINATE = "shutdown", "lease_lost", "terminate"
CHILDREN_CREATED = "children_created"


@dataclass(frozen=True)
class Shared:
    """What a pool process's shards share: the configuration, one client each, the sampler."""

    config: Config
    table: LeaseTable
    kinesis: Any  # the stream's GetRecords/SubscribeToShard client (blobs kept as the wire's base64)
    tracker: Tracker
    prefetch: PoolBudget  # what every shard's fetcher reads ahead, together (kclmp.workerProcessMaxByteSize)


class Terminated(Exception):
    """The supervisor's Terminate: stop now, but still stop the child properly."""


class ShardDriver:
    def __init__(self, shared: Shared, start: channel.Start, inbox: queue.Queue[str],
                 send: Callable[[Any], None], log: logs.ShardLog):
        self.shared = shared
        self.start = start
        self.config = shared.config
        self.shard_id = start.shard  # the lease's key (a multi-stream one also names its stream)
        self.stream = lease_stream(self.config, start.shard, start.stream)  # the stream it reads, its processor
        self.inbox = inbox
        self.send = send
        self.log = log
        self.delivered = 0
        self.delivered_bytes = 0
        self.last_progress = 0.0
        self.millis_behind: int | None = None
        self.metrics = Recorder(enabled=self.config.metrics.enabled)
        self.checkpointed_at = time.monotonic()  # the checkpoint's age counts from the lease's take
        self.stderr_dropped = 0  # the processor's dropped stderr lines already in the metrics
        self.failover_s = self.config.lease.failover_time_ms / 1000.0
        self.hold = Hold(self.failover_s, start.renewed_at)
        self.paused_at: float | None = None  # when delivery paused for a stale hold
        self.commands: list[str] = []  # commands that arrived while a checkpoint waited for a renewal
        self.child: ProcessorChild | None = None

    def run(self) -> int:
        config = self.config
        table = self.shared.table
        shard_id = self.shard_id
        owner = config.worker_id

        def checkpoint(position: ExtendedSequenceNumber) -> CheckpointOutcome | None:
            refused = self._hold_for_checkpoint()
            if refused is not None:
                return refused
            started = time.monotonic()
            try:
                outcome = table.checkpoint(shard_id, owner, position)
            finally:
                self.metrics.add("checkpoint_time", time.monotonic() - started, shard_id)
            if outcome is None:
                self.checkpointed_at = time.monotonic()
            return outcome

        stream = self.stream
        child = self.child = ProcessorChild(
            stream.command,
            stream.shard_id,
            checkpoint,
            timeout_s=config.processor.timeout_s,
            log=self.log,
            stderr_lines_per_10s=config.processor.stderr_lines_per_10s,
            stderr_bytes_per_10s=config.processor.stderr_bytes_per_10s,
            stderr_level=logging.getLevelName(config.processor.stderr_level),
            env=stream.env,
            stream=stream.initialize_keys,
        )
        fetcher = open_fetcher(config, self.shared.kinesis, stream, self.start.checkpoint, self.log,
                               self.shared.prefetch, self.start.consumer_arn, self.start.hash_range)
        grace_s = config.processor.shutdown_grace_ms / 1000.0
        limit_mb = config.processor.memory_limit_mb
        watch: Watch | None = None
        try:
            if not self._await_start():
                return EXIT_OK
            fetcher.start()
            first = self._await_position(fetcher)
            if first is None:
                return EXIT_OK
            if isinstance(first, FetchFailed):
                raise first.error
            if isinstance(first, ShardEnded):  # gone from the stream: nothing to deliver, no processor
                return self._shard_gone()
            if not self._await_start():  # the iterator may have taken retries: the hold is fresh again first
                return EXIT_OK
            child.start()
            self.log.info("processor started: %s (pid %s) from checkpoint %s",
                          " ".join(stream.command), child.pid, self.start.checkpoint)
            assert child.pid is not None
            self.send(channel.ProcessorStarted(shard_id, child.pid, child.started or 0))
            watch = self.shared.tracker.watch(shard_id, child.pid, child.started, limit_mb * MB)
            child.initialize(self.start.checkpoint)
            return self._loop(child, fetcher)
        except ProcessorStartError as exc:
            self.log.info("cannot start the processor: %s", exc)  # the supervisor logs the ERROR
            self.send(channel.Failed(shard_id, str(exc)))
            return EXIT_START
        except ProcessorError as exc:
            cause = str(exc)
            if watch is not None and watch.over_limit is not None:
                cause = (f"the processor's memory ({watch.over_limit.rss_bytes / MB:.0f} MB) exceeded "
                         f"kclmp.processorMemoryLimitMB = {limit_mb}; it was killed ({exc})")
            self.log.info("processor failed: %s", cause)  # the supervisor logs the ERROR, once
            self.send(channel.Failed(shard_id, cause))
            grace_s = min(grace_s, FAILED_GRACE_S)  # its conversation is broken: nothing to wait for
            return EXIT_PROCESSOR
        except KclMpError as exc:
            self.log.info("%s", exc)  # the supervisor logs the ERROR
            self.send(channel.Failed(shard_id, str(exc)))
            return EXIT_DEPENDENCY
        finally:
            self.shared.tracker.forget(shard_id)
            fetcher.stop()
            if child.pid is not None:
                self.log.info("processor exited with status %s", child.close(grace_s))
            self._progress(child, force=True)  # the last figures

    def _loop(self, child: ProcessorChild, fetcher: Fetcher) -> int:
        item: Any = None  # fetched, not yet handed over (kept while delivery is paused)
        while True:
            command = self._control(0.0)
            if command == LEASE_LOST:
                fetcher.stop()
                child.lease_lost()
                return EXIT_OK
            if command == SHUTDOWN:
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
                assert isinstance(item.batch, Batch)  # what make_batch made
                started = time.monotonic()
                child.process_records(item.batch)
                self._record(item, time.monotonic() - started)
                item = None
                self._progress(child)
                if child.lease_moved:
                    fetcher.stop()
                    self.send(channel.LeaseMoved(self.shard_id))
                    child.lease_lost()
                    return EXIT_OK
            elif isinstance(item, ShardEnded):
                # the supervisor creates the children's leases; shardEnded only once they exist
                self.send(channel.Children(self.shard_id, item.children))
                if not self._await_children():
                    child.lease_lost()
                    return EXIT_OK
                return self._shard_end(child)

    # -- fencing ----------------------------------------------------------------------

    def _pause(self, now: float) -> None:
        if self.paused_at is None:
            self.paused_at = now
            self.log.warning("delivery paused for shard %s: last renewal %.1f s ago (another host may take the "
                             "lease %.1f s after it); waiting for a renewal", self.shard_id, self.hold.age(now),
                             self.failover_s)

    def _resume(self, now: float) -> None:
        if self.paused_at is not None:
            self.log.info("delivery resumed for shard %s after %.1f s: renewed %.1f s ago", self.shard_id,
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
            if command == SHUTDOWN:  # nothing was started: nothing to checkpoint
                self.send(channel.ShutdownReady(self.shard_id, str(self.start.checkpoint)))
            if command in (SHUTDOWN, LEASE_LOST):
                self.log.info("shard %s: not starting its processor (the lease was %s before a renewal came)",
                              self.shard_id, "lost" if command == LEASE_LOST else "given up")
                return False

    def _await_position(self, fetcher: Fetcher) -> FetchResult | None:
        """The fetcher's first result: Positioned (the processor may start), the shard's end
        because it is gone, or a failure; None when the lease was lost or given up first."""
        while True:
            command = self._control(0.0)
            if command == SHUTDOWN:  # nothing was started: nothing to checkpoint
                self.send(channel.ShutdownReady(self.shard_id, str(self.start.checkpoint)))
            if command in (SHUTDOWN, LEASE_LOST):
                self.log.info("shard %s: not starting its processor (the lease was %s before its shard iterator "
                              "came)", self.shard_id, "lost" if command == LEASE_LOST else "given up")
                return None
            first = fetcher.next(timeout=0.25)
            if first is not None:
                return first

    def _shard_gone(self) -> int:
        """The shard is not in the stream: its lease ends at SHARD_END as Java ends it, and no
        processor is started for it. The supervisor then syncs shards, which deletes the lease
        (``shard_sync.plan_cleanup``: finished, no child known, not listed)."""
        refused = self._hold_for_checkpoint()
        error = refused if refused is not None else self.shared.table.checkpoint(
            self.shard_id, self.config.worker_id, ExtendedSequenceNumber(SHARD_END))
        if error is None:
            self.log.info("shard %s: lease checkpointed at SHARD_END without a processor (not in the stream)",
                          self.shard_id)
        else:
            self.log.warning("shard %s: SHARD_END not written (%s); the next start tries again", self.shard_id,
                             error.value)
        self.send(channel.Children(self.shard_id, ()))
        self.send(channel.ShardEnd(self.shard_id, error is None))
        return EXIT_OK

    def _hold_for_checkpoint(self) -> CheckpointOutcome | None:
        """None when a checkpoint may be written now (at once, or once a renewal came); else
        why not: LEASE_MOVED if the lease was lost meanwhile, FAILED if no renewal came within
        ``checkpoint_wait_s`` (the processor gets a dependency error it may retry)."""
        now = time.monotonic()
        if self.hold.fresh(now):
            return None
        self._pause(now)
        deadline = now + checkpoint_wait_s(self.failover_s)
        while now < deadline:
            command = self._control(min(0.25, deadline - now))
            if command is not None:
                self.commands.append(command)  # obeyed once the exchange is over
            if command == LEASE_LOST:
                return CheckpointOutcome.LEASE_MOVED
            now = time.monotonic()
            if self.hold.fresh(now):
                self._resume(now)
                return None
        self.log.warning("checkpoint of shard %s not written: no renewal for %.1f s (its lease may be another "
                         "host's by now)", self.shard_id, self.hold.age(now))
        return CheckpointOutcome.FAILED

    def _record(self, item: Fetched, seconds: float) -> None:
        shard_id = self.shard_id
        self.delivered += item.count
        self.delivered_bytes += item.data_bytes
        self.millis_behind = item.millis_behind_latest
        self.metrics.add("records", item.count, shard_id)
        self.metrics.add("bytes", item.data_bytes, shard_id)
        self.metrics.add("process_time", seconds, shard_id)
        if item.millis_behind_latest is not None:
            self.metrics.add("millis_behind_latest", item.millis_behind_latest, shard_id)

    def _control(self, timeout: float) -> str | None:
        """The next command from the supervisor; Terminate raises."""
        if self.commands:
            command: str | None = self.commands.pop(0)
        else:
            try:
                command = self.inbox.get(timeout=timeout) if timeout > 0 else self.inbox.get_nowait()
            except queue.Empty:
                return None
        if command == TERMINATE:
            raise Terminated()
        return command

    def _progress(self, child: ProcessorChild, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self.last_progress >= PROGRESS_EVERY_S:
            self.last_progress = now
            if self.metrics.enabled:
                shard_id, dropped = self.shard_id, child.stderr_dropped
                self.metrics.add("checkpoint_age", now - self.checkpointed_at, shard_id)
                self.metrics.add("processor_stderr_dropped", dropped - self.stderr_dropped, shard_id)
                self.stderr_dropped = dropped
            samples = encode_samples(self.metrics.drain()) if self.metrics.enabled else []
            self.send(channel.Progress(self.shard_id, self.delivered, str(child.last_checkpoint), self.millis_behind,
                                       samples, self.delivered_bytes))

    def _shutdown(self, child: ProcessorChild) -> int:
        child.shutdown_requested()
        self._progress(child, force=True)
        self.send(channel.ShutdownReady(self.shard_id, str(child.last_checkpoint)))
        # Keep the child until the supervisor has released the lease (Java's order:
        # shutdownRequested, then leaseLost). Bounded: the supervisor's own grace.
        deadline = time.monotonic() + self.config.processor.shutdown_grace_ms / 1000.0 + 30.0
        while time.monotonic() < deadline:
            if self._control(0.5) == LEASE_LOST:
                break
        child.lease_lost()
        return EXIT_OK

    def _await_children(self) -> bool:
        """Wait for the supervisor's word that the children's leases exist (Java creates them
        before shardEnded: a host that dies right after the SHARD_END checkpoint then leaves no
        gap for the audit to mend). False: the lease was lost meanwhile. Bounded by
        failoverTimeMillis: a supervisor that never answers delays the shard's end, no more."""
        deadline = time.monotonic() + self.failover_s
        later: list[str] = []
        while time.monotonic() < deadline:
            command = self._control(0.25)
            if command == CHILDREN_CREATED:
                self.commands.extend(later)
                return True
            if command == LEASE_LOST:
                return False
            if command is not None:
                later.append(command)  # a shutdown request: shardEnded answers it
        self.commands.extend(later)
        self.log.warning("shard %s: no word in %.1f s that its children's leases exist; ending it anyway (the shard "
                         "sync finds them)", self.shard_id, self.failover_s)
        return True

    def _shard_end(self, child: ProcessorChild) -> int:
        checkpointed = child.shard_ended()
        self._progress(child, force=True)
        self.send(channel.ShardEnd(self.shard_id, checkpointed))  # the supervisor logs, counts and retries a missed one
        return EXIT_OK


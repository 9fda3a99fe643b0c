"""A pool process: drives many shards, one thread each, over one control pipe.

Forked by the supervisor (``multiprocess``), a few per host (``kclmp.workerProcesses``, by
default one per core). After the fork it builds ONE set of boto3 clients (botocore clients
are thread-safe), one processor sampler (``usage.Tracker``) and one read-ahead budget its
shards' fetchers share (``prefetch.PoolBudget``: kclmp.workerProcessMaxByteSize), reseeds its random
generator, ignores the terminal's SIGINT (the supervisor decides when to stop) and turns
SIGTERM into an orderly end that stops every processor child it started.

Its main thread reads the pipe (``worker.channel``): a ``Start`` gets the shard a thread
running ``ShardDriver`` (fetch, drive the processor child, checkpoint; the processor is
still one process per shard, started by that thread); ``Renewed`` batches update each
shard's hold at once; the other commands go to the shard's inbox. Each thread reports on
the same pipe (one lock) and ends with ``ShardExited``. The pipe closing means the
supervisor is gone (or done with this process): every shard gets leaseLost, then it exits.
"""

from __future__ import annotations

import logging
import os
import queue
import random
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any

from kcl_mp import logs
from kcl_mp.aws.clients import ClientLimits
from kcl_mp.aws.clients import client as aws_client
from kcl_mp.config import Config
from kcl_mp.errors import EXIT_DEPENDENCY, EXIT_OK
from kcl_mp.leases.cost import pool_shares
from kcl_mp.leases.table import LeaseTable
from kcl_mp.retrieval.prefetch import PoolBudget
from kcl_mp.retrieval.streams import stream_client
from kcl_mp.worker import channel
from kcl_mp.worker.shard_worker import (
    CHILDREN_CREATED,
    LEASE_LOST,
    SHUTDOWN,
    TERMINATE,
    ShardDriver,
    Shared,
    Terminated,
)
from kcl_mp.worker.usage import Tracker, Usage, signal_group

SAMPLE_EVERY_S = 2.0  # how often the processors' CPU and memory are sampled
READ_WAIT_S = 0.5  # the reader's longest wait: how soon it sees SIGTERM
END_WAIT_S = 10.0  # after SIGTERM or the pipe's end, how long the shards may take to stop their processors
# Connections kept per client: a shard holds at most one GetRecords and one checkpoint at a time.
LIMITS = ClientLimits(max_pool_connections=512)


@dataclass(frozen=True)
class PoolSpec:
    """Everything a pool process needs, built before the fork."""

    config: Config
    index: int  # 1, 2, ... within this host (log lines and the supervisor's say which)
    log_level: str = "INFO"
    log_format: str = "text"


@dataclass
class _Shard:
    thread: threading.Thread
    inbox: queue.Queue[str]
    driver: ShardDriver


def run(spec: PoolSpec, conn: Any, inherited: list[Any]) -> None:
    """Process entry point (runs in the forked child). ``inherited``: the supervisor's ends of
    this and the earlier pools' pipes, copied by the fork; closed at once, or a pipe the
    supervisor closes at shutdown would never read as ended here (nor in a sibling)."""
    for other in inherited:
        other.close()
    signal.set_wakeup_fd(-1)  # the supervisor's wake-up pipe is not ours to write to
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    random.seed()
    logs.setup(spec.log_level, spec.log_format, spec.config.worker_id)
    pool = Pool(spec, conn)
    signal.signal(signal.SIGTERM, pool.on_sigterm)
    pool.serve()
    conn.close()
    os._exit(0)  # skip atexit handlers inherited from the supervisor


class Pool:
    def __init__(self, spec: PoolSpec, conn: Any):
        config = spec.config
        self.spec, self.conn = spec, conn
        self.log = logs.ShardLog(logging.getLogger("kcl_mp.shard_worker"), config.worker_id)
        self.shared = Shared(config,
                             LeaseTable(aws_client("dynamodb", config.dynamodb, limits=LIMITS),
                                        config.lease.table_name, config.stream_names),
                             stream_client(config, raw_records=True, limits=LIMITS),
                             Tracker(SAMPLE_EVERY_S, self._report_usage), PoolBudget())
        self.shards: dict[str, _Shard] = {}
        self.lock = threading.Lock()  # the shards' dict
        # The pipe's sending end, a lock of its own: a send blocks while the supervisor's side of
        # the pipe is full, and the reader (``serve``) must go on draining the supervisor's
        # messages meanwhile, or the supervisor blocks sending to us and never reads: a deadlock
        # (seen after a host's 15 s pause with 12 shards in one pool process).
        self.send_lock = threading.Lock()
        self.terminating = False
        # the pool's own CPU at the last usage report: (monotonic s, CPU s, each shard's delivered bytes)
        self.own: tuple[float, float, dict[str, int]] = (time.monotonic(), time.process_time(), {})

    def on_sigterm(self, signum: int, frame: Any) -> None:
        self.terminating = True  # the reader sees it within READ_WAIT_S

    def send(self, message: channel.FromPool) -> None:
        try:
            with self.send_lock:
                self.conn.send(message)
        except (OSError, EOFError, ValueError):
            pass  # the supervisor is gone; the leases will expire on their own

    def serve(self) -> None:
        while not self.terminating:
            try:
                if not self.conn.poll(READ_WAIT_S):
                    continue
                message = self.conn.recv()
            except (OSError, EOFError):
                self._end(LEASE_LOST)  # no supervisor, no renewals: we cannot own the leases
                return
            self.handle(message)
        self.log.warning("terminated by the supervisor")
        self._end(TERMINATE)

    def handle(self, message: channel.ToPool) -> None:
        match message:
            case channel.Start():
                self._start(message)
            case channel.Renewed(leases=leases):
                with self.lock:
                    for key, at in leases:
                        if (shard := self.shards.get(key)) is not None:
                            shard.driver.hold.renewed(at)
            case channel.Shutdown(shard=key):
                self._tell(key, SHUTDOWN)
            case channel.LeaseLost(shard=key):
                self._tell(key, LEASE_LOST)
            case channel.Terminate(shard=key):
                self._tell(key, TERMINATE)
            case channel.ChildrenCreated(shard=key):
                self._tell(key, CHILDREN_CREATED)

    def _start(self, start: channel.Start) -> None:
        if start.stream is not None and start.stream.name not in self.shared.table.streams:  # appended since the fork
            self.shared.table.streams |= {start.stream.name}
        log = logs.ShardLog(logging.getLogger("kcl_mp.shard_worker"), self.spec.config.worker_id, start.shard)
        inbox: queue.Queue[str] = queue.Queue()
        driver = ShardDriver(self.shared, start, inbox, self.send, log)
        thread = threading.Thread(target=self._drive, args=(driver,), name=f"shard-{start.shard}", daemon=True)
        with self.lock:
            self.shards[start.shard] = _Shard(thread, inbox, driver)
        thread.start()

    def _drive(self, driver: ShardDriver) -> None:
        """One shard's thread: its driver, start to end; then say how it ended."""
        code = EXIT_DEPENDENCY
        try:
            code = driver.run()
        except Terminated:
            driver.log.warning("terminated by the supervisor")
            code = EXIT_OK
        except Exception:
            driver.log.exception("shard driver failed")
        finally:
            with self.lock:
                self.shards.pop(driver.shard_id, None)
            self.send(channel.ShardExited(driver.shard_id, code))

    def _tell(self, key: str, command: str) -> None:
        with self.lock:
            shard = self.shards.get(key)
        if shard is None:
            return
        shard.inbox.put(command)
        child = shard.driver.child
        if command == TERMINATE and child is not None and child.pid is not None:
            # it may be stuck in an exchange; or its shard thread reaped it a moment ago
            signal_group(child.pid, child.started, signal.SIGTERM)

    def _end(self, command: str) -> None:
        """Every shard gets ``command``; wait (bounded) for their processors to stop."""
        with self.lock:
            keys = list(self.shards)
        for key in keys:
            self._tell(key, command)
        deadline = time.monotonic() + END_WAIT_S
        with self.lock:
            threads = [shard.thread for shard in self.shards.values()]
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self.shared.tracker.stop()

    def _report_usage(self, sampled: list[tuple[str, Usage]]) -> None:
        self.send(channel.Usage(tuple((key, u.cpu_percent, u.rss_bytes) for key, u in sampled),
                                tuple(self._pool_shares().items())))

    def _pool_shares(self) -> dict[str, float]:
        """This process's own CPU (its threads: fetching, encoding) since the last report, split
        among its shards by the bytes each delivered meanwhile (``cost.pool_shares``)."""
        now, cpu_s = time.monotonic(), time.process_time()
        with self.lock:
            bytes_now = {key: shard.driver.delivered_bytes for key, shard in self.shards.items()}
        then, cpu_then, bytes_then = self.own
        self.own = (now, cpu_s, bytes_now)
        if now <= then:
            return {}
        percent = max(0.0, 100.0 * (cpu_s - cpu_then) / (now - then))
        return pool_shares(percent, {key: n - bytes_then.get(key, 0) for key, n in bytes_now.items()})

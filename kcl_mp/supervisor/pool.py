"""The supervisor's side of the worker pool: fork pool processes, place shards, notice deaths.

A host runs up to ``size`` pool processes (``kclmp.workerProcesses``, by default one per
core), forked when first needed. A new shard goes to the least loaded one; a new process is
forked only while every running one already drives a shard, so the first ``size`` shards
land on ``size`` processes. Each is reached through ONE duplex pipe (``worker.channel``).

A pool process that dies (SIGKILL, a crash) is forgotten here and re-forked at need; the
supervisor restarts its shards. Its processor children lead their own process groups and
would outlive it: ``stop_groups`` kills each group the pool reported (``ProcessorStarted``)
whose leader is still the very process started (same pid, same start time), and nothing else.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any

import multiprocess

from kcl_mp.config import Config
from kcl_mp.worker import channel, pool
from kcl_mp.worker.usage import signal_group


@dataclass
class PoolProcess:
    index: int
    process: Any
    conn: Any
    shards: set[str] = field(default_factory=set)
    groups: dict[str, tuple[int, int]] = field(default_factory=dict)  # shard -> (processor pid, start time)
    closed: bool = False  # its pipe reached EOF: it is dying or dead

    @property
    def pid(self) -> int:
        return int(self.process.pid)

    def send(self, message: channel.ToPool) -> None:
        try:
            self.conn.send(message)
        except (OSError, EOFError, ValueError):
            pass  # it died: the reap step notices


def describe_exit(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"status {code}"


class Pools:
    def __init__(self, config: Config, log_level: str, log_format: str):
        self.config, self.log_level, self.log_format = config, log_level, log_format
        self.size = config.processor.worker_processes or os.cpu_count() or 1
        self.running: list[PoolProcess] = []
        self.forked = 0
        self._fork = multiprocess.get_context("fork")

    def place(self, key: str) -> PoolProcess:
        """The pool process for a new shard: the least loaded, or a new one while some are idle."""
        live = [p for p in self.running if not p.closed]
        if len(live) < self.size and all(p.shards for p in live):
            chosen = self._start()
        else:
            chosen = min(live, key=lambda p: (len(p.shards), p.index))
        chosen.shards.add(key)
        return chosen

    def _start(self) -> PoolProcess:
        self.forked += 1
        parent_conn, child_conn = self._fork.Pipe(duplex=True)
        spec = pool.PoolSpec(self.config, self.forked, self.log_level, self.log_format)
        inherited = [parent_conn, *(p.conn for p in self.running)]
        process = self._fork.Process(target=pool.run, args=(spec, child_conn, inherited),
                                     name=f"kcl-mp pool {self.forked}", daemon=False)
        process.start()
        child_conn.close()
        started = PoolProcess(self.forked, process, parent_conn)
        self.running.append(started)
        return started

    def connections(self) -> list[Any]:
        return [p.conn for p in self.running if not p.closed]

    def by_conn(self, conn: Any) -> PoolProcess | None:
        return next((p for p in self.running if p.conn is conn), None)

    def dead(self) -> list[PoolProcess]:
        """Pool processes that exited, removed from the running list (their pipes still readable)."""
        gone = [p for p in self.running if not p.process.is_alive()]
        for p in gone:
            p.process.join(0)
            self.running.remove(p)
        return gone

    def stop_groups(self, dead: PoolProcess, keys: set[str]) -> None:
        """SIGKILL the process groups of the processors the dead pool process started for ``keys``."""
        for key in keys:
            pid, started = dead.groups.get(key, (0, 0))
            if pid:
                signal_group(pid, started, signal.SIGKILL)  # only if still the process it started, orphaned

    def stop(self, timeout_s: float) -> list[PoolProcess]:
        """Close every pipe (each pool process then ends); SIGTERM, then SIGKILL, what lingers.
        Returns the ones that had to be killed."""
        for p in self.running:
            p.conn.close()
        deadline = time.monotonic() + timeout_s
        killed = []
        for p in self.running:
            p.process.join(max(0.1, deadline - time.monotonic()))
            if p.process.is_alive():
                p.process.terminate()  # it stops its processors
                p.process.join(pool.END_WAIT_S + 2.0)
            if p.process.is_alive():
                p.process.kill()
                p.process.join(5.0)
                killed.append(p)
        self.running = []
        return killed

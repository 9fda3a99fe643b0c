"""What the processors cost: CPU and RSS of each processor child, read from its own /proc entries.

One ``Tracker`` per pool process samples every processor it drives, on one thread, every
``interval_s``: for each child it reads ``/proc/<pid>/stat`` (user + system CPU ticks and the
resident pages), and, where the kernel offers ``/proc/<pid>/task/<tid>/children``
(CONFIG_PROC_CHILDREN), the same for every descendant, so helpers a processor starts (a shell
script running jq, a Node.js cluster) count too. Where it does not, the sample is the child
process alone. Nothing scans /proc: the cost grows with the processors sampled, never with
the other processes on the host.

A processor whose RSS exceeds ``limit_bytes`` is stopped at once (its process group gets
SIGKILL): the exchange in progress then fails as a child that exited, and the shard's driver
names the limit as the cause (``Watch.over_limit``).

Processes are signalled only while they are known to be kcl-mp's (``signal_group``): a pid
names a process together with its start time, because another thread (the shard's, which
reaps its processor) may free the pid at any moment, and the next process to get it is
likely a group leader too (every processor leads its own session).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

MB = 1 << 20
_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")
MAX_TREE = 256  # processes counted in one processor's tree: a fork bomb cannot stall the sampler


@dataclass(frozen=True)
class Usage:
    cpu_percent: float  # of one core, over the last interval (can exceed 100 with threads)
    rss_bytes: int

    def __str__(self) -> str:
        return f"cpu {self.cpu_percent:.0f} %, rss {self.rss_bytes / MB:.0f} MB"


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (field 3, the state, is [0])."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return raw[raw.rfind(b")") + 2:].decode().split()


def start_time(pid: int) -> int | None:
    """Clock ticks since boot at which ``pid`` started (with the pid, it names one process)."""
    fields = _stat(pid)
    return int(fields[19]) if fields else None


def signal_group(pid: int, started: int | None, sig: int, *, leader_reaped: bool = False) -> bool:
    """Send ``sig`` to the process group ``pid`` leads, only while it is the one started at
    ``started`` (``start_time``); True if sent.

    ``leader_reaped``: the leader is gone (its parent reaped it), and what is signalled are
    the processes it left in its group. Their group id keeps the number taken (the kernel
    frees a pid only once no process has it as its id, group or session), so the group is
    still that one exactly while no process has the pid: one that has it is a newcomer.
    A pid reused between the check and the signal is the race left, microseconds long.
    """
    now = start_time(pid)
    ours = now is None if leader_reaped else (started is not None and now == started)
    if not ours:
        return False
    try:
        os.killpg(pid, sig)
    except OSError:
        return False  # gone meanwhile
    return True


def _children(pid: int) -> list[int]:
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    found: list[int] = []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                found.extend(int(child) for child in f.read().split())
        except OSError:
            return found  # the kernel does not offer it (or the task ended): the child alone
    return found


def tree_totals(pid: int) -> tuple[float, int] | None:
    """CPU seconds (user + system) and RSS bytes of ``pid`` and the descendants /proc names; None if gone."""
    root = _stat(pid)
    if root is None:
        return None
    ticks, pages = int(root[11]) + int(root[12]), int(root[21])
    pending, seen = _children(pid), 1
    while pending and seen < MAX_TREE:
        child = pending.pop()
        fields = _stat(child)
        if fields is None:
            continue  # a helper that just exited
        seen += 1
        ticks += int(fields[11]) + int(fields[12])
        pages += int(fields[21])
        pending.extend(_children(child))
    return ticks / _TICKS, pages * _PAGE


class Watch:
    """One processor being sampled."""

    def __init__(self, shard: str, pid: int, started: int | None, limit_bytes: int):
        self.shard, self.pid, self.started, self.limit_bytes = shard, pid, started, limit_bytes
        self.latest: Usage | None = None
        self.over_limit: Usage | None = None  # set when the limit stopped the child
        self.previous: tuple[float, float] | None = None  # (clock, cpu seconds)

    def sample(self, now: float) -> Usage | None:
        totals = tree_totals(self.pid)
        if totals is None or self.over_limit is not None:
            return None
        cpu_s, rss = totals
        percent = 0.0
        if self.previous is not None and now > self.previous[0]:
            percent = max(0.0, 100.0 * (cpu_s - self.previous[1]) / (now - self.previous[0]))
        self.previous = (now, cpu_s)
        self.latest = Usage(percent, rss)
        if self.limit_bytes and rss > self.limit_bytes:
            self.over_limit = self.latest
            signal_group(self.pid, self.started, signal.SIGKILL)  # the shard's thread may have reaped it
        return self.latest


class Tracker:
    """Samples every watched processor every ``interval_s`` and reports them in one batch."""

    def __init__(self, interval_s: float, report: Callable[[list[tuple[str, Usage]]], None],
                 clock: Callable[[], float] = time.monotonic):
        self.interval_s, self.report, self.clock = interval_s, report, clock
        self._watches: dict[str, Watch] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="usage", daemon=True)

    def watch(self, shard: str, pid: int, started: int | None, limit_bytes: int) -> Watch:
        watch = Watch(shard, pid, started, limit_bytes)
        with self._lock:
            self._watches[shard] = watch
            if not self._thread.is_alive() and not self._stop.is_set():
                self._thread.start()
        return watch

    def forget(self, shard: str) -> None:
        with self._lock:
            self._watches.pop(shard, None)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2.0)

    def _run(self) -> None:
        while True:  # from the first watch (sampled at once) until stop()
            with self._lock:
                watches = list(self._watches.values())
            now = self.clock()
            sampled = [(w.shard, usage) for w in watches if (usage := w.sample(now)) is not None]
            if sampled:
                self.report(sampled)
            if self._stop.wait(self.interval_s):
                return


def summarize(sampled: Iterable[tuple[str, Usage]], restarts: int) -> str | None:
    """The supervisor's one line for the host's processors: in all, and the largest."""
    sampled = list(sampled)
    if not sampled:
        return None
    key, largest = max(sampled, key=lambda item: item[1].rss_bytes)
    cpu = sum(u.cpu_percent for _, u in sampled)
    rss = sum(u.rss_bytes for _, u in sampled)
    return (f"processors: {len(sampled)} sampled, cpu {cpu:.0f} % and rss {rss / MB:.0f} MB in all; "
            f"largest {key} ({largest}); {restarts} restarts so far")

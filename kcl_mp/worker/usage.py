"""What a processor child costs: CPU and RSS of its whole process tree, sampled with psutil.

A processor may start helpers of its own (a shell script running jq, a Node.js cluster),
so a sample covers the child and every descendant. The sampler runs on its own thread in
the shard worker, so a child busy inside one long processRecords is still measured, and
one that exceeds ``limit_bytes`` is stopped at once (its process group gets SIGKILL): the
exchange in progress then fails as a child that exited, and the worker names the limit as
the cause.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import Callable

import psutil

MB = 1 << 20


@dataclass(frozen=True)
class Usage:
    cpu_percent: float  # of one core, over the last interval (can exceed 100 with threads)
    rss_bytes: int

    def __str__(self) -> str:
        return f"cpu {self.cpu_percent:.0f} %, rss {self.rss_bytes / MB:.0f} MB"


def tree_totals(pid: int) -> tuple[float, int] | None:
    """CPU seconds (user + system) and RSS bytes of ``pid`` and its descendants; None if gone."""
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return None
    cpu, rss = 0.0, 0
    for process in processes:
        try:
            with process.oneshot():
                times = process.cpu_times()
                cpu += times.user + times.system
                rss += process.memory_info().rss
        except psutil.Error:
            continue  # a helper that just exited
    return cpu, rss


class Sampler:
    """Samples a child's process tree every ``interval_s``; enforces an optional RSS limit."""

    def __init__(self, pid: int, interval_s: float, limit_bytes: int,
                 report: Callable[[Usage], None], clock: Callable[[], float] = time.monotonic):
        self.pid, self.interval_s, self.limit_bytes = pid, interval_s, limit_bytes
        self.report, self.clock = report, clock
        self.latest: Usage | None = None
        self.over_limit: Usage | None = None  # set when the limit stopped the child
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"sample-{pid}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2.0)

    def _run(self) -> None:
        previous: tuple[float, float] | None = None  # (clock, cpu seconds)
        for _ in range(10_000_000):  # bounded; ends with the child or stop()
            totals = tree_totals(self.pid)
            if totals is None:
                return
            now = self.clock()
            cpu_s, rss = totals
            percent = 0.0
            if previous is not None and now > previous[0]:
                percent = max(0.0, 100.0 * (cpu_s - previous[1]) / (now - previous[0]))
            previous = (now, cpu_s)
            self.latest = Usage(percent, rss)
            self.report(self.latest)
            if self.limit_bytes and rss > self.limit_bytes:
                self.over_limit = self.latest
                try:
                    os.killpg(self.pid, signal.SIGKILL)  # the child leads its own session
                except OSError:
                    pass
                return
            if self._stop.wait(self.interval_s):
                return

"""A daemon's processes read from /proc alone: its tree, each process's CPU seconds and
memory. Reads only the pids of one tree (through /proc/<pid>/task/*/children), never a
scan of the host, so the meter's own cost does not grow with what else runs here. ``Meter``
tells a daemon's own processes from its processors and measures both over a window."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def tree(root: int) -> list[int]:
    """``root`` and every descendant still running (a process gone mid-walk is skipped)."""
    found, todo = [], [root]
    for _ in range(100_000):  # bounded: a tree of at most that many processes
        if not todo:
            return found
        pid = todo.pop()
        found.append(pid)
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                todo.extend(int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split())
            except OSError:
                continue
    raise RuntimeError(f"the process tree of {root} has over 100000 processes")


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def cpu_seconds(pids: list[int]) -> dict[int, float]:
    """utime + stime of each pid (children not included), in seconds."""
    seconds = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        seconds[pid] = (int(fields[11]) + int(fields[12])) / TICKS  # fields 14 and 15 of stat(5)
    return seconds


def cpu_between(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds spent between two readings by the processes of the second (a process
    started in between counts from zero; one that ended in between is lost)."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())


@dataclass(frozen=True)
class Memory:
    """Summed over processes, in bytes. PSS splits each shared page among its sharers (the
    honest total of forked workers); USS counts private pages only; RSS counts a shared page
    once per process."""

    processes: int
    pss: int
    uss: int
    rss: int


def memory(pids: list[int]) -> Memory:
    """From /proc/<pid>/smaps_rollup."""
    count = pss = uss = rss = 0
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        fields = {}
        for line in text.split("\n")[1:]:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                fields[parts[0].rstrip(":")] = int(parts[1]) * 1024
        count += 1
        pss += fields.get("Pss", 0)
        uss += fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)
        rss += fields.get("Rss", 0)
    return Memory(count, pss, uss, rss)


SAMPLE_EVERY_S = 5.0


class Meter:
    """A daemon's own processes and its processors (those whose command line holds
    ``processor``), and the emulators': CPU per window, the memory's peak."""

    def __init__(self, daemon_pid: int, emulator_pids: tuple[int, ...], processor: str):
        self.daemon_pid, self.emulator_pids, self.processor = daemon_pid, emulator_pids, processor
        self.peak = Memory(0, 0, 0, 0)
        self.peak_processors = Memory(0, 0, 0, 0)

    def split(self) -> tuple[list[int], list[int]]:
        """(own processes, processors)."""
        own, processors = [], []
        for pid in tree(self.daemon_pid):
            (processors if self.processor in cmdline(pid) else own).append(pid)
        return own, processors

    def cpu(self) -> list[dict[int, float]]:
        """CPU seconds of the daemon's own processes, then of each emulator's tree."""
        return [cpu_seconds(self.split()[0]), *(cpu_seconds(tree(pid)) for pid in self.emulator_pids)]

    def sample_memory(self) -> None:
        own, processors = self.split()
        mine, theirs = memory(own), memory(processors)
        if mine.pss > self.peak.pss:
            self.peak = mine
        if theirs.pss > self.peak_processors.pss:
            self.peak_processors = theirs

    def window(self, seconds: float) -> list[float]:
        """Cores used over ``seconds`` by the daemon's own processes, then by each emulator;
        samples the memory meanwhile."""
        before = self.cpu()
        began = time.monotonic()
        for _ in range(100_000):  # bounded by the window
            left = began + seconds - time.monotonic()
            if left <= 0:
                break
            self.sample_memory()
            time.sleep(min(SAMPLE_EVERY_S, max(left, 0.01)))
        after = self.cpu()
        elapsed = time.monotonic() - began
        return [cpu_between(b, a) / elapsed for b, a in zip(before, after, strict=True)]

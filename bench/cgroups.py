"""A host of a given size on one machine: a cgroup v1 with a CPU quota (``cpu``) and CPU
accounting (``cpuacct``), which a command joins before it execs, so the daemon and every
process it starts (its processors) share the quota and are counted together.

    group = HostGroup.create("kclmp-bench-host-a", cores=0.3)   # None: cgroups not writable here
    Popen(group.wrap(argv))   # sh writes its pid into both cgroup.procs, then execs argv
    group.usage_s()           # CPU seconds of everything that ran in it, the dead included
    group.remove(timeout_s)   # SIGKILL what is left in it (what argv started), then rmdir

cgroup v1 only (``/sys/fs/cgroup/cpu`` and ``/sys/fs/cgroup/cpuacct`` mounted apart, or
together as ``cpu,cpuacct``); on cgroup v2 or without write access ``create`` gives None
and says why in ``HostGroup.unavailable``.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

CPU = Path("/sys/fs/cgroup/cpu")
CPUACCT = Path("/sys/fs/cgroup/cpuacct")
PERIOD_US = 100_000
# sh joins both groups, then becomes the command: the same pid, so a Popen's pid is the daemon's
JOIN = 'echo $$ > "$1" && echo $$ > "$2" && shift 2 && exec "$@"'


@dataclass
class HostGroup:
    name: str
    cores: float
    cpu: Path
    cpuacct: Path
    unavailable = ""  # why create gave None (class-wide: the machine's)

    @classmethod
    def create(cls, name: str, cores: float) -> HostGroup | None:
        """The cgroup ``name`` in both hierarchies, its quota ``cores`` of CPU; None when it
        cannot be made (``unavailable`` says why)."""
        if not (CPU / "cpu.cfs_quota_us").exists() or not (CPUACCT / "cpuacct.usage").exists():
            cls.unavailable = f"no cgroup v1 cpu and cpuacct hierarchies at {CPU} and {CPUACCT}"
            return None
        group = cls(name, cores, CPU / name, CPUACCT / name)
        try:
            for path in {group.cpu, group.cpuacct}:  # one path when the two share a mount
                path.mkdir(exist_ok=True)
            (group.cpu / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (group.cpu / "cpu.cfs_quota_us").write_text(str(round(cores * PERIOD_US)))
        except OSError as exc:
            cls.unavailable = f"cannot make the cgroup {name}: {exc}"
            group.remove(0)
            return None
        return group

    def wrap(self, argv: list[str]) -> list[str]:
        return ["sh", "-c", JOIN, "sh", str(self.cpu / "cgroup.procs"), str(self.cpuacct / "cgroup.procs"), *argv]

    def usage_s(self) -> float:
        """CPU seconds used in the group since it was made (cpuacct.usage is in ns)."""
        return int((self.cpuacct / "cpuacct.usage").read_text()) / 1e9

    def periods(self) -> tuple[int, int]:
        """(quota periods its processes ran in, periods the quota held them back in) so far (cpu.stat)."""
        stat = dict(line.split() for line in (self.cpu / "cpu.stat").read_text().splitlines())
        return int(stat.get("nr_periods", 0)), int(stat.get("nr_throttled", 0))

    def pids(self) -> list[int]:
        pids: set[int] = set()
        for path in {self.cpu, self.cpuacct}:
            try:
                pids.update(int(p) for p in (path / "cgroup.procs").read_text().split())
            except OSError:
                continue
        return sorted(pids)

    def remove(self, timeout_s: float) -> str | None:
        """Wait up to ``timeout_s`` for the group to empty, SIGKILL what is still in it (only what
        its command started can be there), then remove it; what went wrong, or None."""
        deadline = time.monotonic() + timeout_s
        while self.pids() and time.monotonic() < deadline:
            time.sleep(0.2)
        left = self.pids()
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while self.pids() and time.monotonic() < deadline:
            time.sleep(0.1)
        problems = [f"killed {len(left)} processes left in it"] if left else []
        for path in {self.cpu, self.cpuacct}:
            try:
                path.rmdir()
            except FileNotFoundError:
                pass
            except OSError as exc:
                problems.append(f"rmdir {path}: {exc}")
        return f"cgroup {self.name}: " + "; ".join(problems) if problems else None

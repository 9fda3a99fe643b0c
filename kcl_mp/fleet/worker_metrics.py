"""This host's worker-metrics item, as a Java KCL 3.x worker reports it for the leader.

The leader's LeaseAssignmentManager assigns by each worker's reported utilisation. A Java
worker on Linux (EC2's LINUX_PROC provider) reports one metric, CPU, short name ``C``,
with the operating range [100] (WorkerMetricsSelector's default: 100 % is fully used):

- every second (inMemoryWorkerMetricsCaptureFrequencyMillis) it samples ``/proc/stat``'s
  first line (LinuxCpuWorkerMetric): usr = user + nice, sys, idle, iowait;
  total = usr + sys + idle + iowait; the value is 100 * (Δtotal - Δidle) / Δtotal since
  the previous sample, 0 on the first sample or when the line did not change (and when
  iowait went back while Δtotal < Δidle; kcl-mp also when Δtotal is 0, where Java divides by 0);
- every 30 s (workerMetricsReporterFreqInMillis; the first report 2 s after the start) it
  averages the samples taken since the last report, rounded half-up to 6 decimals, or -1
  when there were none (a failing metric), and keeps the last 10 such averages
  (noOfPersistedMetricsPerWorkerMetrics) (WorkerMetricStatsManager.computeMetrics);
- it writes them (WorkerMetricStatsReporter, the enhanced client's updateItem ignoring
  nulls: no condition, only the attributes named)::

      UpdateItem  key wid (own table) / leaseKey (lease table) = <worker id>
                  SET lut = <epoch s> N, sts = {"C": [<avg>...]} M of L of N,
                      opr = {"C": [100]} M of L of N
                  3.5 adds: entityType = WORKER_METRIC_STATS, sup = 1 N, slu = <epoch s> N

kcl-mp's supervisor samples once per renewal round, not every second, and publishes every
report period (``FleetRole.tick``); ``WorkerMetricsReporter.tick`` is Java's per-second
cadence, which the tests drive.

A leader counts a worker dead when its ``lut`` is older than two reporting periods
(LeaseAssignmentManager.DEFAULT_NO_OF_SKIP_STAT_FOR_DEAD_WORKER_THRESHOLD), so the
cadence matters as much as the values.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from functools import partial
from typing import Any

from kcl_mp.aws.errors import call
from kcl_mp.fleet.state_store import StateTables, ensure_table
from kcl_mp.leases.lease import ENTITY_TYPE
from kcl_mp.leases.rows import CORES, WORKER_METRIC_STATS, java_double

CPU = "C"  # WorkerMetricType.CPU's short name
CPU_OPERATING_RANGE = 100  # max utilisation (%)
CAPTURE_PERIOD_S = 1.0
REPORT_PERIOD_S = 30.0
FIRST_REPORT_S = 2 * CAPTURE_PERIOD_S
PERSISTED = 10
RAW_KEPT = 300  # HIGH_FREQUENCY_STATS_COUNT
SUPPORT_CODE = 1  # 3.5's WorkerMetricStats.SUPPORT_CODE (Features count - 1)


@dataclass(frozen=True)
class CpuTimes:
    """The counters of /proc/stat's ``cpu`` line that Java uses."""

    usr: int
    sys: int
    idle: int
    iowait: int
    line: str

    @property
    def total(self) -> int:
        return self.usr + self.sys + self.idle + self.iowait

    @classmethod
    def parse(cls, line: str) -> CpuTimes:
        fields = line.split()
        return cls(int(fields[1]) + int(fields[2]), int(fields[3]), int(fields[4]), int(fields[5]), line)


def cpu_utilisation(previous: CpuTimes | None, current: CpuTimes) -> float:
    """CPU use (%) between two samples, as LinuxCpuWorkerMetric computes it.

    >>> a = CpuTimes.parse("cpu  100 0 50 800 50 0 0 0 0 0")
    >>> b = CpuTimes.parse("cpu  160 0 70 900 70 0 0 0 0 0")
    >>> cpu_utilisation(None, a), cpu_utilisation(a, a), cpu_utilisation(a, b)
    (0.0, 0.0, 50.0)
    """
    if previous is None or previous.usr == 0 or current.line == previous.line:
        return 0.0
    d_idle = abs(current.idle - previous.idle)
    d_total = abs(current.total - previous.total)
    if d_total == 0 or (d_total < d_idle and current.iowait < previous.iowait):
        return 0.0
    return (d_total - d_idle) / d_total * 100.0


def average(values: list[float]) -> float:
    """The report's value: the mean rounded half-up to 6 decimals, -1 with no sample."""
    if not values:
        return -1.0
    mean = sum(values) / len(values)
    return float(Decimal(repr(mean)).quantize(Decimal("0.000001"), rounding=ROUND_HALF_UP))


class CpuMetric:
    """Samples and the last ``PERSISTED`` reported averages of the CPU metric."""

    def __init__(self, read_line: Callable[[], str]):
        self.read_line = read_line
        self.previous: CpuTimes | None = None
        self.samples: deque[float] = deque(maxlen=RAW_KEPT)
        self.reported: deque[float] = deque(maxlen=PERSISTED)

    def capture(self) -> None:
        """One sample; a failed read records nothing (the report then says -1)."""
        try:
            current = CpuTimes.parse(self.read_line())
        except (OSError, ValueError, IndexError):
            return
        self.samples.append(cpu_utilisation(self.previous, current))
        self.previous = current

    def report(self) -> list[float]:
        self.reported.append(average(list(self.samples)))
        self.samples.clear()
        return list(self.reported)


def proc_stat_line(path: str = "/proc/stat") -> str:
    with open(path, encoding="ascii") as stat:
        return stat.readline()


def metrics_item(tables: StateTables, worker_id: str, stats: dict[str, list[float]],
                 operating_range: dict[str, list[int]], now_s: int, cores: float | None = None) -> dict[str, Any]:
    """The worker-metrics item as Java writes it (key included); a kcl-mp host adds its ``cores``."""
    item: dict[str, Any] = {
        tables.metrics_key: {"S": worker_id},
        "lut": {"N": str(now_s)},
        "sts": {"M": {name: {"L": [{"N": java_double(v)} for v in values]} for name, values in stats.items()}},
        "opr": {"M": {name: {"L": [{"N": str(v)} for v in values]} for name, values in operating_range.items()}},
    }
    if tables.java35:
        item.update({ENTITY_TYPE: {"S": WORKER_METRIC_STATS}, "sup": {"N": str(SUPPORT_CODE)},
                     "slu": {"N": str(now_s)}})
    if cores is not None:
        item[CORES] = {"N": repr(cores)}
    return item


class WorkerMetricsReporter:
    """Publishes this host's worker-metrics item on Java's cadence; ``tick`` from a loop.

    The clocks (monotonic and wall, seconds) are injected for tests."""

    def __init__(self, client: Any, tables: StateTables, worker_id: str, *,
                 read_line: Callable[[], str] = proc_stat_line, report_period_s: float = REPORT_PERIOD_S,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
                 cores: float | None = None):
        self.client = client
        self.cores = cores
        self.tables = tables
        self.worker_id = worker_id
        self.cpu = CpuMetric(read_line)
        self.report_period_s = report_period_s
        self.clock = clock
        self.wall = wall
        started = clock()
        self.next_capture = started
        self.next_report = started + FIRST_REPORT_S

    def ensure_table(self) -> bool:
        """Create ``<app>-WorkerMetricStats`` (wid S hash key) as a Java worker does (no-op in the lease table)."""
        return False if self.tables.shared else ensure_table(self.client, self.tables.metrics_table,
                                                             self.tables.metrics_key)

    def tick(self) -> bool:
        """Capture and publish what is due now; whether an item was written."""
        now = self.clock()
        if now >= self.next_capture:
            self.cpu.capture()
            self.next_capture = max(self.next_capture + CAPTURE_PERIOD_S, now)
        if now < self.next_report:
            return False
        self.next_report = max(self.next_report + self.report_period_s, now)
        self.publish({CPU: self.cpu.report()})
        return True

    def due_in(self) -> float:
        """Seconds until the next capture or report."""
        return max(0.0, min(self.next_capture, self.next_report) - self.clock())

    def publish(self, stats: dict[str, list[float]]) -> None:
        item = metrics_item(self.tables, self.worker_id, stats, {name: [CPU_OPERATING_RANGE] for name in stats},
                            int(self.wall()), self.cores)
        key = {self.tables.metrics_key: item.pop(self.tables.metrics_key)}
        names = {f"#a{i}": name for i, name in enumerate(item)}
        call(f"writing the worker metrics of {self.worker_id} to {self.tables.metrics_table}", partial(
            self.client.update_item, TableName=self.tables.metrics_table, Key=key,
            UpdateExpression="SET " + ", ".join(f"#a{i} = :a{i}" for i in range(len(item))),
            ExpressionAttributeNames=names,
            ExpressionAttributeValues={f":a{i}": value for i, value in enumerate(item.values())}))

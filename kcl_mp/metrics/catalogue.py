"""What kcl-mp measures, each metric named once, and how samples become CloudWatch data.

Pure: no boto3, no sockets. The supervisor records samples as things happen (a renewal
round, a progress report from a shard's driver, a table scan) into a ``Recorder``, which
keeps one statistic set (count, sum, min, max, last) per metric and label. Once a second
it ships what it recorded, with the current gauges, to the metrics process
(``metrics.process``), which feeds ``CloudWatchBuffer`` and the Prometheus endpoint.

Names: CloudWatch gets the Java KCL's names where Java has the metric (``RenewAllLeases``
/ ``CurrentLeases``, ``ProcessTask`` / ``RecordsProcessed`` ...), with the same units,
levels and dimensions (``Operation`` always; ``ShardId`` on per-lease metrics;
``WorkerIdentifier`` on per-worker ones); kcl-mp's additions use operations Java does not
(``Fleet``, ``Checkpoint``, ``Processor``, ``Supervisor``). Prometheus gets snake_case
names under ``kclmp_`` (docs/operations.md lists both). Times are recorded in seconds (a
Prometheus name ending ``_seconds``) and sent to CloudWatch in milliseconds.

Per-worker series (``WorkerIdentifier``, ``kclmp_worker_leases{worker}``) are bounded: the
worker ids come from the lease table's ``leaseOwner`` values, which anyone who can write a
row chooses, and each distinct one would be a CloudWatch metric (billed) and a Prometheus
series. This worker and the ``MAX_WORKER_SERIES - 1`` holding the most leases keep their
own; the rest are counted together under ``OTHER_WORKERS`` (``named_workers``).

A metrics level filters what CloudWatch gets (``NONE`` < ``SUMMARY`` < ``DETAILED``), as
in Java; Prometheus, when enabled, always shows everything. Disabled dimensions are
dropped before aggregation, so e.g. without ``ShardId`` the per-lease statistic sets of a
worker merge into one per operation, which is what CloudWatch would compute anyway.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

LEVELS = {"NONE": 0, "SUMMARY": 1, "DETAILED": 2}
PUT_BATCH = 1000  # datums per PutMetricData (CloudWatch's limit since 2023; Java KCL sends 20)
MAX_WORKER_SERIES = 50  # per-worker series kept by name, this worker's included
OTHER_WORKERS = "(other workers)"  # the label the rest are counted under


@dataclass(frozen=True)
class Spec:
    operation: str  # CloudWatch dimension Operation
    name: str  # CloudWatch MetricName
    unit: str  # CloudWatch unit
    level: str  # SUMMARY or DETAILED
    kind: str  # counter | gauge | timer (seconds) | success (1 or 0 a sample)
    label: str  # "" (the host), "shard" (a lease) or "worker" (a worker of the fleet)
    prom: str  # Prometheus name
    doc: str

    @property
    def in_seconds(self) -> bool:
        """Recorded in seconds (Prometheus' base unit); CloudWatch gets milliseconds."""
        return self.prom.endswith("_seconds")


def _s(operation: str, name: str, unit: str, level: str, kind: str, label: str, prom: str, doc: str) -> Spec:
    return Spec(operation, name, unit, level, kind, label, prom, doc)


# id -> Spec. The ids are what the supervisor records; nothing else names a metric.
CATALOGUE: dict[str, Spec] = {
    # the fleet, as this host's last table scan saw it
    "total_leases": _s("TakeLeases", "TotalLeases", "Count", "SUMMARY", "gauge", "", "kclmp_total_leases",
                       "leases in the table, finished ones included"),
    "total_shards": _s("Fleet", "TotalShards", "Count", "SUMMARY", "gauge", "", "kclmp_total_shards",
                       "open shards the table tracks (leases not at SHARD_END)"),
    "unclaimed_leases": _s("TakeLeases", "ExpiredLeases", "Count", "SUMMARY", "gauge", "",
                           "kclmp_unclaimed_leases", "open leases with no owner or an owner that stopped renewing"),
    "workers": _s("TakeLeases", "NumWorkers", "Count", "SUMMARY", "gauge", "", "kclmp_workers",
                  "workers renewing at least one lease (this one included)"),
    "worker_leases": _s("Fleet", "WorkerLeases", "Count", "SUMMARY", "gauge", "worker", "kclmp_worker_leases",
                        "open leases each live worker holds"),
    # this host's leases
    "leases_held": _s("RenewAllLeases", "CurrentLeases", "Count", "SUMMARY", "gauge", "", "kclmp_leases_held",
                      "leases this worker holds"),
    "lease_renewals": _s("RenewAllLeases", "RenewLease.Success", "Count", "DETAILED", "success", "",
                         "kclmp_lease_renewals", "lease renewals (1 renewed, 0 failed)"),
    "renew_time": _s("RenewAllLeases", "Time", "Milliseconds", "SUMMARY", "timer", "", "kclmp_renew_round_seconds",
                     "one renewal round over every held lease"),
    "leases_lost": _s("RenewAllLeases", "LostLeases", "Count", "SUMMARY", "counter", "", "kclmp_leases_lost",
                      "leases lost: taken by another worker, not renewable, or a checkpoint refused"),
    "leases_taken": _s("TakeLeases", "TakenLeases", "Count", "SUMMARY", "counter", "", "kclmp_leases_taken",
                       "leases taken (expired, unowned, or handed over)"),
    "leases_stolen": _s("TakeLeases", "StolenLeases", "Count", "SUMMARY", "counter", "", "kclmp_leases_stolen",
                        "leases asked for from a more loaded worker to balance"),
    "leases_released": _s("Supervisor", "ReleasedLeases", "Count", "SUMMARY", "counter", "",
                          "kclmp_leases_released", "leases given back (shutdown, a processor that kept failing)"),
    "client_version_changes": _s("Fleet", "ClientVersionChanges", "Count", "SUMMARY", "counter", "",
                                 "kclmp_client_version_changes",
                                 "KCL 3.x fleet: Migration3.0 flips and rollbacks this worker followed"),
    "leader_changes": _s("Fleet", "LeaderChanges", "Count", "SUMMARY", "counter", "", "kclmp_leader_changes",
                         "KCL 3.x fleet: this worker became or stopped being the leader"),
    "loop_lag": _s("Supervisor", "LoopLag", "Milliseconds", "DETAILED", "gauge", "", "kclmp_loop_lag_seconds",
                   "how late the supervisor loop ran a due renewal"),
    "loop_step_errors": _s("Supervisor", "LoopStepErrors", "Count", "SUMMARY", "counter", "",
                           "kclmp_loop_step_errors", "loop steps that failed unexpectedly (each logged with its step)"),
    # a multi-stream application's streams (Java's MultiStreamTracker metrics: leases.stream_changes)
    "active_streams": _s("MultiStreamTracker", "ActiveStreams.Count", "Count", "SUMMARY", "gauge", "",
                         "kclmp_active_streams", "streams in the application's list, as last read"),
    "streams_pending_deletion": _s("MultiStreamTracker", "StreamsPendingDeletion.Count", "Count", "SUMMARY", "gauge",
                                   "", "kclmp_streams_pending_deletion",
                                   "former streams whose leases wait to be deleted (the host that deletes them)"),
    "deleted_streams": _s("MultiStreamTracker", "DeletedStreams.Count", "Count", "SUMMARY", "counter", "",
                          "kclmp_deleted_streams", "former streams whose leases this host deleted"),
    "rows_not_leases": _s("TakeLeases", "RowsNotLeases", "Count", "SUMMARY", "gauge", "", "kclmp_rows_not_leases",
                          "rows of the lease table that are not leases (left alone; `kcl-mp leases` shows why)"),
    "pool_process_exits": _s("Supervisor", "PoolProcessExits", "Count", "SUMMARY", "counter", "",
                             "kclmp_pool_process_exits", "pool processes that died; each cost its shards a restart"),
    # per lease
    "records": _s("ProcessTask", "RecordsProcessed", "Count", "SUMMARY", "counter", "shard",
                  "kclmp_lease_records", "user records delivered to the processor"),
    "bytes": _s("ProcessTask", "DataBytesProcessed", "Bytes", "SUMMARY", "counter", "shard", "kclmp_lease_bytes",
                "bytes of record data delivered to the processor"),
    "millis_behind_latest": _s("ProcessTask", "MillisBehindLatest", "Milliseconds", "SUMMARY", "gauge", "shard",
                               "kclmp_lease_millis_behind_latest", "how far the last GetRecords was behind the tip"),
    "process_time": _s("ProcessTask", "RecordProcessor.processRecords.Time", "Milliseconds", "SUMMARY", "timer",
                       "shard", "kclmp_lease_process_records_seconds", "processRecords, sent to answered"),
    "checkpoint_time": _s("Checkpoint", "Time", "Milliseconds", "DETAILED", "timer", "shard",
                          "kclmp_lease_checkpoint_seconds", "a processor's checkpoint written to the lease table"),
    "checkpoint_age": _s("Checkpoint", "CheckpointAge", "Milliseconds", "SUMMARY", "gauge", "shard",
                         "kclmp_lease_checkpoint_age_seconds",
                         "since the processor last checkpointed (since this worker took the lease, if it has not)"),
    "processor_restarts": _s("Processor", "Restarts", "Count", "SUMMARY", "counter", "shard",
                             "kclmp_lease_processor_restarts", "processor restarts after a failure"),
    "processor_cpu": _s("Processor", "CpuPercent", "Percent", "DETAILED", "gauge", "shard",
                        "kclmp_lease_processor_cpu_percent", "CPU of the processor's process tree (% of a core)"),
    "processor_rss": _s("Processor", "RssBytes", "Bytes", "DETAILED", "gauge", "shard",
                        "kclmp_lease_processor_rss_bytes", "resident memory of the processor's process tree"),
    "processor_stderr_dropped": _s("Processor", "StderrLinesDropped", "Count", "DETAILED", "counter", "shard",
                                   "kclmp_lease_processor_stderr_dropped_lines",
                                   "stderr lines not logged: over kclmp.processorStderrLinesPer10s or "
                                   "kclmp.processorStderrBytesPer10s"),
}


@dataclass
class Stat:
    """A CloudWatch statistic set, plus the last value (what a Prometheus gauge shows)."""

    count: int
    total: float
    low: float
    high: float
    last: float

    @classmethod
    def of(cls, value: float) -> Stat:
        return cls(1, value, value, value, value)

    def add(self, value: float) -> None:
        self.merge(Stat.of(value))

    def merge(self, other: Stat) -> None:
        self.count += other.count
        self.total += other.total
        self.low = min(self.low, other.low)
        self.high = max(self.high, other.high)
        self.last = other.last


# (metric id, label value or "") -> Stat
Samples = dict[tuple[str, str], Stat]


def named_workers(weights: Mapping[str, float], me: str, limit: int = MAX_WORKER_SERIES) -> set[str]:
    """The workers that keep a series of their own: this one, then the most loaded (by name
    on a tie), ``limit`` in all; the others are counted under ``OTHER_WORKERS``.

    >>> sorted(named_workers({"a": 1, "b": 5, "c": 3, "me": 0}, "me", 3))
    ['b', 'c', 'me']
    """
    if len(weights) <= limit:
        return set(weights)
    ranked = sorted((w for w in weights if w != me), key=lambda w: (-weights[w], w))
    return {me, *ranked[:limit - 1]}


def fold_worker_gauges(gauges: Mapping[str, Mapping[str, float]], me: str,
                       limit: int = MAX_WORKER_SERIES) -> dict[str, dict[str, float]]:
    """``gauges`` with each per-worker gauge bounded: the rest summed under ``OTHER_WORKERS``.

    >>> fold_worker_gauges({"worker_leases": {"me": 1, "a": 4, "b": 2, "c": 1}, "workers": {"": 4}}, "me", 2)
    {'worker_leases': {'me': 1, 'a': 4, '(other workers)': 3}, 'workers': {'': 4}}
    """
    folded = {metric: dict(values) for metric, values in gauges.items()}
    for metric, values in gauges.items():
        if metric in CATALOGUE and CATALOGUE[metric].label == "worker":
            named = named_workers(values, me, limit)
            folded[metric] = {w: v for w, v in values.items() if w in named}
            rest = [v for w, v in values.items() if w not in named]
            if rest:
                folded[metric][OTHER_WORKERS] = sum(rest)
    return folded


def fold_worker_samples(samples: Samples, me: str, limit: int = MAX_WORKER_SERIES) -> Samples:
    """``samples`` with each per-worker metric bounded: the rest merged under ``OTHER_WORKERS``
    (CloudWatch's Sum is their total, SampleCount how many, as with the dimension dropped)."""
    by_metric: dict[str, dict[str, float]] = {}
    for (metric, label), stat in samples.items():
        if CATALOGUE[metric].label == "worker":
            by_metric.setdefault(metric, {})[label] = stat.last
    if all(len(weights) <= limit for weights in by_metric.values()):
        return samples
    named = {metric: named_workers(weights, me, limit) for metric, weights in by_metric.items()}
    folded: Samples = {}
    for (metric, label), stat in samples.items():
        if metric in named and label not in named[metric]:
            label = OTHER_WORKERS
        mine = folded.get((metric, label))
        if mine is None:
            folded[(metric, label)] = Stat(stat.count, stat.total, stat.low, stat.high, stat.last)
        else:
            mine.merge(stat)
    return folded


class Recorder:
    """The supervisor's side: aggregate samples between two shipments; bounded by the
    number of metrics times labels (leases held, workers seen), not by time."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self._samples: Samples = {}

    def add(self, metric: str, value: float, label: str = "") -> None:
        if not self.enabled:
            return
        assert metric in CATALOGUE, metric
        stat = self._samples.get((metric, label))
        if stat is None:
            self._samples[(metric, label)] = Stat.of(value)
        else:
            stat.add(value)

    def merge(self, samples: Samples) -> None:
        """Fold in what another recorder drained (a pool process's, sent over its pipe)."""
        if not self.enabled:
            return
        for key, stat in samples.items():
            mine = self._samples.get(key)
            if mine is None:
                self._samples[key] = stat
            else:
                mine.merge(stat)

    def drain(self) -> Samples:
        samples, self._samples = self._samples, {}
        return samples


def encode_samples(samples: Samples) -> list[list[Any]]:
    """Samples as JSON-ready rows ``[metric, label, count, sum, min, max, last]``."""
    return [[m, lbl, s.count, s.total, s.low, s.high, s.last] for (m, lbl), s in samples.items()]


def decode_samples(rows: Iterable[Sequence[Any]]) -> Samples:
    """The inverse of ``encode_samples``; rows naming an unknown metric are skipped."""
    return {(m, lbl): Stat(int(c), float(t), float(lo), float(hi), float(last))
            for m, lbl, c, t, lo, hi, last in rows if m in CATALOGUE}


# -- CloudWatch -------------------------------------------------------------------------

Dims = tuple[tuple[str, str], ...]


def dimensions(spec: Spec, label: str, worker_id: str, enabled: frozenset[str]) -> Dims:
    """The dimensions of one datum, in Java's order, keeping only enabled ones (Operation always)."""
    dims = [("Operation", spec.operation)]
    if spec.label == "shard":
        dims.append(("ShardId", label))
    dims.append(("WorkerIdentifier", label if spec.label == "worker" else worker_id))
    return tuple((name, value) for name, value in dims
                 if name == "Operation" or "ALL" in enabled or name in enabled)


class CloudWatchBuffer:
    """Statistic sets waiting for PutMetricData, one per metric name, unit and dimensions.

    ``add`` keeps what the level allows; ``due`` says when to publish: once the oldest
    datum waited ``buffer_time_s`` (metricsBufferTimeMillis), or at once when
    ``max_queue_size`` (metricsMaxQueueSize) distinct datums wait. While full (CloudWatch
    unreachable), new datums are dropped and counted; datums already waiting are kept and
    merged, so a failed publish is retried with nothing double-counted.
    """

    def __init__(self, worker_id: str, level: str, enabled_dimensions: Sequence[str],
                 buffer_time_s: float, max_queue_size: int):
        self.worker_id = worker_id
        self.level = LEVELS[level]
        self.enabled = frozenset(enabled_dimensions)
        self.buffer_time_s = buffer_time_s
        self.max_queue_size = max_queue_size
        self.waiting: dict[tuple[str, str, Dims], Stat] = {}
        self.first_at: float | None = None  # wall time of the oldest waiting datum
        self.dropped = 0

    def add(self, samples: Samples, now: float) -> None:
        for (metric, label), stat in fold_worker_samples(samples, self.worker_id).items():
            spec = CATALOGUE[metric]
            if LEVELS[spec.level] > self.level:
                continue
            key = (spec.name, spec.unit, dimensions(spec, label, self.worker_id, self.enabled))
            if spec.in_seconds:
                stat = Stat(stat.count, stat.total * 1000, stat.low * 1000, stat.high * 1000, stat.last * 1000)
            waiting = self.waiting.get(key)
            if waiting is not None:
                waiting.merge(stat)
            elif len(self.waiting) >= self.max_queue_size:
                self.dropped += 1
            else:
                self.waiting[key] = Stat(stat.count, stat.total, stat.low, stat.high, stat.last)
                if self.first_at is None:
                    self.first_at = now

    def due(self, now: float) -> bool:
        if not self.waiting or self.first_at is None:
            return False
        return len(self.waiting) >= self.max_queue_size or now - self.first_at >= self.buffer_time_s

    def take(self) -> tuple[float, dict[tuple[str, str, Dims], Stat]]:
        """Everything waiting (and its timestamp); ``give_back`` it if publishing failed."""
        taken, at = self.waiting, self.first_at or 0.0
        self.waiting, self.first_at = {}, None
        return at, taken

    def give_back(self, at: float, taken: Mapping[tuple[str, str, Dims], Stat]) -> None:
        for key, stat in taken.items():
            waiting = self.waiting.get(key)
            if waiting is not None:
                stat = Stat(stat.count, stat.total, stat.low, stat.high, stat.last)
                stat.merge(waiting)
            if key in self.waiting or len(self.waiting) < self.max_queue_size:
                self.waiting[key] = stat
            else:
                self.dropped += 1
        self.first_at = at if self.first_at is None else min(at, self.first_at)


def put_batches(taken: Mapping[tuple[str, str, Dims], Stat]) -> list[list[tuple[tuple[str, str, Dims], Stat]]]:
    """The waiting datums in a stable order, at most PUT_BATCH a PutMetricData call."""
    items = sorted(taken.items())
    return [items[start:start + PUT_BATCH] for start in range(0, len(items), PUT_BATCH)]


def put_request(namespace: str, at: float, batch: Iterable[tuple[tuple[str, str, Dims], Stat]]) -> dict[str, Any]:
    """PutMetricData's keyword arguments for one batch; ``at`` is epoch seconds."""
    return {
        "Namespace": namespace,
        "MetricData": [
            {
                "MetricName": name,
                "Dimensions": [{"Name": n, "Value": v} for n, v in dims],
                "Unit": unit,
                "Timestamp": at,
                "StatisticValues": {"SampleCount": float(s.count), "Sum": s.total, "Minimum": s.low,
                                    "Maximum": s.high},
            }
            for (name, unit, dims), s in batch
        ],
    }

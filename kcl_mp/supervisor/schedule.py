"""When each periodic step of the supervisor loop is next due. Pure.

The cadences are the lease settings' (and the stream list's, the usage log's, the metrics
link's, the progress line's); a step moves its own due time as it runs. The shard sync alone
has a rule: a failed listing is tried again after listShardsBackoffTimeInMillis, up to
maxListShardsRetryAttempts times in a row, then on the normal cadence again (Java's
ShardSyncTaskManager retries the same way); an audit that saw a gap for the first time is
confirmed failoverTimeMillis later (by then a live owner has created its children's leases,
and a dead one's leases have expired).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kcl_mp.config.settings import LeaseSettings

USAGE_LOG_S = 60.0  # how often the processors' CPU and memory are logged
METRICS_EVERY_S = 1.0  # how often the metrics process gets what was recorded
WAKE_AT_LEAST_S = 1.0  # the loop looks at its pool processes and shards at least this often


@dataclass
class Schedule:
    lease: LeaseSettings
    progress_every_s: float | None = None
    due: dict[str, float] = field(default_factory=dict)
    sync_failures: int = 0  # failed shard syncs in a row

    def start(self, now: float) -> None:
        """Start-up: a scan and the metrics at once, the rest one cadence from now."""
        self.due.update(renew=now + self.lease.renew_interval_s, scan=now,
                        sync=now + self.lease.shard_sync_interval_ms / 1000.0,
                        parents=now + self.lease.parent_shard_poll_interval_ms / 1000.0, usage=now + USAGE_LOG_S,
                        progress=now + (self.progress_every_s or 0), metrics=now, streams=now)

    def wake(self, now: float, starts_waiting: bool) -> float:
        """When the loop should stop waiting for messages: the next lease step, at once while
        shards wait to start (they start a few a turn)."""
        if starts_waiting:
            return now
        wake = min(self.due["renew"], self.due["scan"], self.due["sync"], self.due["parents"], now + WAKE_AT_LEAST_S)
        return min(wake, self.due["progress"]) if self.progress_every_s else wake

    def after_sync(self, ok: bool, now: float, confirming: bool = False) -> int:
        """Set the next shard sync after one that succeeded or failed (``confirming``: an audit
        that saw a gap for the first time); the failures in a row when they ran out of retries
        (the caller says so; the cadence resumes), else 0.

        >>> s = Schedule(LeaseSettings("t", list_shards_backoff_ms=1500, max_list_shards_retry_attempts=2,
        ...                            shard_sync_interval_ms=60000, failover_time_ms=10000))
        >>> [(s.after_sync(ok, 0.0), s.due["sync"]) for ok in (False, False, False, False, True)]
        [(0, 1.5), (0, 1.5), (3, 60.0), (0, 1.5), (0, 60.0)]
        >>> s.after_sync(True, 0.0, confirming=True), s.due["sync"]
        (0, 10.0)
        """
        self.sync_failures = 0 if ok else self.sync_failures + 1
        if self.sync_failures and self.sync_failures <= self.lease.max_list_shards_retry_attempts:
            self.due["sync"] = now + self.lease.list_shards_backoff_ms / 1000.0
            return 0
        failures, self.sync_failures = self.sync_failures, 0
        wait_ms = min(self.lease.failover_time_ms, self.lease.shard_sync_interval_ms) if confirming and ok \
            else self.lease.shard_sync_interval_ms
        self.due["sync"] = now + wait_ms / 1000.0
        return failures

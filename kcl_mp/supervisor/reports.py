"""What a host shows of itself besides its event logs: the processors' usage line, the
figures it ships to the metrics process (which publishes them and answers /healthz), the live
progress view, and the lease table's rows that are not leases. Each reads the supervisor's
parts; none changes them."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import orjson

from kcl_mp.config import Config
from kcl_mp.leases.rows import OtherRow, other_rows_line
from kcl_mp.logs import ShardLog
from kcl_mp.metrics import link
from kcl_mp.metrics import process as metrics_process
from kcl_mp.metrics.catalogue import Recorder, encode_samples
from kcl_mp.supervisor.coordinator import LeaseCoordinator
from kcl_mp.supervisor.exits import Exits
from kcl_mp.supervisor.progress import render, shard_state
from kcl_mp.supervisor.shards import Shards
from kcl_mp.supervisor.starts import Starts


class Reports:
    def __init__(self, config: Config, log: ShardLog, metrics: Recorder, leases: LeaseCoordinator, shards: Shards,
                 starts: Starts, exits: Exits, clock: Callable[[], float]):
        self.config, self.log, self.metrics, self.leases, self.shards = config, log, metrics, leases, shards
        self.starts, self.exits, self.clock = starts, exits, clock
        self.metrics_link: metrics_process.Link | None = None
        self.views = 0  # live views printed (the first has the legend)
        self.other_rows: frozenset[str] = frozenset()  # keys of the rows not leases, as last logged

    def start_metrics(self, log_level: str, log_format: str) -> None:
        """Fork the metrics process: before any thread or pool process exists."""
        self.metrics_link = metrics_process.start(self.config, log_level, log_format)

    def stop_metrics(self) -> None:
        """Close the pipe, so the metrics process publishes what it has and ends (bounded)."""
        if self.metrics_link is not None:
            self.metrics_link.close()
            self.metrics_link = None

    def log_usage(self) -> None:
        """One line for the host's processors: CPU and memory in all, and the largest."""
        line = self.shards.usage_line(self.exits.counters["processor_restarts"])
        if line:
            self.log.info("%s", line)

    def ship_metrics(self, loop_lag_s: float, stopping: bool) -> None:
        """Send what was recorded, with the current gauges, to the metrics process. If the
        last line is still in the pipe, keep recording into the same statistic sets."""
        if self.metrics_link is None or not self.metrics_link.idle():
            return
        renewed = {key: held.renewed_at for key, held in self.leases.held.items()}
        line = link.snapshot(renewed, self.shards.views(), self.leases.taker.figures, loop_lag_s, self.clock(),
                             stopping)
        self.metrics_link.send(orjson.dumps({"samples": encode_samples(self.metrics.drain()), **line}) + b"\n")

    def show_progress(self, stopped: bool = False) -> None:
        now = self.clock()
        restarts_waiting = self.starts.restarts
        avoid = {key: until - now for key, until in self.leases.taker.avoid.items() if until > now}
        keys = {*self.leases.held, *self.shards.active, *restarts_waiting, *avoid, *self.exits.ended}
        restarts = {key: (r.attempts, r.not_before - now) for key, r in restarts_waiting.items()
                    if key not in self.shards.active}
        states = {key: shard_state(key in self.shards.active, restarts.get(key), self.config.processor.max_restarts,
                                   avoid.get(key), self.starts.waiting.get(key, ()), key in self.exits.ended)
                  for key in keys}
        print(render(list(self.shards.progress.values()), states, len(self.leases.held), now,
                     legend=not self.views, stopped=stopped), flush=True)
        self.views += 1

    def note_other_rows(self, others: Sequence[OtherRow]) -> None:
        """Count the rows of the lease table that are not leases; log them (bounded) when they change."""
        self.metrics.add("rows_not_leases", len(others))
        keys = frozenset(row.key for row in others)
        if keys == self.other_rows:
            return
        self.other_rows = keys
        if others:
            unreadable = any(row.view is None for row in others)
            (self.log.warning if unreadable else self.log.info)(
                "lease table %s also holds %s, left alone", self.config.lease.table_name, other_rows_line(others))

"""What the supervisor sends the metrics process once a second, assembled from its own state.

Pure: ``snapshot`` takes what the supervisor knows (held leases, each shard's last report,
the fleet as the last scan saw it) and gives the gauges, the /healthz state and the held
lease keys; the supervisor adds the recorded samples and sends the line.

>>> shard = ShardView("s-1", millis_behind_latest=5, cpu_percent=None, rss_bytes=None)
>>> out = snapshot({"s-1": 9.0}, [shard], None, loop_lag_s=0.01, now=10.0, stopping=False)
>>> out["gauges"]["millis_behind_latest"], out["state"]["renewed_s_ago"], out["leases"]
({'s-1': 5}, 1.0, ['s-1'])
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ShardView:
    """One running shard, as its last reports showed it."""

    key: str
    millis_behind_latest: int | None
    cpu_percent: float | None
    rss_bytes: int | None


def snapshot(renewed_at: Mapping[str, float], shards: Iterable[ShardView], fleet: Any, loop_lag_s: float,
             now: float, stopping: bool) -> dict[str, Any]:
    """``renewed_at``: each held lease's last renewal (the supervisor's clock); ``fleet``: the
    last scan's ``balance`` view, or None before the first."""
    shards = list(shards)
    gauges: dict[str, dict[str, float]] = {
        "leases_held": {"": len(renewed_at)},
        "loop_lag": {"": loop_lag_s},
        "millis_behind_latest": {s.key: s.millis_behind_latest for s in shards if s.millis_behind_latest is not None},
        "processor_cpu": {s.key: s.cpu_percent for s in shards if s.cpu_percent is not None},
        "processor_rss": {s.key: s.rss_bytes for s in shards if s.rss_bytes is not None},
    }
    if fleet is not None:
        gauges.update(total_leases={"": fleet.total_leases}, total_shards={"": fleet.open_leases},
                      unclaimed_leases={"": fleet.unclaimed}, workers={"": len(fleet.worker_leases)},
                      worker_leases=fleet.worker_leases)
    oldest = min(renewed_at.values(), default=None)
    state = {"held": len(renewed_at), "workers_running": len(shards),
             "renewed_s_ago": None if oldest is None else round(now - oldest, 3),
             "loop_lag_s": round(loop_lag_s, 3), "stopping": stopping}
    return {"gauges": gauges, "state": state, "leases": sorted(renewed_at)}

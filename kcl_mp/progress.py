"""The live view of a running host: records per second per shard and the last checkpoint."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ShardProgress:
    shard_id: str
    delivered: int = 0
    checkpoint: str = "-"
    millis_behind_latest: int | None = None
    rate: float = 0.0
    _last: tuple[float, int] | None = field(default=None, repr=False)

    def update(self, delivered: int, checkpoint: str, behind: int | None, now: float) -> None:
        if self._last is not None and now > self._last[0]:
            self.rate = (delivered - self._last[1]) / (now - self._last[0])
        self._last = (now, delivered)
        self.delivered = delivered
        self.checkpoint = checkpoint
        self.millis_behind_latest = behind


def render(shards: list[ShardProgress], held: int, now: float) -> str:
    """A small fixed-width table, one line a shard, then the totals."""
    lines = [f"{'shard':<24}{'records':>10}{'rec/s':>10}{'behind ms':>11}  checkpoint"]
    for p in sorted(shards, key=lambda s: s.shard_id):
        behind = "-" if p.millis_behind_latest is None else str(p.millis_behind_latest)
        lines.append(f"{p.shard_id:<24}{p.delivered:>10}{p.rate:>10.0f}{behind:>11}  {p.checkpoint}")
    total = sum(p.delivered for p in shards)
    rate = sum(p.rate for p in shards)
    lines.append(f"{'total (' + str(held) + ' leases)':<24}{total:>10}{rate:>10.0f}")
    return "\n".join(lines)

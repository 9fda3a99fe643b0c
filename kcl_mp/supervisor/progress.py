"""The live view of a running host: records per second per shard and the last checkpoint."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ShardProgress:
    """What a shard worker last reported; ``rate`` is measured between two views."""

    shard_id: str
    delivered: int = 0
    checkpoint: str = "-"
    millis_behind_latest: int | None = None
    _shown: tuple[float, int] | None = field(default=None, repr=False)

    def update(self, delivered: int, checkpoint: str, behind: int | None) -> None:
        self.delivered = delivered
        self.checkpoint = checkpoint
        self.millis_behind_latest = behind

    def rate(self, now: float) -> float:
        """Records/s since the previous view (0 on the first), so a line is a steady average."""
        before, self._shown = self._shown, (now, self.delivered)
        if before is None or now <= before[0]:
            return 0.0
        return (self.delivered - before[1]) / (now - before[0])


def render(shards: list[ShardProgress], held: int, now: float) -> str:
    """A small fixed-width table, one line a shard, then the totals."""
    lines = [f"{'shard':<24}{'records':>10}{'rec/s':>10}{'behind ms':>11}  checkpoint"]
    total_rate = 0.0
    for p in sorted(shards, key=lambda s: s.shard_id):
        rate = p.rate(now)
        total_rate += rate
        behind = "-" if p.millis_behind_latest is None else str(p.millis_behind_latest)
        lines.append(f"{p.shard_id:<24}{p.delivered:>10}{rate:>10.0f}{behind:>11}  {p.checkpoint}")
    total = sum(p.delivered for p in shards)
    lines.append(f"{'total (' + str(held) + ' leases)':<24}{total:>10}{total_rate:>10.0f}")
    return "\n".join(lines)

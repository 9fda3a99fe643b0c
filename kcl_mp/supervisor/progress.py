"""The live view of a running host (``--progress``): per shard its state, records, rate and
last checkpoint, then the totals. Pure: the supervisor gathers the facts and prints.

A shard's state, first match wins (``shard_state``):

    its processor runs                              running
    it failed and waits for restart n               restarting n/max (in s)
    this host released it after max failures       released (left alone s more)
    its parents have not reached SHARD_END          waiting on parents P
    it was checkpointed at SHARD_END here           ended
    none of these (the lease moved, is starting)    idle

Records count every record delivered to the shard's processors on this host, so the
figure does not fall back when a processor restarts (``ShardProgress.restarted``). When no
shard is running while this host holds leases, or holds none, a banner says so, since a
view of zeros is easy to misread as a quiet stream.

>>> p = ShardProgress("shardId-0")
>>> p.update(100, "49-1", 0); p.restarted(); p.update(20, "49-2", 0)
>>> p.delivered
120
>>> shard_state(running=False, restart=(2, 4.0), max_restarts=5, avoid_s=None, parents=(), ended=False)
'restarting 2/5 (in 4 s)'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

LEGEND = ("records: delivered to this shard's processors on this host since start (kept across restarts); "
          "rec/s: since the last view; behind ms: MillisBehindLatest of the last read; "
          "checkpoint: the last one stored; state: running, restarting n/max, released, waiting on parents, ended")


@dataclass
class ShardProgress:
    """What a shard's workers reported on this host; ``rate`` is measured between two views."""

    shard_id: str
    current: int = 0  # delivered by the processor running now
    earlier: int = 0  # delivered by the processors before it, on this host
    checkpoint: str = "-"
    millis_behind_latest: int | None = None
    _shown: tuple[float, int] | None = field(default=None, repr=False)

    @property
    def delivered(self) -> int:
        return self.earlier + self.current

    def update(self, delivered: int, checkpoint: str, behind: int | None) -> None:
        self.current = delivered
        self.checkpoint = checkpoint
        self.millis_behind_latest = behind

    def restarted(self) -> None:
        """A new worker starts for the shard: its counts start from 0, the view's do not."""
        self.earlier += self.current
        self.current = 0

    def rate(self, now: float) -> float:
        """Records/s since the previous view (0 on the first), so a line is a steady average."""
        before, self._shown = self._shown, (now, self.delivered)
        if before is None or now <= before[0]:
            return 0.0
        return (self.delivered - before[1]) / (now - before[0])


def shard_state(running: bool, restart: tuple[int, float] | None, max_restarts: int, avoid_s: float | None,
                parents: Sequence[str], ended: bool) -> str:
    """The state column (module docstring); ``restart``: (attempt, seconds until it), ``avoid_s``:
    how long this host still leaves a released lease alone."""
    if running:
        return "running"
    if restart is not None:
        return f"restarting {restart[0]}/{max_restarts} (in {max(0.0, restart[1]):.0f} s)"
    if avoid_s is not None:
        return f"released (left alone {max(0.0, avoid_s):.0f} s more)"
    if parents:
        return f"waiting on parents {','.join(parents)}"
    return "ended" if ended else "idle"


def render(shards: Sequence[ShardProgress], states: Mapping[str, str], held: int, now: float,
           legend: bool = False, stopped: bool = False) -> str:
    """A small fixed-width table, one line a shard (those in ``states``), then the totals
    (every shard seen here), and a banner when nothing is processing (``stopped``: the last
    view, after the leases were released, says so instead)."""
    lines = [LEGEND] if legend else []
    lines.append(f"{'shard':<24}{'records':>10}{'rec/s':>10}{'behind ms':>11}  {'checkpoint':<28}state")
    rates = {p.shard_id: p.rate(now) for p in shards}  # every shard's, so one that leaves the view skews nothing
    by_key = {p.shard_id: p for p in shards}
    for key in sorted(states):
        p = by_key.get(key) or ShardProgress(key)
        behind = "-" if p.millis_behind_latest is None else str(p.millis_behind_latest)
        lines.append(f"{key:<24}{p.delivered:>10}{rates.get(key, 0.0):>10.0f}{behind:>11}  {p.checkpoint:<28}"
                     f"{states[key]}")
    total_rate = sum(rates.values())
    total = sum(p.delivered for p in shards)
    lines.append(f"{'total (' + str(held) + ' leases)':<24}{total:>10}{total_rate:>10.0f}")
    running = sum(1 for state in states.values() if state == "running")
    if stopped:
        lines.append("(the last figures: this host stopped and released its leases)")
    elif not running and held:
        lines.append(f"!! nothing is processing: {held} leases held, no processor running "
                     "(the log says why; kcl-mp leases shows the table)")
    elif not held:
        lines.append("!! nothing is processing: this host holds no lease yet "
                     "(starting, waiting for leases to expire, or every lease is with another host)")
    return "\n".join(lines)

"""Each held lease's read throughput, as KCL 3.x workers write it on renewals.

Pure, the clock passed in. A Java worker records the bytes of every batch its processor is
given (ProcessTask.publishLeaseStats: the records' data sizes) and, on each renewal of the
lease, writes ``throughputKBps`` N with the counter (DynamoDBLeaseRefresher.renewLease:
the same UpdateItem, ``throughputKBps`` PUT beside ``leaseCounter``). The value is
LeaseStatsRecorder.getThroughputKBps: drop the batches older than one renewal period, sum
the bytes of the rest, divide by 1024 and by the period in seconds, and smooth with an
exponential moving average (alpha 0.5, the first value taken as is); the renewer rounds
it half-up to 6 decimals. No batch ever recorded: no value, and the renewal writes none.
The leader's assignment reads it to weigh leases (maxThroughputPerHostKBps, the LAM).

Worked example, renewals every 1 s: 2048 bytes read at t=0.2 s and 1024 at t=0.7 s give
3 KB/s at t=1.0; nothing more read, at t=2.0 the window is empty: 0 KB/s smoothed with
3 gives 1.5.

>>> t = LeaseThroughput(renewal_period_ms=1000)
>>> t.record("shardId-0", 2048, 200); t.record("shardId-0", 1024, 700)
>>> t.kbps("shardId-0", 1000), t.kbps("shardId-0", 2000), t.kbps("shardId-1", 2000)
(3.0, 1.5, None)
"""

from __future__ import annotations

from collections import deque
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from kcl_mp.leases.lease import THROUGHPUT_KBPS
from kcl_mp.leases.rows import java_double

ALPHA = 0.5  # LeaseStatsRecorder.DEFAULT_ALPHA
BYTES_PER_KB = 1024


class LeaseThroughput:
    """Bytes read per lease (epoch ms stamps) and the smoothed KB/s each renewal writes."""

    def __init__(self, renewal_period_ms: int):
        if renewal_period_ms <= 0:
            raise ValueError(f"renewal period {renewal_period_ms} ms: expected > 0")
        self.period_ms = renewal_period_ms
        self.batches: dict[str, deque[tuple[int, int]]] = {}
        self.smoothed: dict[str, float] = {}

    def record(self, key: str, nbytes: int, now_ms: int) -> None:
        self.batches.setdefault(key, deque()).append((now_ms, nbytes))

    def kbps(self, key: str, now_ms: int) -> float | None:
        """The value the renewal of ``key`` at ``now_ms`` writes, or None (never read)."""
        batches = self.batches.get(key)
        if batches is None:
            return None
        while batches and now_ms - batches[0][0] >= self.period_ms:
            batches.popleft()
        rate = sum(n for at, n in batches if at <= now_ms) / BYTES_PER_KB / (self.period_ms / 1000.0)
        previous = self.smoothed.get(key)
        value = rate if previous is None else ALPHA * rate + (1 - ALPHA) * previous
        self.smoothed[key] = value
        return float(Decimal(repr(value)).quantize(Decimal("0.000001"), rounding=ROUND_HALF_UP))

    def drop(self, key: str) -> None:
        """Forget a lease no longer held (LeaseStatsRecorder.dropLeaseStats)."""
        self.batches.pop(key, None)
        self.smoothed.pop(key, None)


def renewal_attributes(kbps: float | None) -> dict[str, Any]:
    """What a renewal writes beside the counter: ``{"throughputKBps": {"N": ...}}``, or nothing.

    >>> renewal_attributes(3.0), renewal_attributes(None)
    ({'throughputKBps': {'N': '3.0'}}, {})
    """
    return {} if kbps is None else {THROUGHPUT_KBPS: {"N": java_double(kbps)}}

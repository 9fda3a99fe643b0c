"""The figures a fleet benchmark reports (bench/cost_fleet.py), from what it observed. Pure.

- ``percentile``: nearest rank (the smallest value with at least q % of the values at or
  below it), so p99 of 100 values is the 99th, not an interpolation;
- ``max_over_mean``: how uneven the hosts are (1.0: even; 3.0: one host of three does it all);
- ``deliveries``: from the recorder's lines (tests/processors/recorder.py), put-to-delivery
  and put-to-processed latency per record and millisBehindLatest per processRecords, in a
  window;
- ``last_record``: the newest record line in the tail of a recorder's file (how fresh a
  shard's processing is);
- ``owner_moves``: lease owner changes in a window, from a lease table's history as
  tests/support/harness.TableMonitor keeps it.

    >>> percentile([5, 1, 4, 2, 3], 50), percentile(range(1, 101), 99), percentile([], 99)
    (3, 99, None)
    >>> max_over_mean([0.3, 0.1, 0.2]), max_over_mean([0.0, 0.0])
    (1.5, None)
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


def percentile(values: Iterable[float], q: float) -> float | None:
    """The nearest-rank ``q``-th percentile (0 < q <= 100); None for no values."""
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[max(0, math.ceil(q / 100.0 * len(ordered)) - 1)]


def max_over_mean(values: Sequence[float]) -> float | None:
    """The largest value over the mean, 3 decimals; None when the mean is 0 (nothing to compare)."""
    mean = sum(values) / len(values) if values else 0.0
    return round(max(values) / mean, 3) if mean > 0 else None


@dataclass(frozen=True)
class Deliveries:
    """What the processors got in a window: records, and p50/p99 of their put-to-delivery
    latency (ms: the processRecords' arrival minus the record's approximateArrivalTimestamp),
    of their put-to-processed latency (the recorder's line for the record written, which in a
    long batch on a busy processor is well after the batch arrived) and of millisBehindLatest
    (one value per processRecords, not per record)."""

    records: int
    batches: int
    latency_p50_ms: float | None
    latency_p99_ms: float | None
    processed_p50_ms: float | None
    processed_p99_ms: float | None
    behind_p50_ms: float | None
    behind_p99_ms: float | None


def deliveries(entries: Iterable[Mapping[str, Any]], start: float, end: float) -> Deliveries:
    """From the recorder's lines (``recorded``: each with ``_pid``): its record lines whose
    processRecords arrived (``got``, s) in [start, end). A line without ``behind`` (an older
    recorder) counts for the latency only.

    >>> lines = [{"_pid": 1, "got": 10.0, "at": 10.1, "ts": 9_900, "behind": 0},
    ...          {"_pid": 1, "got": 10.0, "at": 10.2, "ts": 9_500, "behind": 0},
    ...          {"_pid": 2, "got": 11.0, "at": 14.0, "ts": 8_000, "behind": 2500},
    ...          {"_pid": 2, "got": 30.0, "at": 30.0, "ts": 29_000, "behind": 0},
    ...          {"_pid": 2, "event": "checkpoint", "at": 10.5}]
    >>> d = deliveries(lines, 10.0, 20.0)
    >>> d.records, d.batches, d.latency_p50_ms, d.latency_p99_ms, d.processed_p50_ms, d.processed_p99_ms
    (3, 2, 500.0, 3000.0, 700.0, 6000.0)
    >>> d.behind_p50_ms, d.behind_p99_ms
    (0, 2500)
    """
    latencies: list[float] = []
    processed: list[float] = []
    behind: dict[tuple[int, float], float] = {}  # (pid, got): one processRecords
    for entry in entries:
        got = entry.get("got")
        if "event" in entry or got is None or not start <= got < end:
            continue
        latencies.append(round(got * 1000.0 - entry["ts"], 3))
        processed.append(round(entry["at"] * 1000.0 - entry["ts"], 3))
        if entry.get("behind") is not None:
            behind[entry["_pid"], got] = entry["behind"]
    return Deliveries(len(latencies), len(behind), percentile(latencies, 50), percentile(latencies, 99),
                      percentile(processed, 50), percentile(processed, 99),
                      percentile(behind.values(), 50), percentile(behind.values(), 99))


def last_record(tail: str) -> dict[str, Any] | None:
    r"""The newest whole record line (no ``event``) in ``tail``, the end of a recorder's file:
    its first line may be cut (the read began mid-line) and so may its last (being written).

    >>> last_record('ts": 1}\n{"ts": 5, "at": 9.0}\n{"event": "checkpoint"}\n{"ts": 6, "a')
    {'ts': 5, 'at': 9.0}
    >>> last_record('{"event": "initialize"}\n') is None
    True
    """
    for line in reversed(tail.split("\n")[:-1]):
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and "event" not in entry:
            return entry
    return None


History = Mapping[str, Sequence[Sequence[Any]]]  # lease -> [(time, owner, checkpoint), ...] at each change


def owner_moves(history: History, start: float, end: float) -> list[tuple[float, str, str, str]]:
    """(time, lease, from, to) for each lease that changed owner in [start, end): a new owner
    other than the last one that held it (a release to no owner and a take back by the same
    host is no move).

    >>> h = {"s0": [(1.0, "a", "1"), (5.0, None, "2"), (6.0, "b", "2"), (7.0, "b", "3")],
    ...      "s1": [(1.0, "a", "1"), (5.0, None, "1"), (6.0, "a", "1"), (9.0, "c", "1")]}
    >>> owner_moves(h, 2.0, 10.0)
    [(6.0, 's0', 'a', 'b'), (9.0, 's1', 'a', 'c')]
    >>> owner_moves(h, 6.5, 10.0)
    [(9.0, 's1', 'a', 'c')]
    """
    moves = []
    for lease, changes in history.items():
        last = None
        for at, owner, *_ in changes:
            if owner is None:
                continue
            if last is not None and owner != last and start <= at < end:
                moves.append((at, lease, last, owner))
            last = owner
    return sorted(moves)

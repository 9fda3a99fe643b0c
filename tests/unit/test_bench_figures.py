"""The figures bench/cost_fleet.py reports (kcl_mp.devtools.bench_figures): nearest-rank
percentiles, max/mean, the recorder's lines in a window, owner changes in a window."""

from __future__ import annotations

from kcl_mp.devtools.bench_figures import deliveries, last_record, max_over_mean, owner_moves, percentile


def test_percentile_is_the_nearest_rank():
    values = list(range(1, 201))  # 1..200
    assert percentile(values, 50) == 100
    assert percentile(values, 99) == 198
    assert percentile(values, 100) == 200
    assert percentile([7.0], 99) == 7.0
    assert percentile(reversed(values), 1) == 2  # order does not matter


def test_max_over_mean():
    assert max_over_mean([0.2, 0.2, 0.2]) == 1.0
    assert max_over_mean([0.6, 0.0, 0.0]) == 3.0  # one host of three does it all
    assert max_over_mean([]) is None


def test_deliveries_count_the_window_only_and_one_behind_per_batch():
    lines = [{"_pid": 1, "got": 9.99, "at": 10.0, "ts": 9_000, "behind": 900},  # before the window
             *({"_pid": 1, "got": 10.0, "at": 10.0 + i / 100, "ts": 9_000, "behind": 1000} for i in range(99)),
             {"_pid": 2, "got": 12.0, "at": 13.0, "ts": 2_000, "behind": 8000},
             {"_pid": 2, "got": 20.0, "at": 20.0, "ts": 19_000, "behind": 0},  # the window's end: out
             {"_pid": 2, "got": 15.0, "at": 15.0, "ts": 14_000},  # an older recorder: no behind
             {"_pid": 2, "event": "leaseLost", "at": 15.0}]
    d = deliveries(lines, 10.0, 20.0)
    assert (d.records, d.batches) == (101, 2)
    assert (d.latency_p50_ms, d.latency_p99_ms) == (1000.0, 1000.0)
    assert (d.processed_p50_ms, d.processed_p99_ms) == (1490.0, 1980.0)  # the 11 s one is the 101st of 101
    assert (d.behind_p50_ms, d.behind_p99_ms) == (1000, 8000)
    assert deliveries([], 0.0, 1.0).latency_p99_ms is None


def test_last_record_skips_events_and_cut_lines():
    assert last_record('{"ts": 1, "at": 2.0}\n{"event": "checkpoint", "at": 3.0}\n') == {"ts": 1, "at": 2.0}
    assert last_record('{"ts": 1, "at": 2.0}\n{"ts": 2, "at"') == {"ts": 1, "at": 2.0}
    assert last_record("") is None


def test_owner_moves_ignore_releases_and_the_first_owner():
    history = {"s0": [(1.0, None, None), (2.0, "a", None), (3.0, "a", "5"), (4.0, "b", "5"), (5.0, None, "6"),
                      (6.0, "b", "6"), (7.0, "c", "7")]}
    assert owner_moves(history, 0.0, 10.0) == [(4.0, "s0", "a", "b"), (7.0, "s0", "b", "c")]
    assert owner_moves(history, 4.5, 7.0) == []  # the window is half open

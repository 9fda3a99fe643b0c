"""Metrics without I/O: what reaches CloudWatch at each level and dimension setting, how the
buffer batches, keeps and drops, what /metrics shows, and when /healthz says unhealthy."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kcl_mp import logs
from kcl_mp.config import LeaseSettings
from kcl_mp.config.settings import StreamKind
from kcl_mp.leases.balance import figures
from kcl_mp.leases.lease import Lease
from kcl_mp.metrics.catalogue import (
    CATALOGUE,
    PUT_BATCH,
    CloudWatchBuffer,
    Recorder,
    Stat,
    decode_samples,
    dimensions,
    encode_samples,
    put_batches,
    put_request,
)
from kcl_mp.metrics.health import health
from kcl_mp.metrics.process import Exporter
from kcl_mp.retrieval.deaggregate import data_bytes


def test_every_metric_is_named_once_with_a_known_level_and_kind():
    assert len({spec.prom for spec in CATALOGUE.values()}) == len(CATALOGUE)
    assert len({(spec.operation, spec.name) for spec in CATALOGUE.values()}) == len(CATALOGUE)
    for spec in CATALOGUE.values():
        assert spec.level in ("SUMMARY", "DETAILED") and spec.kind in ("counter", "gauge", "timer", "success")
        assert spec.prom.startswith("kclmp_") and spec.label in ("", "shard", "worker")
        if spec.kind == "timer" or spec.in_seconds:  # recorded in seconds, sent in milliseconds
            assert spec.in_seconds and spec.unit == "Milliseconds"


def test_recorder_aggregates_and_drains():
    recorder = Recorder()
    for value in (3, 1, 2):
        recorder.add("records", value, "shard-1")
    recorder.add("leases_held", 4)
    samples = recorder.drain()
    assert samples[("records", "shard-1")] == Stat(3, 6, 1, 3, 2)
    assert samples[("leases_held", "")] == Stat(1, 4, 4, 4, 4)
    assert recorder.drain() == {}
    assert decode_samples(encode_samples(samples)) == samples
    other = Recorder()
    other.add("records", 10, "shard-1")
    other.merge(samples)
    assert other.drain()[("records", "shard-1")] == Stat(4, 16, 1, 10, 2)
    disabled = Recorder(enabled=False)
    disabled.add("records", 1, "s")
    assert disabled.drain() == {}


@pytest.mark.parametrize("enabled, expected", [
    (("ALL",), (("Operation", "ProcessTask"), ("ShardId", "s-1"), ("WorkerIdentifier", "w-1"))),
    (("Operation", "ShardId"), (("Operation", "ProcessTask"), ("ShardId", "s-1"))),
    (("WorkerIdentifier",), (("Operation", "ProcessTask"), ("WorkerIdentifier", "w-1"))),
    (("Operation",), (("Operation", "ProcessTask"),)),
])
def test_dimensions_keep_operation_always(enabled, expected):
    assert dimensions(CATALOGUE["records"], "s-1", "w-1", frozenset(enabled)) == expected


def test_fleet_worker_leases_name_the_worker_they_count():
    assert dimensions(CATALOGUE["worker_leases"], "other", "me", frozenset(["ALL"])) == (
        ("Operation", "Fleet"), ("WorkerIdentifier", "other"))


def _buffer(level="DETAILED", dims=("ALL",), buffer_s=10.0, queue=100):
    return CloudWatchBuffer("w-1", level, dims, buffer_s, queue)


def test_levels_filter_what_cloudwatch_gets():
    samples = {("records", "s-1"): Stat.of(5), ("processor_cpu", "s-1"): Stat.of(50), ("loop_lag", ""): Stat.of(0.2)}
    summary = _buffer("SUMMARY")
    summary.add(samples, 0.0)
    assert [key[0] for key in summary.waiting] == ["RecordsProcessed"]
    detailed = _buffer("DETAILED")
    detailed.add(samples, 0.0)
    assert sorted(key[0] for key in detailed.waiting) == ["CpuPercent", "LoopLag", "RecordsProcessed"]
    lag = next(stat for key, stat in detailed.waiting.items() if key[0] == "LoopLag")
    assert lag.total == pytest.approx(200.0), "seconds in, milliseconds out"


def test_disabled_dimensions_merge_statistic_sets():
    buffer = _buffer(dims=("Operation",))
    buffer.add({("records", "s-1"): Stat(2, 10, 4, 6, 6), ("records", "s-2"): Stat(1, 3, 3, 3, 3)}, 0.0)
    assert buffer.waiting == {("RecordsProcessed", "Count", (("Operation", "ProcessTask"),)): Stat(3, 13, 3, 6, 3)}


def test_due_after_the_buffer_time_or_when_the_queue_is_full():
    buffer = _buffer(buffer_s=10.0, queue=3)
    assert not buffer.due(0.0)
    buffer.add({("records", "s-1"): Stat.of(1)}, 100.0)
    assert not buffer.due(109.9) and buffer.due(110.0)
    buffer.add({("records", "s-2"): Stat.of(1), ("records", "s-3"): Stat.of(1)}, 101.0)
    assert buffer.due(101.0), "full: publish now"


def test_a_full_buffer_drops_new_datums_but_merges_known_ones():
    buffer = _buffer(queue=2)
    buffer.add({("records", "s-1"): Stat.of(1), ("records", "s-2"): Stat.of(1)}, 0.0)
    buffer.add({("records", "s-3"): Stat.of(1), ("records", "s-1"): Stat.of(4)}, 1.0)
    assert buffer.dropped == 1
    assert {key[2][1][1]: stat.total for key, stat in buffer.waiting.items()} == {"s-1": 5, "s-2": 1}


def test_a_failed_publish_gives_the_data_back_without_double_counting():
    buffer = _buffer()
    buffer.add({("records", "s-1"): Stat.of(3)}, 50.0)
    at, taken = buffer.take()
    assert buffer.waiting == {} and not buffer.due(1e9)
    buffer.add({("records", "s-1"): Stat.of(4)}, 60.0)  # recorded while the publish failed
    buffer.give_back(at, taken)
    (stat,) = buffer.waiting.values()
    assert (stat.count, stat.total) == (2, 7) and buffer.first_at == 50.0


def test_put_requests_batch_and_carry_statistic_sets():
    taken = {(f"M{i:04d}", "Count", (("Operation", "X"),)): Stat(2, 3.0, 1.0, 2.0, 2.0)
             for i in range(PUT_BATCH + 5)}
    batches = put_batches(taken)
    assert [len(b) for b in batches] == [PUT_BATCH, 5]
    request = put_request("app", 1700000000.0, batches[1])
    datum = request["MetricData"][0]
    assert request["Namespace"] == "app"
    assert datum["StatisticValues"] == {"SampleCount": 2.0, "Sum": 3.0, "Minimum": 1.0, "Maximum": 2.0}
    assert datum["Dimensions"] == [{"Name": "Operation", "Value": "X"}] and datum["Unit"] == "Count"


# /healthz at now = 100.0: (the report's arrival, its state, failover_s) -> healthy, and why not.
# The rule: the oldest held lease's renewal, as the supervisor last reported it, plus the
# time since that report, within failover; with no lease, a report within failover.
@pytest.mark.parametrize("received_at, state, failover_s, ok, reason", [
    # no report yet: starting
    (None, {}, 10.0, False, "no report"),
    # just reported, renewed lately
    (99.0, {"held": 2, "renewed_s_ago": 1.0}, 10.0, True, None),
    # renewed 1 s before a report 20 s old: 21 s > 10 s
    (80.0, {"held": 2, "renewed_s_ago": 1.0}, 10.0, False, "last renewed 21.0 s ago"),
    # the report is fresh but the renewals failed for 12 s
    (99.0, {"held": 2, "renewed_s_ago": 12.0}, 10.0, False, "last renewed 13.0 s ago"),
    # neither part alone is over, the sum is: a supervisor stopped 2 s after a renewal 1.5 s old (failover 3 s)
    (97.0, {"held": 1, "renewed_s_ago": 1.5}, 3.0, False, "past failoverTimeMillis (3.0 s)"),
    # a report 2.5 s old, the lease renewed 0.4 s before it: 2.9 s, still healthy
    (97.5, {"held": 1, "renewed_s_ago": 0.4}, 3.0, True, None),
    # failover 10 s: a stopped supervisor whose lease was renewed 3 s before its last report is
    # unhealthy 7 s after that report, not at a fixed 10 s
    (92.9, {"held": 1, "renewed_s_ago": 3.0}, 10.0, False, "last renewed 10.1 s ago"),
    # many leases, a renewal round of 4 s (failover 10 s, renewing every 3.3 s): the report before
    # the round says 3.3 s, the next comes right after the round; 4.3 s later, 7.6 s: healthy
    (95.7, {"held": 400, "renewed_s_ago": 3.3}, 10.0, True, None),
    # a spare worker is healthy while it reports
    (99.0, {"held": 0, "renewed_s_ago": None}, 10.0, True, None),
    (99.0, {"held": 0, "renewed_s_ago": None}, 3.0, True, None),
    # a spare worker whose loop stopped: unhealthy after failover, whatever failover is
    (96.5, {"held": 0, "renewed_s_ago": None}, 3.0, False, "has not reported for 3.5 s"),
    (89.0, {"held": 0, "renewed_s_ago": None}, 10.0, False, "has not reported for 11.0 s"),
])
def test_health(received_at, state, failover_s, ok, reason):
    healthy, body = health(100.0, received_at, state, failover_s)
    assert healthy is ok, body
    assert body["status"] == ("ok" if ok else "starting" if received_at is None else "unhealthy")
    if reason:
        assert reason in body["reason"], body


def _scrape(exporter: Exporter) -> dict:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(exporter)
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


class _Config:
    worker_id, application_name, stream_name, stream_kind = "w-1", "app", "stream", StreamKind.DYNAMODB


def test_exporter_sums_counters_shows_gauges_and_forgets_leases_no_longer_held():
    exporter = Exporter(_Config())  # type: ignore[arg-type]
    recorder = Recorder()
    recorder.add("records", 5, "s-1")
    recorder.add("records", 7, "s-2")
    recorder.add("checkpoint_time", 0.25, "s-1")
    recorder.add("lease_renewals", 1)
    recorder.add("lease_renewals", 0)
    exporter.apply(recorder.drain(), {"leases_held": {"": 2}, "worker_leases": {"w-1": 2, "w-2": 1}}, {},
                   ["s-1", "s-2"], 1.0)
    recorder.add("records", 3, "s-1")
    exporter.apply(recorder.drain(), {"leases_held": {"": 1}}, {}, ["s-1"], 2.0)
    shown = _scrape(exporter)
    assert shown[("kclmp_lease_records_total", (("shard", "s-1"),))] == 8
    assert ("kclmp_lease_records_total", (("shard", "s-2"),)) not in shown, "s-2 is no longer held"
    assert shown[("kclmp_lease_checkpoint_seconds_count", (("shard", "s-1"),))] == 1
    assert shown[("kclmp_lease_checkpoint_seconds_sum", (("shard", "s-1"),))] == 0.25
    assert shown[("kclmp_lease_renewals_total", ())] == 2 and shown[("kclmp_lease_renewals_failed_total", ())] == 1
    assert shown[("kclmp_leases_held", ())] == 1
    assert ("kclmp_worker_leases", (("worker", "w-1"),)) not in shown, "gauges are the latest view only"
    assert shown[("kclmp_info", (("application", "app"), ("stream", "stream"), ("stream_kind", "dynamodb"),
                                 ("worker", "w-1")))] == 1


def test_fleet_view_counts_open_unclaimed_and_per_worker():
    settings = LeaseSettings(table_name="t", failover_time_ms=10000)
    leases = {
        "a": Lease("a", owner="w-1", counter=1), "b": Lease("b", owner="w-2", counter=1),
        "c": Lease("c", owner=None), "d": Lease("d", owner="w-1", counter=1),
    }
    view = figures("me", leases, {}, 0.0, settings)
    assert (view.total_leases, view.open_leases, view.unclaimed) == (4, 4, 1)
    assert view.worker_leases == {"me": 0, "w-1": 2, "w-2": 1}


def test_data_bytes_from_base64_length():
    assert data_bytes([("YWJj", "k", "1", 0, 0), ("YWJjZGVm", "k", "2", 0, 0)]) == 9
    assert data_bytes([]) == 0


def test_log_lines_never_show_the_credentials_in_the_environment(capsys):
    secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    assert logs.secrets_of({"AWS_SECRET_ACCESS_KEY": secret, "AWS_ACCESS_KEY_ID": "x"}) == (secret,)
    import os

    before = os.environ.get("AWS_SECRET_ACCESS_KEY")
    os.environ["AWS_SECRET_ACCESS_KEY"] = secret
    try:
        for fmt in ("text", "json"):
            logs.setup("INFO", fmt, "w-1")
            logging.getLogger("kcl_mp.test").error("processor stderr: AWS_SECRET_ACCESS_KEY=%s", secret)
            err = capsys.readouterr().err
            assert secret not in err and "AWS_SECRET_ACCESS_KEY=[redacted]" in err
    finally:
        if before is None:
            del os.environ["AWS_SECRET_ACCESS_KEY"]
        else:
            os.environ["AWS_SECRET_ACCESS_KEY"] = before
        logs.setup("WARNING", "text")

"""kcl-mp as a service is watched: a processor's stderr flood in the log and the metrics, and
every metric the Grafana dashboard (deploy/grafana/kcl-mp.json) queries on /metrics.

Real kcl-mp hosts (the CLI, as a subprocess) on the moto server, the recorder processor
(amazon_kclpy), /metrics scraped over HTTP as Prometheus would.
"""

from __future__ import annotations

import json
import re
import sys

import boto3
import pytest

from kcl_mp.devtools.producer import produce
from kcl_mp.embedded import ensure_stream, free_port

from ..support.harness import RECORDER, ROOT, BackgroundProducer, Daemon, base_properties, wait_until, write_properties
from .test_operations import per_shard, scrape

pytestmark = pytest.mark.integration

DASHBOARD = ROOT / "deploy" / "grafana" / "kcl-mp.json"
SHARD0 = "shardId-000000000000"
SHARD1 = "shardId-000000000001"
BUDGET = 500
FLOOD_LINES, FLOOD_CHARS, LONG_LINE = 5000, 3000, 100_000
CUT = LONG_LINE - 64 * 1024


def _scrape_or_empty(port: int) -> dict:
    try:
        return scrape(port)
    except OSError:
        return {}


def test_a_stderr_flood_is_logged_whole_within_the_budget_and_reported_while_it_runs(
        moto_url, kinesis, unique_name, tmp_path):
    stream = unique_name
    ensure_stream(kinesis, stream, 1)
    out = tmp_path / "out"
    out.mkdir()
    port = free_port()
    props = write_properties(tmp_path / "app.properties", **base_properties(
        moto_url, stream, unique_name, f"{sys.executable} {RECORDER}",
        **{"kclmp.processorStderrLinesPer10s": BUDGET}))
    daemon = Daemon(props, tmp_path / "kcl-mp.log", "--metrics-port", str(port), "--metrics-address", "127.0.0.1",
                    env={"RECORDER_DIR": str(out), "RECORDER_STDERR_FLOOD": f"{SHARD0}:{FLOOD_LINES}:{FLOOD_CHARS}"})
    try:
        wait_until(lambda: "wrote more to stderr than" in daemon.output(), 60,
                   "the warning for the first window's dropped stderr lines")
        assert daemon.process.poll() is None, daemon.output()[-3000:]
        warned = [line for line in daemon.output().splitlines() if "wrote more to stderr than" in line]
        dropped = sum(int(line.split("allows: ")[1].split()[0]) for line in warned)
        # the counter, on /metrics while the processor still runs
        wait_until(lambda: per_shard(_scrape_or_empty(port), "kclmp_lease_processor_stderr_dropped_lines_total")
                   .get(SHARD0) == dropped, 20, f"{dropped} dropped stderr lines counted on /metrics")
        assert daemon.process.poll() is None
        log = daemon.output()
        stderr_lines = [line.split("processor stderr: ", 1)[1] for line in log.splitlines()
                        if "processor stderr: " in line]
        floods = [text for text in stderr_lines if text.startswith("flood ")]
        assert all(len(text) == FLOOD_CHARS for text in floods), "a 3,000-character line must be logged whole"
        longs = [text for text in stderr_lines if text.startswith("long ")]
        assert longs == ["long " + "y" * (64 * 1024 - 5) + f" ... [cut: {CUT:,} more bytes]"]
        windows = len([line for line in log.splitlines() if "wrote more to stderr than" in line])
        assert windows >= 1 and len(stderr_lines) <= BUDGET * windows, (len(stderr_lines), windows)
        assert len(stderr_lines) >= BUDGET
        total = sum(int(line.split("allows: ")[1].split()[0])
                    for line in log.splitlines() if "wrote more to stderr than" in line)
        assert len(stderr_lines) + total == FLOOD_LINES + 1, "every line logged or counted"
        print(f"stderr flood: {len(stderr_lines)} lines logged, {total} dropped in {windows} window(s), "
              f"reported while the processor ran")
        daemon.stop_gracefully()
    finally:
        daemon.kill()


def dashboard_metrics() -> set[str]:
    """The metric names in every query of the dashboard."""
    exprs = [target["expr"] for panel in json.loads(DASHBOARD.read_text())["panels"]
             for target in panel.get("targets", ())]
    assert exprs, "the dashboard has no queries"
    return {name for expr in exprs for name in re.findall(r"\bkclmp_[a-z0-9_]+", expr)}


def test_every_metric_the_dashboard_queries_is_on_metrics(moto_url, kinesis, unique_name, tmp_path):
    stream = unique_name
    ensure_stream(kinesis, stream, 2)
    out = tmp_path / "out"
    out.mkdir()
    port = free_port()
    wanted = dashboard_metrics()
    assert {"kclmp_worker_leases", "kclmp_unclaimed_leases", "kclmp_lease_records_total", "kclmp_lease_bytes_total",
            "kclmp_lease_millis_behind_latest", "kclmp_lease_checkpoint_age_seconds",
            "kclmp_lease_processor_cpu_percent", "kclmp_lease_processor_rss_bytes",
            "kclmp_lease_processor_restarts_total", "kclmp_loop_lag_seconds", "kclmp_lease_renewals_total"} <= wanted
    props = write_properties(tmp_path / "app.properties", **base_properties(
        moto_url, stream, unique_name, f"{sys.executable} {RECORDER}", workerId="host-a"))
    producer_client = boto3.client("kinesis", endpoint_url=moto_url, region_name="us-east-1")
    producer = BackgroundProducer(lambda n: produce(producer_client, stream, 20, first_id=n * 20, seed=n), 0.2)
    producer.start()
    # shard 1's first processor exits after its first records: one restart to count
    daemon = Daemon(props, tmp_path / "kcl-mp.log", "--metrics-port", str(port), "--metrics-address", "127.0.0.1",
                    env={"RECORDER_DIR": str(out), "RECORDER_FAULT": f"{SHARD1}:exit:1"})
    try:
        missing = set(wanted)

        def all_present() -> bool:
            missing.clear()
            missing.update(wanted - {name for name, _ in _scrape_or_empty(port)})
            return not missing

        try:
            wait_until(all_present, 120, "every metric of the dashboard on /metrics")
        except AssertionError:
            raise AssertionError(f"not on /metrics: {sorted(missing)}\n{daemon.output()[-2000:]}") from None
        samples = scrape(port)
        assert set(per_shard(samples, "kclmp_lease_checkpoint_age_seconds")) == {SHARD0, SHARD1}
        assert per_shard(samples, "kclmp_lease_processor_restarts_total")[SHARD1] >= 1
        print(f"dashboard: all {len(wanted)} metrics its queries use are on /metrics")
        producer.finish()
        daemon.stop_gracefully()
    finally:
        producer.stop.set()
        daemon.kill()

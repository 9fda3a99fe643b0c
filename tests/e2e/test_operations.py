"""Operations' acceptance: metrics, health and logs of real kcl-mp hosts on a moto server.

Two hosts share a 4-shard stream, each with its Prometheus endpoint, JSON logs and
CloudWatch (moto's) as the metrics target; a producer runs throughout; one host is
SIGKILLed. The survivor's endpoint, scraped the whole time, must show the fleet change
(its own leases 2 -> 4, the dead worker's leases unclaimed, then gone) and its per-lease
counters grow; moto's CloudWatch must hold the Java names with their dimensions; every
log line must be JSON; no credential and no record payload may appear in any log, though
a processor printed the secret key to its stderr.
"""

from __future__ import annotations

import json
import signal
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone

import boto3
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kcl_mp.devtools.producer import produce
from kcl_mp.embedded import ensure_stream, free_port

from ..support.harness import RECORDER, BackgroundProducer, Daemon, base_properties, wait_until, write_properties

pytestmark = [pytest.mark.integration, pytest.mark.timing]

SHARDS = 4
FAILOVER_MS = 3000
ACCESS_KEY = "AKIAKCLMPOPSTEST0042"
SECRET_KEY = "kclmp/Ops+Test/Secret/Value/0123456789abcdef"  # moto takes any credentials
CREDENTIALS = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
PAYLOAD_MARKS = ('"id": ', '\\"id\\": ', "eyJpZCI6")  # the producer's {"id": n}, as text, JSON and base64


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics: (name, sorted labels) -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: dict, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def per_shard(samples: dict, name: str) -> dict[str, float]:
    return {dict(labels)["shard"]: v for (n, labels), v in samples.items() if n == name}


def healthz(port: int) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_metrics_health_and_logs_while_a_host_dies(moto_url, kinesis, unique_name, tmp_path):
    stream = unique_name
    ensure_stream(kinesis, stream, SHARDS)
    out = tmp_path / "out"
    out.mkdir()
    ports = {"a": free_port(), "b": free_port()}
    daemons: dict[str, Daemon] = {}
    producer_client = boto3.client("kinesis", endpoint_url=moto_url, region_name="us-east-1")
    producer = BackgroundProducer(lambda n: produce(producer_client, stream, 40, first_id=n * 40, seed=n), 0.1)
    producer.start()
    try:
        for name in ("a", "b"):
            props = write_properties(tmp_path / f"{name}.properties", **base_properties(
                moto_url, stream, unique_name, f"{sys.executable} {RECORDER}",
                workerId=f"host-{name}", failoverTimeMillis=FAILOVER_MS, metricsLevel="DETAILED",
                metricsBufferTimeMillis=1000, **{"cloudWatchClient.endpointOverride": moto_url}))
            daemons[name] = Daemon(props, tmp_path / f"{name}.log", "--log-format", "json",
                                   "--metrics-port", str(ports[name]), "--metrics-address", "127.0.0.1",
                                   env={"RECORDER_DIR": str(out), "RECORDER_STDERR_ENV": "AWS_SECRET_ACCESS_KEY",
                                        **CREDENTIALS})
        a = ports["a"]

        def balanced() -> bool:
            try:
                s = scrape(a)
            except OSError:
                return False
            return (value(s, "kclmp_worker_leases", worker="host-a") == 2
                    and value(s, "kclmp_worker_leases", worker="host-b") == 2 and value(s, "kclmp_leases_held") == 2)

        wait_until(balanced, 60, "both hosts holding 2 leases each, as host-a's /metrics shows")
        first = scrape(a)
        assert value(first, "kclmp_total_leases") == SHARDS and value(first, "kclmp_total_shards") == SHARDS
        assert value(first, "kclmp_workers") == 2 and value(first, "kclmp_unclaimed_leases") == 0
        assert value(first, "kclmp_info", worker="host-a", application=unique_name, stream=stream,
                     stream_kind="kinesis") == 1
        mine = set(per_shard(first, "kclmp_lease_records_total"))
        assert len(mine) == 2, first
        time.sleep(2.5)
        second = scrape(a)
        grown = {shard for shard in mine
                 if per_shard(second, "kclmp_lease_records_total")[shard] > per_shard(first, "kclmp_lease_records_total")[shard]}
        assert grown == mine, "records counted per lease must grow while records flow"
        assert all(per_shard(second, "kclmp_lease_bytes_total")[s] > 0 for s in mine)
        assert set(per_shard(second, "kclmp_lease_millis_behind_latest")) == mine
        assert set(per_shard(second, "kclmp_lease_processor_rss_bytes")) == mine
        assert all(v > 10e6 for v in per_shard(second, "kclmp_lease_processor_rss_bytes").values())
        assert all(per_shard(second, "kclmp_lease_checkpoint_seconds_count")[s] > 0 for s in mine)
        assert value(second, "kclmp_lease_renewals_total") > 0 and value(second, "kclmp_lease_renewals_failed_total") == 0
        assert value(second, "kclmp_loop_lag_seconds") is not None
        status, report = healthz(a)
        assert status == 200 and report["status"] == "ok" and report["held"] == 2, report

        # host-b dies: no release, its leases expire and host-a takes them
        killed_at = time.monotonic()
        daemons["b"].kill()
        b_shown_until = killed_at
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            s = scrape(a)
            if value(s, "kclmp_worker_leases", worker="host-b") == 2:
                b_shown_until = time.monotonic()
            if (value(s, "kclmp_worker_leases", worker="host-a") == SHARDS
                    and value(s, "kclmp_worker_leases", worker="host-b") is None):
                break
            time.sleep(0.2)
        took_s = time.monotonic() - killed_at
        after = scrape(a)
        assert value(after, "kclmp_leases_held") == SHARDS, f"host-a holds {value(after, 'kclmp_leases_held')}"
        assert value(after, "kclmp_worker_leases", worker="host-a") == SHARDS
        assert value(after, "kclmp_worker_leases", worker="host-b") is None
        assert value(after, "kclmp_workers") == 1
        assert value(after, "kclmp_unclaimed_leases") == 0
        # the dead worker stays in the view until its leases expire: failoverTimeMillis after host-a saw
        # the last renewal, which came at most a renewal interval (failover/3) before the kill; less
        # host-a's scrape cadence (0.2 s) and a scrape's time (CI saw 2.10 s against 3 s * 0.8)
        shown_at_least = FAILOVER_MS / 1000 * 2 / 3 - 0.3
        assert b_shown_until - killed_at > shown_at_least, b_shown_until - killed_at
        assert value(after, "kclmp_leases_taken_total") >= SHARDS
        wait_until(lambda: len(per_shard(scrape(a), "kclmp_lease_records_total")) == SHARDS, 20,
                   "per-lease metrics for all 4 shards on host-a")
        status, report = healthz(a)
        assert status == 200 and report["held"] == SHARDS, report
        print(f"host-b killed: shown until {b_shown_until - killed_at:.1f} s, host-a held all {SHARDS} leases "
              f"after {took_s:.1f} s")
        producer.finish()
        daemons["a"].stop_gracefully()
    finally:
        producer.stop.set()
        for daemon in daemons.values():
            daemon.kill()

    # CloudWatch (moto) got PutMetricData: Java's names, dimensions and levels
    cloudwatch = boto3.client("cloudwatch", endpoint_url=moto_url, region_name="us-east-1")
    metrics = cloudwatch.list_metrics(Namespace=unique_name)["Metrics"]
    names = {(m["MetricName"], tuple(sorted(d["Name"] for d in m["Dimensions"]))) for m in metrics}
    per_lease = ("Operation", "ShardId", "WorkerIdentifier")
    per_worker = ("Operation", "WorkerIdentifier")
    for expected in [("RecordsProcessed", per_lease), ("DataBytesProcessed", per_lease),
                     ("MillisBehindLatest", per_lease), ("RecordProcessor.processRecords.Time", per_lease),
                     ("CurrentLeases", per_worker), ("LostLeases", per_worker), ("TakenLeases", per_worker),
                     ("TotalLeases", per_worker), ("ExpiredLeases", per_worker), ("WorkerLeases", per_worker),
                     ("RenewLease.Success", per_worker), ("LoopLag", per_worker), ("CpuPercent", per_lease)]:
        assert expected in names, f"{expected} not in {sorted(names)}"
    shard = sorted(mine)[0]
    stats = cloudwatch.get_metric_statistics(
        Namespace=unique_name, MetricName="RecordsProcessed",
        Dimensions=[{"Name": "Operation", "Value": "ProcessTask"}, {"Name": "ShardId", "Value": shard},
                    {"Name": "WorkerIdentifier", "Value": "host-a"}],
        StartTime=datetime.now(timezone.utc) - timedelta(minutes=10), EndTime=datetime.now(timezone.utc) + timedelta(minutes=1),
        Period=60, Statistics=["Sum", "SampleCount"])["Datapoints"]
    assert sum(p["Sum"] for p in stats) >= per_shard(second, "kclmp_lease_records_total")[shard]

    # logs: every line JSON; no credentials, no payloads (the processor printed the secret)
    for name in ("a", "b"):
        text = (tmp_path / f"{name}.log").read_text()
        lines = [line for line in text.splitlines() if line.strip()]
        assert len(lines) > 10
        for line in lines:
            entry = json.loads(line)  # raises on any line that is not JSON
            assert {"ts", "level", "worker", "shard", "msg"} <= set(entry)
        assert SECRET_KEY not in text and ACCESS_KEY not in text, f"credentials in {name}.log"
        assert "[redacted]" in text, "the processor's stderr line with the secret was not logged scrubbed"
        for mark in PAYLOAD_MARKS:
            assert mark not in text, f"record payload ({mark!r}) in {name}.log"
    lifecycle = (tmp_path / "a.log").read_text()
    for event in ("took lease", "started shard worker", "processor started", "released lease",
                  "processor exited with status"):
        assert event in lifecycle, event


def test_summary_level_and_enabled_dimensions_reach_cloudwatch(moto_url, kinesis, unique_name, tmp_path):
    """metricsLevel SUMMARY keeps DETAILED metrics out; metricsEnabledDimensions without
    WorkerIdentifier drops it (Operation stays); /metrics is off, so no port is opened."""
    stream = unique_name
    ensure_stream(kinesis, stream, 1)
    produce(kinesis, stream, 200)
    out = tmp_path / "out"
    out.mkdir()
    props = write_properties(tmp_path / "app.properties", **base_properties(
        moto_url, stream, unique_name, f"{sys.executable} {RECORDER}", metricsLevel="SUMMARY",
        metricsBufferTimeMillis=500, metricsEnabledDimensions="Operation,ShardId",
        **{"cloudWatchClient.endpointOverride": moto_url}))
    daemon = Daemon(props, tmp_path / "app.log", env={"RECORDER_DIR": str(out)})
    try:
        wait_until(lambda: "checkpoint" in "".join(p.read_text() for p in out.glob("*.jsonl")), 30,
                   "a checkpoint")
        time.sleep(3.0)  # a renewal round (every failoverTimeMillis / 3) at least
        daemon.signal(signal.SIGTERM)
        assert daemon.wait(60) == 0, daemon.output()[-2000:]
    finally:
        daemon.kill()
    cloudwatch = boto3.client("cloudwatch", endpoint_url=moto_url, region_name="us-east-1")
    metrics = cloudwatch.list_metrics(Namespace=unique_name)["Metrics"]
    names = {m["MetricName"] for m in metrics}
    assert {"RecordsProcessed", "DataBytesProcessed", "CurrentLeases", "TotalLeases"} <= names, names
    assert not names & {"RenewLease.Success", "LoopLag", "CpuPercent", "RssBytes"}, names
    for metric in metrics:
        dims = {d["Name"] for d in metric["Dimensions"]}
        assert "Operation" in dims and "WorkerIdentifier" not in dims, metric
    assert "Prometheus" not in daemon.output()


@pytest.mark.parametrize("failover_ms", [3000, 10000])
def test_healthz_follows_the_supervisor_loop(moto_url, kinesis, unique_name, tmp_path, failover_ms):
    """/healthz stays 200 while the host renews; a supervisor that stops running (SIGSTOP) turns
    it to 503 within failoverTimeMillis + 1 s (when another host may take its lease), though the
    metrics process still answers; running again, it renews late (one log line says so) and
    /healthz is 200 again."""
    failover_s = failover_ms / 1000.0
    renew_s = failover_s / 3
    stream = unique_name
    ensure_stream(kinesis, stream, 1)
    out = tmp_path / "out"
    out.mkdir()
    port = free_port()
    props = write_properties(tmp_path / "app.properties", **base_properties(
        moto_url, stream, unique_name, f"{sys.executable} {RECORDER}", failoverTimeMillis=failover_ms))
    daemon = Daemon(props, tmp_path / "app.log", "--metrics-port", str(port), "--metrics-address", "127.0.0.1",
                    env={"RECORDER_DIR": str(out)})
    try:
        wait_until(lambda: _status(port) == 200 and healthz(port)[1].get("held") == 1, 30, "/healthz 200 with the lease")
        watched = [_status(port) for _ in _every(0.1, 2 * renew_s + 1)]  # two renewal rounds and more
        assert set(watched) == {200}, watched
        stopped_at = time.monotonic()
        daemon.signal(signal.SIGSTOP)  # the supervisor only: its metrics process goes on answering
        wait_until(lambda: _status(port) == 503, failover_s + 10, "/healthz 503 while the supervisor is stopped",
                   interval=0.05)
        unhealthy_after = time.monotonic() - stopped_at
        status, body = healthz(port)
        assert status == 503 and "past failoverTimeMillis" in body["reason"], body
        daemon.signal(signal.SIGCONT)
        wait_until(lambda: _status(port) == 200, 10, "/healthz 200 again", interval=0.1)
        wait_until(lambda: "renewed late" in daemon.output(), 10, "the late renewal logged")
        print(f"failover {failover_s:.0f} s: /healthz 503 after {unhealthy_after:.2f} s stopped "
              f"(limit {failover_s + 1:.0f} s; {len(watched)} probes 200 while running)")
        assert unhealthy_after < failover_s + 1, unhealthy_after
        daemon.stop_gracefully()
    finally:
        daemon.signal(signal.SIGCONT)
        daemon.kill()


def _every(interval_s: float, for_s: float):
    """Yield every ``interval_s`` for ``for_s`` seconds."""
    deadline = time.monotonic() + for_s
    while time.monotonic() < deadline:
        yield
        time.sleep(interval_s)


def _status(port: int) -> int | None:
    try:
        return healthz(port)[0]
    except OSError:
        return None

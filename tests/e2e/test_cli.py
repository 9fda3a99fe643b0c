"""Bad input at the command line: each gives a clear message and nothing else runs."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from kcl_mp.embedded import ensure_stream
from kcl_mp.leases.lease import Lease
from kcl_mp.leases.table import LeaseTable
from kcl_mp.sequence import ExtendedSequenceNumber

from ..support.harness import (
    RECORDER,
    ROOT,
    Daemon,
    base_properties,
    wait_until,
    write_properties,
)

pytestmark = pytest.mark.integration


def kcl_mp(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kcl_mp", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def tables(dynamodb) -> set[str]:
    return set(dynamodb.list_tables()["TableNames"])


def test_missing_file(tmp_path):
    missing = tmp_path / "nope.properties"
    run = kcl_mp("--properties", str(missing))
    assert run.returncode == 1
    assert str(missing) in run.stderr and "not found" in run.stderr.lower(), run.stderr


def test_no_file_given():
    run = kcl_mp()
    assert run.returncode == 2 and "--properties" in run.stderr


@pytest.mark.parametrize("drop", ["executableName", "applicationName"])
def test_missing_required_key(tmp_path, moto_url, dynamodb, unique_name, drop, java_rows):
    java_rows(unique_name)  # the lease table the application would use
    keys = base_properties(moto_url, unique_name, unique_name, f"{sys.executable} {RECORDER}")
    del keys[drop]
    props = write_properties(tmp_path / "app.properties", **keys)
    before = tables(dynamodb)
    run = kcl_mp("--properties", str(props))
    assert run.returncode == 1, run.stderr
    assert drop in run.stderr and str(props) in run.stderr, run.stderr
    assert tables(dynamodb) == before


def test_unparsable_number(tmp_path, moto_url, dynamodb, unique_name, java_rows):
    java_rows(unique_name)
    keys = base_properties(moto_url, unique_name, unique_name, f"{sys.executable} {RECORDER}", maxRecords="12x")
    props = write_properties(tmp_path / "app.properties", **keys)
    line = next(i for i, text in enumerate(props.read_text().splitlines(), 1) if text.startswith("maxRecords"))
    before = tables(dynamodb)
    run = kcl_mp("--properties", str(props))
    assert run.returncode == 1, run.stderr
    assert "maxRecords" in run.stderr and "12x" in run.stderr and f"line {line}" in run.stderr, run.stderr
    assert tables(dynamodb) == before


def test_nonexistent_executable(tmp_path, moto_url, dynamodb, unique_name, java_rows):
    java_rows(unique_name)
    keys = base_properties(moto_url, unique_name, unique_name, "./no-such-processor.py --flag")
    props = write_properties(tmp_path / "app.properties", **keys)
    before = tables(dynamodb)
    run = kcl_mp("--properties", str(props))
    assert run.returncode == 1, run.stderr
    assert "no-such-processor.py" in run.stderr and "executableName" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr
    assert tables(dynamodb) == before  # refused before any lease table or lease was touched


def test_fanout_with_an_unknown_consumer_arn_stops_naming_it(tmp_path, kinesis, moto_url, unique_name, java_rows):
    java_rows(unique_name)
    ensure_stream(kinesis, unique_name, 1)
    arn = f"arn:aws:kinesis:us-east-1:123456789012:stream/{unique_name}/consumer/nope:1"
    keys = base_properties(moto_url, unique_name, unique_name, f"{sys.executable} {RECORDER}",
                           retrievalMode="FANOUT", **{"fanoutConfig.consumerArn": arn})
    run = kcl_mp("--properties", str(write_properties(tmp_path / "app.properties", **keys)))
    assert run.returncode == 1 and f"consumerArn {arn}: no such stream consumer" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr


def test_unknown_key_warns_and_runs(tmp_path, kinesis, moto_url, unique_name, java_rows):
    stream = unique_name
    java_rows(stream + "-app")
    ensure_stream(kinesis, stream, 1)
    out = tmp_path / "out"
    out.mkdir()
    keys = base_properties(moto_url, stream, stream + "-app", f"{sys.executable} {RECORDER}", maxRecrods=50)
    props = write_properties(tmp_path / "app.properties", **keys)
    daemon = Daemon(props, tmp_path / "run.log", env={"RECORDER_DIR": str(out)})
    try:
        wait_until(lambda: "processor started" in daemon.output(), 60, "a processor to start")
        daemon.signal(signal.SIGTERM)
        assert daemon.wait(60) == 0, daemon.output()[-3000:]
    finally:
        daemon.kill()
    text = daemon.output()
    warning = next(line for line in text.splitlines() if "maxRecrods" in line)
    assert str(props) in warning and "maxRecords" in warning and "WARNING" in warning, warning


def test_leases_report_reads_the_table(tmp_path, moto_url, dynamodb, unique_name, java_rows):
    app = unique_name + "-app"
    table = LeaseTable(dynamodb, app)
    table.ensure_table()
    for i, owner in enumerate(["host-a", "host-a", "host-b", None]):
        table.create_if_absent(Lease(f"shardId-{i:012d}", owner, 3, ExtendedSequenceNumber("TRIM_HORIZON")))
    java_rows(app)  # a Java KCL 3.5 fleet's rows beside the leases
    props = write_properties(tmp_path / "app.properties", **base_properties(moto_url, unique_name, app, "true"))
    run = kcl_mp("leases", "--properties", str(props), "--json", "--wait", "0")
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["workers"] == {"host-a": 2, "host-b": 1} and report["spread"] == 1 and report["unowned"] == 1
    assert [row["key"] for row in report["leases"]] == [f"shardId-{i:012d}" for i in range(4)]
    assert {row["key"]: row["entity_type"] for row in report["others"]} == {
        "Leader": "LEADER", "Migration3.0": "CLIENT_VERSION_MIGRATION", "TableMigration3.5": "TABLE_MIGRATION",
        "java-worker-1": "WORKER_METRIC_STATS", "java-worker-2": "WORKER_METRIC_STATS"}
    text = kcl_mp("leases", "--properties", str(props), "--wait", "0")
    assert "4 leases (4 active, 0 finished) on 2 workers; spread 1" in text.stdout, text.stdout + text.stderr
    leases, others = text.stdout.split("5 rows that are not leases (left alone):\n")
    assert "Leader" not in leases and "leader lock held by java-worker-1" in others
    assert "client version CLIENT_VERSION_2X" in others and "worker metrics of java-worker-1" in others
    missing = kcl_mp("leases", "--properties", str(props), "--wait", "0", "--set", "x=y")
    assert missing.returncode == 2


def test_leases_watch_redraws_and_marks_what_moved(tmp_path, moto_url, dynamodb, unique_name, java_rows):
    app = unique_name + "-app"
    table = LeaseTable(dynamodb, app)
    table.ensure_table()
    java_rows(app)
    for i, owner in enumerate(["host-a", "host-b"]):
        table.create_if_absent(Lease(f"shardId-{i:012d}", owner, 1, ExtendedSequenceNumber("TRIM_HORIZON")))
    props = write_properties(tmp_path / "app.properties",
                             **base_properties(moto_url, unique_name, app, "true", failoverTimeMillis=1000))
    watcher = subprocess.Popen([sys.executable, "-m", "kcl_mp", "leases", "--properties", str(props), "--watch",
                                "0.5", "--count", "6", "--json"], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        first = json.loads(watcher.stdout.readline())
        assert first["workers"] == {"host-a": 1, "host-b": 1} and first["changes"] == {}
        lease = table.get("shardId-000000000000")
        assert table.take(lease, "host-b") is not None  # host-b takes host-a's lease
        views = [first] + [json.loads(line) for line in watcher.stdout]
        assert watcher.wait(30) == 0, watcher.stderr.read()
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait(10)
        watcher.stdout.close()  # an unclosed pipe is a ResourceWarning, an error in this suite
        watcher.stderr.close()
    assert len(views) == 6
    moved = [view["changes"] for view in views if view["changes"]]
    assert {"shardId-000000000000": "owner was host-a"} in moved, moved
    assert views[-1]["workers"] == {} and views[-1]["expired"] == 2, "no counter moved for failoverTimeMillis"
    text = kcl_mp("leases", "--properties", str(props), "--watch", "0.2", "--count", "2")
    assert text.returncode == 0 and text.stdout.count("every 0.2 s, Ctrl-C to stop") == 2, text.stdout + text.stderr

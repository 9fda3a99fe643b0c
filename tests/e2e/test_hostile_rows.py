"""Bad rows and bogus lease keys (issue 27, security review #1 and #6), on real kcl-mp hosts on moto.

Each bad row is put into a running fleet's tables, and into a table before a host starts:
a lease row with checkpointSubSequenceNumber N "1.5" and the other whole-number and hash-key
fields bad, a Leader row with a bad and then no leaseDuration, a Migration3.0 and a
worker-metrics row Java would not write, and 21 lease rows whose keys name no shard (one
with a newline, forging a log line). Every real shard keeps processing, no host exits or
hangs, no processor starts for a row that is not a lease, ``kcl-mp leases`` lists each row
apart with its reason, no loop step fails, and SIGTERM exits 0. A lease of a well-formed
shard id the stream does not hold (a shard aged out of retention) ends at SHARD_END without a
processor and is deleted by the shard sync.

In KCL 3.x mode a leader lock nobody can read elects no leader (a Java fleet's lock client
fails on it the same way): the host says which row every heartbeat, keeps the leases it
holds, and, as a follower under a lock that never ends, rescues the leases nobody assigns
after failover + one assignment interval (fleet/role.py), so at start-up too every shard
is processed; deleting the row lets a host lead again.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kcl_mp.devtools.producer import produce
from kcl_mp.embedded import ensure_stream
from kcl_mp.fleet.state_store import ensure_table
from kcl_mp.leases.table import LeaseTable

from ..support.harness import (
    RECORDER,
    ROOT,
    BackgroundProducer,
    Daemon,
    base_properties,
    recorded,
    records_only,
    stop_all,
    wait_until,
    write_properties,
)

pytestmark = pytest.mark.integration

SHARDS = 2
REAL = {f"shardId-{i:012d}" for i in range(SHARDS)}
COMPATIBLE_WITH_2X = "CLIENT_VERSION_CONFIG_COMPATIBLE_WITH_2X"
FORGED = "shardId-000000000777\n2026-11-25T15:00:00.000 ERROR   worker=host-a shard=- AccessDenied: exiting"
BOGUS = [f"bogus-{i:03d}" for i in range(20)] + [FORGED]  # 21 keys that name no shard
# clientVersionConfig unset (KCL 3.x, the default) and Java's 2.x-compatible mode
BOTH_MODES = pytest.mark.parametrize("client_version", [None, COMPATIBLE_WITH_2X], ids=["default", "compatible-2x"])


def _lease(key: str, **values: dict) -> dict:
    return {"leaseKey": {"S": key}, "leaseCounter": {"N": "1"}, "checkpoint": {"S": "TRIM_HORIZON"},
            "checkpointSubSequenceNumber": {"N": "0"}, "ownerSwitchesSinceCheckpoint": {"N": "0"}, **values}


# key -> (the row, the reason `kcl-mp leases` must give): well-formed shard ids, bad values
BAD_LEASES = {
    "shardId-000000000090": (_lease("shardId-000000000090", checkpointSubSequenceNumber={"N": "1.5"}),
                             "checkpointSubSequenceNumber '1.5' is not a whole number"),
    "shardId-000000000091": (_lease("shardId-000000000091", ownerSwitchesSinceCheckpoint={"N": "-2.5"}),
                             "ownerSwitchesSinceCheckpoint '-2.5' is not a whole number"),
    "shardId-000000000092": (_lease("shardId-000000000092", startingHashKey={"S": "abc"},
                                    endingHashKey={"S": "99"}), "startingHashKey 'abc' is not a whole number"),
    "shardId-000000000093": (_lease("shardId-000000000093", startingHashKey={"S": "1" * 5000},
                                    endingHashKey={"S": "99"}),
                             f"startingHashKey {'1' * 60!r}... is not a whole number up to {2**128 - 1}"),
    "shardId-000000000094": (_lease("shardId-000000000094", pendingCheckpoint={"S": "5"},
                                    pendingCheckpointSubSequenceNumber={"N": "0.5"}),
                             "pendingCheckpointSubSequenceNumber '0.5' is not a whole number"),
    "shardId-000000000095": (_lease("shardId-000000000095", leaseCounter={"N": "1" + "0" * 30}),
                             f"leaseCounter '1{'0' * 30}' is not a whole number up to {2**63 - 1}"),
    "shardId-000000000096": (_lease("shardId-000000000096", checkpoint={"S": "12ab"}),
                             "checkpoint '12ab' is not a sequence number"),
}


def _put_bad_leases(dynamodb, table: str) -> None:
    for item, _ in BAD_LEASES.values():
        dynamodb.put_item(TableName=table, Item=item)
    for key in BOGUS:
        dynamodb.put_item(TableName=table, Item=_lease(key))


def _put_bad_state(dynamodb, app: str) -> None:
    """A lock with a unit on its leaseDuration held by nobody alive, a client version set at
    1.5 ms, and worker metrics whose lut is a fraction and whose CPU values are strings."""
    coordinator, metrics = f"{app}-CoordinatorState", f"{app}-WorkerMetricStats"
    ensure_table(dynamodb, coordinator, "key")
    ensure_table(dynamodb, metrics, "wid")
    dynamodb.put_item(TableName=coordinator, Item={
        "key": {"S": "Leader"}, "ownerName": {"S": "nobody"}, "leaseDuration": {"S": "120000ms"},
        "recordVersionNumber": {"S": "bad-1"}})
    current = dynamodb.get_item(TableName=coordinator, Key={"key": {"S": "Migration3.0"}},
                                ConsistentRead=True).get("Item")
    dynamodb.put_item(TableName=coordinator, Item={**(current or {"key": {"S": "Migration3.0"}, "cv": {
        "S": "CLIENT_VERSION_3X"}, "mb": {"S": "someone"}}), "mts": {"N": "1.5"}})
    dynamodb.put_item(TableName=metrics, Item={
        "wid": {"S": "hostile-worker"}, "lut": {"N": "1.5"}, "sts": {"M": {"C": {"L": [{"S": "x"}]}}},
        "opr": {"N": "100"}})


def _leases_report(props: Path) -> dict:
    run = subprocess.run([sys.executable, "-m", "kcl_mp", "leases", "--properties", str(props), "--json",
                          "--wait", "0"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def _assert_rows_apart(props: Path) -> None:
    report = _leases_report(props)
    assert {row["key"] for row in report["leases"]} == REAL
    why = {row["key"]: row["why"] for row in report["others"]}
    for key, (_, reason) in BAD_LEASES.items():
        assert why[key] == reason, key
    for key in BOGUS:
        assert why[key] == f"leaseKey {key!r} is not a shard id " \
                           "(shardId- and 12 digits)", key


def _log_entries(daemon: Daemon) -> list[dict]:
    out = []
    for line in daemon.output().splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def _assert_no_failure(hosts: dict[str, Daemon]) -> None:
    """Every host alive, no processor for anything but a real shard, no loop step failed,
    no traceback anywhere, and the forged line is no line of the log."""
    for name, daemon in hosts.items():
        assert daemon.process.poll() is None, f"{name} exited:\n{daemon.output()[-3000:]}"
        entries = _log_entries(daemon)
        started = {e["shard"] for e in entries if e["msg"].startswith("processor started")}
        assert started <= REAL, (name, started - REAL)
        # a step that failed (supervisor/steps.py), not one that only took long (a slow moto)
        failed = [e["msg"] for e in entries if re.match(r"loop step \S+ failed", e["msg"]) or "exc" in e]
        assert not failed, (name, failed)
        text = daemon.output()
        assert "Traceback" not in text, f"{name}:\n{text[-3000:]}"
        assert "\n2026-11-25T15:00:00.000 ERROR" not in text, name


def _fleet(tmp_path: Path, kinesis, moto_url: str, stream: str, hosts: int, client_version: str | None,
           **keys) -> tuple[dict[str, Daemon], BackgroundProducer, Path, Path]:
    """``hosts`` kcl-mp hosts on a stream of SHARDS shards fed 40 records a second;
    ``client_version`` None: clientVersionConfig unset (KCL 3.x, the default)."""
    ensure_stream(kinesis, stream, SHARDS)
    out = tmp_path / "out"
    out.mkdir()
    properties = base_properties(moto_url, stream, stream + "-app", f"{sys.executable} {RECORDER}",
                                 failoverTimeMillis=3000, **keys)
    if client_version is None:
        del properties["clientVersionConfig"]
    else:
        properties["clientVersionConfig"] = client_version
    props = write_properties(tmp_path / "app.properties", **properties)
    producer = BackgroundProducer(lambda n: produce(kinesis, stream, 20, first_id=n * 20, aggregated_share=0.0,
                                                    keys=16, seed=n), every_s=0.5)
    producer.start()
    env = {"RECORDER_DIR": str(out), "RECORDER_CHECKPOINT_EVERY": "20"}
    daemons = {f"host-{i}": Daemon(props, tmp_path / f"host-{i}.log", "--log-format", "json", "--set",
                                   f"workerId=host-{i}", env=env) for i in range(hosts)}
    return daemons, producer, out, props


@contextmanager
def _running(hosts: dict[str, Daemon], producer: BackgroundProducer) -> Iterator[None]:
    """A test's fleet: if the test passes, every host must stop on SIGTERM with exit status 0;
    if it fails, no host is left behind (each one's whole process group is killed)."""
    try:
        yield
    except BaseException:
        for daemon in hosts.values():
            daemon.kill()
        raise
    finally:
        producer.stop.set()
    stop_all(hosts)
    producer.finish()


def _delivered(out: Path) -> set[int]:
    return {json.loads(e["data"])["id"] for e in records_only(recorded(out))}


def _keeps_processing(producer: BackgroundProducer, out: Path, what: str) -> None:
    """Records put from now on reach the processors, on every real shard."""
    mark = len(producer.puts)
    wait_until(lambda: len(producer.puts) >= mark + 40, 30, "more records put")
    fresh = {p.id for p in producer.puts[mark:mark + 40]}
    wait_until(lambda: fresh <= _delivered(out), 90, f"records put after {what} delivered")
    shards = {e["_shard"] for e in records_only(recorded(out)) if json.loads(e["data"])["id"] in fresh}
    assert shards == REAL, shards


@BOTH_MODES
def test_bad_rows_put_into_a_running_fleet(tmp_path, kinesis, dynamodb, moto_url, unique_name, client_version):
    # the lock checked every second (a quarter of its duration), so every host reads the bad one
    hosts, producer, out, props = _fleet(tmp_path, kinesis, moto_url, unique_name, 3, client_version,
                                         **{"kclmp.leaderLockLeaseDurationMillis": 4000})
    app = unique_name + "-app"
    lock = f"the leader lock (key Leader in {app}-CoordinatorState) cannot be read: "

    def every_host_said(text: str) -> bool:
        return all(any(text in e["msg"] for e in _log_entries(daemon)) for daemon in hosts.values())

    with _running(hosts, producer):
        wait_until(lambda: {e["_shard"] for e in records_only(recorded(out))} == REAL, 90, "every shard delivering")
        _put_bad_leases(dynamodb, app)
        _put_bad_state(dynamodb, app)
        _keeps_processing(producer, out, "the bad rows")
        wait_until(lambda: every_host_said("is not a MigrationState: mts '1.5' is not a whole number"), 30,
                   "every host reading the bad Migration3.0")
        if client_version is None:  # KCL 3.x: every host takes part in the election
            wait_until(lambda: every_host_said(lock + "leaseDuration '120000ms' is not a whole number"), 30,
                       "every host reading the bad lock")
        dynamodb.update_item(TableName=f"{app}-CoordinatorState", Key={"key": {"S": "Leader"}},
                             UpdateExpression="REMOVE leaseDuration")  # then a lock with no leaseDuration
        if client_version is None:
            wait_until(lambda: every_host_said(lock + "leaseDuration is missing"), 30,
                       "every host reading the lock without leaseDuration")
        else:
            time.sleep(3.0)  # a scan and a renewal round of every host with the rows in place
        _keeps_processing(producer, out, "the lock lost its leaseDuration")
        _assert_rows_apart(props)
        _assert_no_failure(hosts)
        assert not [p for p in out.glob("*.jsonl") if p.name.split(".")[0] not in REAL]


@BOTH_MODES
def test_bad_rows_at_start_up(tmp_path, kinesis, dynamodb, moto_url, unique_name, client_version):
    """The host starts on tables that already hold them: it starts in the version its
    clientVersionConfig gives (the Migration3.0 it cannot read left alone), and the start-up
    line counts the rows that are not leases and names only the first few."""
    app = unique_name + "-app"
    LeaseTable(dynamodb, app).ensure_table()
    _put_bad_leases(dynamodb, app)
    _put_bad_state(dynamodb, app)
    hosts, producer, out, props = _fleet(tmp_path, kinesis, moto_url, unique_name, 1, client_version,
                                         **{"kclmp.leaderLockLeaseDurationMillis": 4000})
    with _running(hosts, producer):
        if client_version is None:
            # KCL 3.x: a lock nobody can read elects no leader (a Java fleet's lock client fails
            # the same way); the host says which row, heartbeat after heartbeat, and as a follower
            # under a lock that never ends it rescues the leases nobody assigns (fleet/role.py)
            lock = f"the leader lock (key Leader in {app}-CoordinatorState) cannot be read: leaseDuration '120000ms'"
            wait_until(lambda: sum(lock in e["msg"] for e in _log_entries(hosts["host-0"])) >= 3, 30,
                       "the host reading the bad lock, heartbeat after heartbeat")
            _assert_no_failure(hosts)
        wait_until(lambda: {e["_shard"] for e in records_only(recorded(out))} == REAL, 90, "every shard delivering")
        if client_version is None:
            rescued = [e["msg"] for e in _log_entries(hosts["host-0"]) if "the leader lock cannot be read" in e["msg"]]
            assert len(rescued) == len(REAL), rescued
        _keeps_processing(producer, out, "the start")
        _assert_rows_apart(props)
        _assert_no_failure(hosts)
        started_as = "CLIENT_VERSION_3X" if client_version is None else "CLIENT_VERSION_UPGRADE_FROM_2X"
        assert any(f"Migration3.0 in {app}-CoordinatorState is not a MigrationState (mts '1.5' is not a whole "
                   f"number): left alone; starting as {started_as}" in e["msg"] for e in _log_entries(hosts["host-0"]))
        item = dynamodb.get_item(TableName=f"{app}-CoordinatorState", Key={"key": {"S": "Migration3.0"}})["Item"]
        assert item["mts"] == {"N": "1.5"}  # left as it was
        (line,) = [e["msg"] for e in _log_entries(hosts["host-0"]) if "that are not leases" in e["msg"]]
        assert f"also holds {len(BAD_LEASES) + len(BOGUS)} rows that are not leases: " in line
        assert line.endswith(f" and {len(BAD_LEASES) + len(BOGUS) - 5} more, left alone") and len(line) < 1500


@BOTH_MODES
def test_a_lease_of_a_shard_gone_from_the_stream_ends_and_is_deleted(tmp_path, kinesis, dynamodb, moto_url,
                                                                      unique_name, client_version):
    """A well-formed lease the stream does not hold (its shard aged out before the lease reached
    SHARD_END): GetShardIterator says ResourceNotFound, ListShards confirms, the lease is
    checkpointed at SHARD_END without a processor, and the shard sync deletes it."""
    gone = "shardId-000000000077"
    app = unique_name + "-app"
    table = LeaseTable(dynamodb, app)
    table.ensure_table()
    dynamodb.put_item(TableName=app, Item=_lease(gone, startingHashKey={"S": "0"}, endingHashKey={"S": "1"}))
    hosts, producer, out, props = _fleet(tmp_path, kinesis, moto_url, unique_name, 1, client_version,
                                         shardSyncIntervalMillis=1000)
    with _running(hosts, producer):
        wait_until(lambda: {e["_shard"] for e in records_only(recorded(out))} == REAL, 90, "every shard delivering")
        wait_until(lambda: gone not in {lease.key for lease in table.scan().leases}, 60, f"{gone} deleted")
        _keeps_processing(producer, out, f"{gone} ended")
        entries = _log_entries(hosts["host-0"])
        assert any(e["shard"] == gone and "SHARD_END without a processor" in e["msg"] for e in entries)
        assert any(f"deleted lease {gone}" in e["msg"] for e in entries)
        _assert_no_failure(hosts)
        assert not list(out.glob(f"{gone}.*.jsonl"))

"""DynamoDB Streams through the real CLI: two kcl-mp hosts on the embedded emulator, the
unchanged amazon_kclpy recorder as the processor (tests/processors/recorder.py), a table's
inserts, modifies, removes and TTL deletes across three shard rollovers and a host SIGKILL, in
both KCL modes; the start-up errors; ``kcl-mp --embedded`` with a DynamoDB stream."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import boto3
import pytest

from kcl_mp.config.values import adapter_stream_name
from kcl_mp.leases.multi_stream import split_key

from ..support.dynamodb_streams import make_table
from ..support.harness import (
    RECORDER,
    ROOT,
    Daemon,
    base_properties,
    changes_delivered,
    log_lines,
    recorded,
    wait_until,
    write_properties,
)

pytestmark = pytest.mark.integration

KEYS = [f"k{n}" for n in range(12)]


def _properties(tmp_path: Path, moto_url: str, arn: str, app: str, arn_key: str = "streamArn", **keys: object) -> Path:
    """``arn_key`` = streamName: as the 1.x StreamsMultiLangDaemon's files name the stream."""
    props = base_properties(moto_url, app, app, f"{sys.executable} {RECORDER}", failoverTimeMillis=4000, **keys)
    for key in ("streamName", "maxRecords"):
        del props[key]
    return write_properties(tmp_path / f"{app}.properties", **{arn_key: arn}, **props)


def _fails_at_start(tmp_path: Path, props: Path, expected: str) -> None:
    daemon = Daemon(props, tmp_path / "run.log")
    try:
        code = daemon.wait(60)
    finally:
        daemon.kill()
    output = daemon.output()
    assert code == 1 and expected in output and "Traceback" not in output, output[-2000:]


def test_start_up_errors_name_what_is_wrong(tmp_path, moto_url, dynamodb, unique_name):
    """A table without a stream, a disabled stream, an ARN of another kind, AT_TIMESTAMP: each
    exit status 1 and one line saying what is wrong, before any lease table is written."""
    dynamodb.create_table(TableName=unique_name, BillingMode="PAY_PER_REQUEST",
                          KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                          AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}])
    table_arn = dynamodb.describe_table(TableName=unique_name)["Table"]["TableArn"]
    no_stream = table_arn + "/stream/2026-01-01T00:00:00.000"
    _fails_at_start(tmp_path, _properties(tmp_path, moto_url, no_stream, unique_name + "-a"),
                    f"streamArn {no_stream}: no such stream at {moto_url} (does table {unique_name} have a stream?")

    disabled = make_table(dynamodb, unique_name + "-off")
    dynamodb.update_table(TableName=unique_name + "-off", StreamSpecification={"StreamEnabled": False})
    _fails_at_start(tmp_path, _properties(tmp_path, moto_url, disabled, unique_name + "-b"),
                    f"streamArn {disabled}: the stream of table {unique_name}-off is DISABLED")

    _fails_at_start(tmp_path, _properties(tmp_path, moto_url, table_arn, unique_name + "-c"),
                    "a DynamoDB table's ARN, not its stream's: use the table's LatestStreamArn")
    _fails_at_start(tmp_path, _properties(tmp_path, moto_url, "arn:aws:sqs:us-east-1:123456789012:q", unique_name + "-d"),
                    "expected arn:aws:kinesis:<region>:<12-digit account>:stream/<name> or arn:aws:dynamodb:")
    _fails_at_start(tmp_path, _properties(tmp_path, moto_url, make_table(dynamodb, unique_name + "-ts"),
                                          unique_name + "-e", initialPositionInStream="AT_TIMESTAMP",
                                          initialPositionInStreamExtended=1700000000),
                    "DynamoDB Streams have no AT_TIMESTAMP position")
    tables = dynamodb.list_tables()["TableNames"]
    assert not [t for t in tables if t.startswith(unique_name + "-") and t[-2:] in ("-a", "-b", "-c", "-d", "-e")]


@pytest.mark.parametrize("key", ["streamArn", "streamArns"])
def test_embedded_runs_a_dynamodb_stream_locally(tmp_path, key):
    """One table's stream, or two by streamArns: each table created on the embedded emulator and
    read through the stream it got there (the emulator names its streams itself)."""
    out = tmp_path / "out"
    out.mkdir()
    tables = ["orders"] if key == "streamArn" else ["orders", "payments"]
    arns = [f"arn:aws:dynamodb:us-east-1:123456789012:table/{table}/stream/2026-01-01T00:00:00.000" for table in tables]
    props = write_properties(tmp_path / "app.properties", executableName=f"{sys.executable} {RECORDER}",
                             applicationName="orders-app", metricsLevel="NONE", **{key: ",".join(arns)})
    daemon = Daemon(props, tmp_path / "run.log", "--embedded", "--embedded-shards", "2",
                    env={"RECORDER_DIR": str(out)})
    try:
        wait_until(lambda: len({e["_shard"] for e in recorded(out) if e.get("event") == "initialize"}) == 2 * len(tables),
                   60, f"a processor on each of the {2 * len(tables)} shards")
        daemon.stop_gracefully()
    finally:
        daemon.kill()
    output = daemon.output()
    for table in tables:
        assert f"created table {table} with a stream of 2 shards" in output
        assert f"reading table {table}'s stream on the emulator: arn:aws:dynamodb:us-east-1:123456789012:table/{table}/" in output


def _write(dynamodb, table: str, rounds: list[int]) -> list[tuple[str, str]]:
    """Every key written once a round: inserted (round 0), then modified; what its stream must show."""
    expected: list[tuple[str, str]] = []
    for round_ in rounds:
        for key in KEYS:
            dynamodb.put_item(TableName=table, Item={"pk": {"S": key}, "v": {"N": str(round_)}})
            expected.append((key, "INSERT" if round_ == 0 else f"MODIFY {round_}"))
    return expected


def _lease_keys(dynamodb, app: str) -> list[str]:
    return [item["leaseKey"]["S"] for item in dynamodb.scan(TableName=app, ConsistentRead=True)["Items"]]


def _leases(dynamodb, app: str) -> set[str]:
    """The keys of the application's leases (not the KCL 3.x rows beside them)."""
    return {item["leaseKey"]["S"] for item in dynamodb.scan(TableName=app, ConsistentRead=True)["Items"]
            if "leaseCounter" in item and item.get("entityType", {"S": "LEASE"}) == {"S": "LEASE"}}


def _told(hosts: dict) -> dict[str, str]:
    """Lease key -> the KCL_STREAM_IDENTIFIER its processor was started with (it prints it)."""
    return {entry["shard"]: entry["msg"].rpartition("=")[2] for daemon in hosts.values()
            for _, entry in log_lines(daemon.output()) if entry["msg"].startswith("processor stderr: KCL_STREAM_IDENTIFIER=")}


def _owners(dynamodb, app: str) -> set[str]:
    try:
        items = dynamodb.scan(TableName=app, ConsistentRead=True)["Items"]
    except dynamodb.exceptions.ResourceNotFoundException:
        return set()
    return {item["leaseOwner"]["S"] for item in items
            if "leaseOwner" in item and item.get("checkpoint", {}).get("S") != "SHARD_END"}


def _write_until_a_delivers(write: Callable[[int], object], out: Path, dynamodb, app: str) -> None:
    """``write(round)`` a round of changes a second until host a has delivered some and holds an
    open lease (a 3.x leader hands leases over on its own cadence): its SIGKILL then costs something."""
    for round_ in range(1, 60):
        write(round_)
        time.sleep(1.0)
        if "a" in {d["host"] for d in changes_delivered(out)} and "a" in _owners(dynamodb, app):
            return
    raise AssertionError("host a never delivered records while holding an open lease")


@pytest.mark.parametrize("mode", ["CLIENT_VERSION_CONFIG_3X", "CLIENT_VERSION_CONFIG_COMPATIBLE_WITH_2X"])
def test_every_change_arrives_once_in_order_across_rollovers_and_a_host_sigkill(
        mode, tmp_path, moto_url, dynamodb, steer, unique_name):
    steer(action="configure", shards=2)
    table, app = unique_name, unique_name + "-app"
    arn = make_table(dynamodb, table)
    out = tmp_path / "out"
    out.mkdir()
    props = _properties(tmp_path, moto_url, arn, app, "streamName", clientVersionConfig=mode)
    hosts = {name: Daemon(props, tmp_path / f"{name}.log", "--set", f"workerId={name}",
                          env={"RECORDER_DIR": str(out), "RECORDER_HOST": name, "RECORDER_CHECKPOINT_EVERY": "1"})
             for name in ("a", "b")}
    expected: list[tuple[str, str]] = []
    try:
        wait_until(lambda: _owners(dynamodb, app) == {"a", "b"}, 60, "both hosts holding a lease")
        expected += _write(dynamodb, table, [0])
        steer(action="rollover", table=table)
        _write_until_a_delivers(lambda round_: expected.extend(_write(dynamodb, table, [round_])), out, dynamodb, app)
        hosts["a"].kill()
        steer(action="rollover", table=table)
        expected += _write(dynamodb, table, [100])
        for key in KEYS[:6]:
            if KEYS.index(key) % 3 == 0:
                steer(action="ttl_delete", table=table, keys={"pk": {"S": key}})
            dynamodb.delete_item(TableName=table, Key={"pk": {"S": key}})
            expected.append((key, "REMOVE ttl" if KEYS.index(key) % 3 == 0 else "REMOVE"))
        steer(action="rollover", table=table)
        wait_until(lambda: {(d["key"], d["change"]) for d in changes_delivered(out)} >= set(expected), 90,
                   f"all {len(expected)} changes delivered after host a's SIGKILL")
        hosts["b"].stop_gracefully()
    finally:
        for daemon in hosts.values():
            daemon.kill()

    delivered = changes_delivered(out)
    first: dict[str, dict] = {}
    for entry in delivered:
        first.setdefault(entry["seq"], entry)
    for key in KEYS:
        order = [d["change"] for d in first.values() if d["key"] == key]
        assert order == [change for k, change in expected if k == key], key
    assert len(first) == len(expected)
    replayed = [d for d in delivered if first[d["seq"]] is not d]
    assert all(first[d["seq"]]["host"] == "a" and d["host"] == "b" for d in replayed), replayed  # a's unchecked tail
    assert all(d["pk"] == d["seq"] and d["sub"] == 0 for d in delivered)
    assert len({d["_shard"] for d in delivered}) == 2 * 3, "records from the roots and two generations of children"
    assert "a" in {d["host"] for d in delivered}


def test_a_lease_table_written_by_the_1x_streams_daemon_is_taken_over_from_its_checkpoints(
        tmp_path, moto_url, dynamodb, steer, unique_name):
    """The StreamsMultiLangDaemon (adapter 1.x on KCL 1.x) left a table of KCL 1.x items: no hash
    range, no child ids, a finished parent at SHARD_END and its child checkpointed half-way, owned
    by a worker that is gone. kcl-mp takes the child over and delivers exactly what follows its
    checkpoint, in the 1.x record shape, then what comes next."""
    table, app = unique_name, unique_name + "-app"
    arn = make_table(dynamodb, table)
    _write(dynamodb, table, [0])
    parent = steer(action="rollover", table=table)["closed"][0]
    streams = boto3.client("dynamodbstreams", endpoint_url=moto_url, region_name="us-east-1")
    child_id = [s["ShardId"] for s in streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]
                if s.get("ParentShardId") == parent][0]
    _write(dynamodb, table, [1])
    iterator = streams.get_shard_iterator(StreamArn=arn, ShardId=child_id, ShardIteratorType="TRIM_HORIZON")
    in_child = [r["dynamodb"]["SequenceNumber"]
                for r in streams.get_records(ShardIterator=iterator["ShardIterator"])["Records"]]
    assert len(in_child) == len(KEYS)
    checkpoint = in_child[4]
    dynamodb.create_table(TableName=app, BillingMode="PAY_PER_REQUEST",
                          KeySchema=[{"AttributeName": "leaseKey", "KeyType": "HASH"}],
                          AttributeDefinitions=[{"AttributeName": "leaseKey", "AttributeType": "S"}])
    for key, position, parents in ((parent, "SHARD_END", None), (child_id, checkpoint, [parent])):
        item = {"leaseKey": {"S": key}, "leaseOwner": {"S": "streams-1x-worker"}, "leaseCounter": {"N": "41"},
                "ownerSwitchesSinceCheckpoint": {"N": "0"}, "checkpoint": {"S": position},
                "checkpointSubSequenceNumber": {"N": "0"}}
        if parents:
            item["parentShardId"] = {"SS": parents}
        dynamodb.put_item(TableName=app, Item=item)

    out = tmp_path / "out"
    out.mkdir()
    props = _properties(tmp_path, moto_url, arn, app, "streamName", **{"kclmp.dynamodbRecordFormat": "ADAPTER_V1"})
    daemon = Daemon(props, tmp_path / "run.log", env={"RECORDER_DIR": str(out), "RECORDER_HOST": "kcl-mp"})
    try:
        wait_until(lambda: len(changes_delivered(out)) >= len(KEYS) - 5, 60, "the child's records after its checkpoint")
        _write(dynamodb, table, [2])
        wait_until(lambda: len(changes_delivered(out)) >= 2 * len(KEYS) - 5, 60, "the records written after the takeover")
        daemon.stop_gracefully()
    finally:
        daemon.kill()
    delivered = changes_delivered(out)
    assert [d["seq"] for d in delivered[:len(KEYS) - 5]] == in_child[5:], "exactly what follows the checkpoint"
    assert [d["change"] for d in delivered] == ["MODIFY 1"] * (len(KEYS) - 5) + ["MODIFY 2"] * len(KEYS)
    assert all(d["pk"] is None and d["sub"] is None for d in delivered)  # the 1.x daemon's record shape
    inits = [e for e in recorded(out) if e.get("event") == "initialize"]
    assert [(e["shard"], e["seq"]) for e in inits] == [(child_id, checkpoint)]
    lease = dynamodb.get_item(TableName=app, Key={"leaseKey": {"S": child_id}}, ConsistentRead=True)["Item"]
    assert int(lease["leaseCounter"]["N"]) > 41 and lease["parentShardId"] == {"SS": [parent]}
    assert lease["checkpoint"]["S"] == delivered[-1]["seq"]  # the final checkpoint, where the 1.x daemon reads it


@pytest.mark.parametrize("key", ["streamArn", "streamArns"])
def test_check_config_checks_the_dynamodb_stream(tmp_path, moto_url, dynamodb, unique_name, key):
    """The stream, or each of a list's, described and an iterator got, under the key that names it."""
    tables = [unique_name] if key == "streamArn" else [f"{unique_name}-{n}" for n in range(2)]
    arns = [make_table(dynamodb, table) for table in tables]
    props = _properties(tmp_path, moto_url, ",".join(arns), unique_name + "-app", key)
    run = subprocess.run([sys.executable, "-m", "kcl_mp", "check-config", "-p", str(props)], cwd=ROOT,
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stdout + run.stderr
    for call in ("dynamodb:DescribeStream", "dynamodb:GetShardIterator"):
        found = [line for line in run.stdout.splitlines() if line.strip().startswith("ok") and call in line]
        assert len(found) == len(tables), run.stdout
    for table in tables:
        assert f"the stream of table {table} is ENABLED" in run.stdout
        assert key == "streamArn" or f"streamArns ({table})" in run.stdout, run.stdout


@pytest.mark.parametrize("mode", ["CLIENT_VERSION_CONFIG_3X", "CLIENT_VERSION_CONFIG_COMPATIBLE_WITH_2X"])
def test_three_tables_streams_in_one_application_through_rollovers_and_a_host_sigkill(
        mode, tmp_path, moto_url, dynamodb, steer, unique_name):
    """Three tables' streams (2 shards each; by streamArns, or a list file that gains the third while
    running), two hosts, in both KCL modes: every change
    of every table delivered, in order per item, to a processor of its own table's stream told which
    (KCL_STREAM_IDENTIFIER); what is delivered twice is only host a's unchecked tail after its
    SIGKILL; the leases are the adapter's multi-stream items (identifier account:region$account$table$label:1)."""
    steer(action="configure", shards=2)
    tables = [f"{unique_name}-t{i}" for i in range(3)]
    arns = {table: make_table(dynamodb, table) for table in tables}
    app = unique_name + "-app"
    out = tmp_path / "out"
    out.mkdir()
    props = base_properties(moto_url, app, app, f"{sys.executable} {RECORDER}", failoverTimeMillis=4000,
                            clientVersionConfig=mode)
    for key in ("streamName", "maxRecords"):
        del props[key]
    # streamArns in one mode; in the other a list file, the third table's stream appended while running
    listing = tmp_path / "streams.txt"
    listing.write_text("".join(f"{arns[table]}\n" for table in tables[:2]))
    listed = ({"streamArns": ",".join(arns.values())} if mode.endswith("3X")
              else {"streamListFile": listing.name, "streamListReadIntervalMillis": 1000})
    props = write_properties(tmp_path / "app.properties", **listed, **props)
    hosts = {name: Daemon(props, tmp_path / f"{name}.log", "--log-format", "json", "--set", f"workerId={name}",
                          env={"RECORDER_DIR": str(out), "RECORDER_HOST": name, "RECORDER_CHECKPOINT_EVERY": "1",
                               "RECORDER_STDERR_ENV": "KCL_STREAM_IDENTIFIER"})
             for name in ("a", "b")}
    expected: list[tuple[str, str]] = []

    def write(round_: int) -> None:
        for table in tables:
            for n in range(4):
                key = f"{table}-k{n}"
                dynamodb.put_item(TableName=table, Item={"pk": {"S": key}, "v": {"N": str(round_)}})
                expected.append((key, "INSERT" if round_ == 0 else f"MODIFY {round_}"))

    try:
        wait_until(lambda: _owners(dynamodb, app) == {"a", "b"}, 60, "both hosts holding leases")
        if "streamListFile" in listed:
            listing.write_text(listing.read_text() + f"{arns[tables[2]]}  # appended\n")
            wait_until(lambda: sum(f"${tables[2]}$" in key for key in _lease_keys(dynamodb, app)) == 2, 30,
                       f"the leases of {tables[2]}'s stream, appended to {listing.name}")
        write(0)
        steer(action="rollover", table=tables[0])
        _write_until_a_delivers(write, out, dynamodb, app)
        hosts["a"].kill()
        steer(action="rollover", table=tables[1])
        write(100)
        wait_until(lambda: {(d["key"], d["change"]) for d in changes_delivered(out)} >= set(expected), 90,
                   f"all {len(expected)} changes of the three tables delivered after host a's SIGKILL")
        # a rolled-over table's child with no change yet gets its processor at host b's next
        # shard sync: wait for it, so the stop does not race it
        wait_until(lambda: len(_leases(dynamodb, app)) == 10 and set(_told(hosts)) >= _leases(dynamodb, app), 60,
                   "a processor started on each of the ten leases")
        hosts["b"].stop_gracefully()
    finally:
        for daemon in hosts.values():
            daemon.kill()

    delivered = changes_delivered(out)
    first: dict[tuple[str, str], dict] = {}
    for entry in delivered:
        first.setdefault((entry["key"].rpartition("-k")[0], entry["seq"]), entry)
    assert len(first) == len(expected)
    for key in {k for k, _ in expected}:
        assert [d["change"] for d in first.values() if d["key"] == key] == [c for k, c in expected if k == key], key
    replayed = [d for d in delivered if first[d["key"].rpartition("-k")[0], d["seq"]] is not d]
    assert all(first[d["key"].rpartition("-k")[0], d["seq"]]["host"] == "a" and d["host"] == "b" for d in replayed)
    account = next(iter(arns.values())).split(":")[4]
    identifiers = {f"{account}:{adapter_stream_name(arn)}:1": table for table, arn in arns.items()}

    items = [item for item in dynamodb.scan(TableName=app, ConsistentRead=True)["Items"] if "leaseCounter" in item
             and item.get("entityType", {"S": "LEASE"}) == {"S": "LEASE"}]
    assert len(items) == 3 * 2 + 2 * 2  # each table's two roots, the two rolled-over tables' children
    for item in items:
        split = split_key(item["leaseKey"]["S"])
        assert split is not None and split[0].serialized in identifiers, item
        assert (item["streamName"], item["shardId"]) == ({"S": split[0].serialized}, {"S": split[1]}), item

    told = _told(hosts)
    assert set(told) == {item["leaseKey"]["S"] for item in items}, told
    assert all(key.rpartition(":")[0] == identifier for key, identifier in told.items()), told
    for pid in {d["_pid"] for d in delivered}:  # each processor read its lease's table only
        assert len({d["key"].rpartition("-k")[0] for d in delivered if d["_pid"] == pid}) == 1, pid

"""The coordinator-state table, Migration3.0, the lease-owner index and throughputKBps on
renewals (kcl_mp.fleet.state_store, owner_index, throughput) against a real moto
server, compared with what the Java KCL wrote (tests/fixtures)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kcl_mp.errors import DependencyError
from kcl_mp.fleet import table_migration as tm
from kcl_mp.fleet.client_version import CONFIG_3X, CONFIG_COMPATIBLE_WITH_2X, ClientVersion
from kcl_mp.fleet.state_store import CoordinatorStateStore, StateTables
from kcl_mp.fleet.table_migrator import TableMigrator
from kcl_mp.leases import cost
from kcl_mp.leases.lease import Lease
from kcl_mp.leases.owner_index import ensure_owner_index, index_status, lease_keys_for_worker, wait_for_owner_index
from kcl_mp.leases.rows import CoordinatorState, read_items
from kcl_mp.leases.table import LeaseTable
from kcl_mp.leases.throughput import LeaseThroughput, renewal_attributes

INIT, UPGRADE_FROM_2X, V2X, V3X_WITH_ROLLBACK, V3X = (v.value for v in (
    ClientVersion.INIT, ClientVersion.UPGRADE_FROM_2X, ClientVersion.V2X, ClientVersion.V3X_WITH_ROLLBACK, ClientVersion.V3X))
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
JAVA_313 = json.loads((FIXTURES / "java_kcl_3.1.3_tables.json").read_text())["while_running"]
JAVA_35_ROWS = json.loads((FIXTURES / "java_kcl_3.5_rows.json").read_text())["rows"]


def shape(value):
    (kind, inner), = value.items()
    if kind == "M":
        return {"M": {name: shape(v) for name, v in inner.items()}}
    if kind == "L":
        return {"L": [shape(v) for v in inner]}
    return kind


def _store(dynamodb, tables, worker="kclmp-1", now_ms=1_795_343_451_576):
    return CoordinatorStateStore(dynamodb, tables, worker, clock_ms=lambda: now_ms)


def test_first_worker_creates_the_table_and_migration_item_as_java_313(dynamodb, unique_name):
    java_table = JAVA_313["kclbench-0-CoordinatorState"]
    java_item = next(i for i in java_table["items"] if i["key"]["S"] == "Migration3.0")
    store = _store(dynamodb, StateTables.separate(unique_name))
    assert store.ensure_table() is True
    assert store.ensure_table() is False
    table = dynamodb.describe_table(TableName=f"{unique_name}-CoordinatorState")["Table"]
    assert table["KeySchema"] == java_table["KeySchema"]
    assert table["AttributeDefinitions"] == java_table["AttributeDefinitions"]
    assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    state = store.initialise_client_version(CONFIG_3X)
    assert state.value == V3X and state.history[0].value == INIT
    item = dynamodb.get_item(TableName=store.table, Key={"key": {"S": "Migration3.0"}})["Item"]
    assert {k: shape(v) for k, v in item.items()} == {k: shape(v) for k, v in java_item.items()}
    assert item["cv"] == {"S": V3X} and item["mb"] == {"S": "kclmp-1"}
    assert item["h"]["L"][0]["M"]["cv"] == {"S": INIT}
    # a second worker finds it settled and writes nothing
    other = _store(dynamodb, StateTables.separate(unique_name), "kclmp-2", now_ms=1)
    assert other.initialise_client_version(CONFIG_3X) == state
    assert dynamodb.get_item(TableName=store.table, Key={"key": {"S": "Migration3.0"}})["Item"] == item


@pytest.mark.parametrize("stored, config, settled", [
    (None, CONFIG_COMPATIBLE_WITH_2X, UPGRADE_FROM_2X),
    (V3X_WITH_ROLLBACK, CONFIG_3X, V3X),
    (V3X_WITH_ROLLBACK, CONFIG_COMPATIBLE_WITH_2X, V3X_WITH_ROLLBACK),
    (V2X, CONFIG_3X, V2X),
    (UPGRADE_FROM_2X, CONFIG_3X, UPGRADE_FROM_2X),
])
def test_initialisation_per_client_version_config(dynamodb, unique_name, stored, config, settled):
    tables = StateTables.separate(unique_name)
    store = _store(dynamodb, tables)
    store.ensure_table()
    if stored is not None:
        dynamodb.put_item(TableName=store.table, Item={
            "key": {"S": "Migration3.0"}, "cv": {"S": stored}, "mb": {"S": "java-1"}, "mts": {"N": "5"}})
    state = store.initialise_client_version(config)
    assert state.value == settled
    assert store.client_version() == state
    moved = stored is not None and stored != settled
    assert (state.modified_by == "kclmp-1") == (moved or stored is None)
    if moved:  # the old value heads the history, as MigrationState.update puts it
        assert state.history[0].value == stored and state.history[0].modified_by == "java-1"


def test_a_flip_is_conditioned_on_the_version_read(dynamodb, unique_name):
    tables = StateTables.separate(unique_name)
    leader, late = _store(dynamodb, tables, "leader"), _store(dynamodb, tables, "late")
    leader.ensure_table()
    start = leader.initialise_client_version(CONFIG_COMPATIBLE_WITH_2X)
    flipped = leader.set_client_version(start, V3X_WITH_ROLLBACK)
    assert flipped is not None and flipped.value == V3X_WITH_ROLLBACK
    assert [c.value for c in flipped.history] == [UPGRADE_FROM_2X, INIT]
    assert late.set_client_version(start, V2X) is None  # read before the flip: lost
    assert late.client_version() == flipped
    history = flipped
    for _ in range(12):  # the history keeps 10
        history = leader.set_client_version(history, V2X if history.value != V2X else V3X_WITH_ROLLBACK)
    assert len(history.history) == 10 and leader.client_version() == history


def test_lease_table_rows_and_where_the_state_is(dynamodb, unique_name):
    LeaseTable(dynamodb, unique_name).ensure_table()
    fresh = TableMigrator(dynamodb, unique_name, unique_name, "kclmp-1", migrate_all=False)
    assert fresh.start() == tm.InitialStatus(tm.INIT, create_own=True)  # nothing anywhere: the own tables, as 3.1-3.4
    assert fresh.writes == StateTables.separate(unique_name, java35=True)
    table_migration = next(r for r in JAVA_35_ROWS if r["leaseKey"]["S"] == "TableMigration3.5")
    dynamodb.put_item(TableName=unique_name, Item=table_migration)
    migrator = TableMigrator(dynamodb, unique_name, unique_name, "kclmp-1", migrate_all=False)
    assert migrator.start() == tm.InitialStatus(tm.COMPLETE)
    tables = migrator.writes
    assert tables == StateTables.in_lease_table(unique_name)
    store = _store(dynamodb, tables)
    assert store.ensure_table() is False
    store.initialise_client_version(CONFIG_3X)
    java_row = next(r for r in JAVA_35_ROWS if r["leaseKey"]["S"] == "Migration3.0")
    item = dynamodb.get_item(TableName=unique_name, Key={"leaseKey": {"S": "Migration3.0"}})["Item"]
    assert {k: shape(v) for k, v in item.items()} == {k: shape(v) for k, v in java_row.items()}
    scan = read_items(dynamodb.scan(TableName=unique_name)["Items"])
    assert scan.leases == ()
    views = {row.key: row.view for row in scan.others}
    assert isinstance(views["Migration3.0"], CoordinatorState) and views["Migration3.0"].value == V3X
    assert dynamodb.get_item(TableName=unique_name, Key={"leaseKey": {"S": "TableMigration3.5"}})["Item"] == \
        table_migration  # untouched


def test_owner_index_added_to_a_table_without_it_and_queried(dynamodb, unique_name):
    dynamodb.create_table(TableName=unique_name, KeySchema=[{"AttributeName": "leaseKey", "KeyType": "HASH"}],
                          AttributeDefinitions=[{"AttributeName": "leaseKey", "AttributeType": "S"}],
                          BillingMode="PAY_PER_REQUEST")
    table = LeaseTable(dynamodb, unique_name)
    for i, owner in enumerate(["a", "b", "a", None, "a"]):
        table.create_if_absent(Lease(key=f"shardId-{i:012d}", owner=owner, counter=1))
    for row in JAVA_35_ROWS:
        dynamodb.put_item(TableName=unique_name, Item=row)
    assert index_status(dynamodb, unique_name) is None
    with pytest.raises(DependencyError, match="LeaseOwnerToLeaseKeyIndex does not exist"):
        lease_keys_for_worker(dynamodb, unique_name, "a")
    assert ensure_owner_index(dynamodb, unique_name) in ("CREATING", "ACTIVE")
    assert wait_for_owner_index(dynamodb, unique_name, poll_s=0.2, timeout_s=30)
    assert ensure_owner_index(dynamodb, unique_name) == "ACTIVE"  # asked again: nothing done
    index = next(i for i in dynamodb.describe_table(TableName=unique_name)["Table"]["GlobalSecondaryIndexes"])
    java_index = JAVA_313["kclbench-0"]["GlobalSecondaryIndexes"][0]
    assert (index["IndexName"], index["KeySchema"], index["Projection"]) == \
        (java_index["IndexName"], java_index["KeySchema"], java_index["Projection"])
    assert sorted(lease_keys_for_worker(dynamodb, unique_name, "a")) == \
        ["shardId-000000000000", "shardId-000000000002", "shardId-000000000004"]
    assert lease_keys_for_worker(dynamodb, unique_name, "java-worker-1") == []  # 3.5 rows are not in it
    assert lease_keys_for_worker(dynamodb, unique_name, "nobody") == []


def test_renewal_writes_throughput_as_java(dynamodb, unique_name):
    table = LeaseTable(dynamodb, unique_name)
    table.ensure_table()
    table.create_if_absent(Lease(key="shardId-000000000000", owner=None, counter=0))
    lease = table.take(table.get("shardId-000000000000"), "w1")
    throughput = LeaseThroughput(renewal_period_ms=1000)
    assert renewal_attributes(throughput.kbps(lease.key, 1_000)) == {}  # nothing read yet: none written
    lease = table.renew(lease, "w1", renewal_attributes(throughput.kbps(lease.key, 1_000)))
    assert "throughputKBps" not in dynamodb.get_item(TableName=unique_name, Key={"leaseKey": {"S": lease.key}})["Item"]
    throughput.record(lease.key, 5 * 1024, 1_500)
    renewed = table.renew(lease, "w1", renewal_attributes(throughput.kbps(lease.key, 2_000)))
    assert renewed is not None and renewed.counter == lease.counter + 1
    item = dynamodb.get_item(TableName=unique_name, Key={"leaseKey": {"S": lease.key}})["Item"]
    assert item["throughputKBps"] == {"N": "5.0"} and item["leaseOwner"] == {"S": "w1"}
    # a renewal without a value leaves the last one; a lost lease writes nothing
    renewed = table.renew(renewed, "w1")
    assert dynamodb.get_item(TableName=unique_name, Key={"leaseKey": {"S": lease.key}})["Item"]["throughputKBps"] == \
        {"N": "5.0"}
    assert table.renew(lease, "w1", renewal_attributes(1.0)) is None  # stale counter
    assert Lease.from_item(item).to_item()["throughputKBps"] == {"N": "5.0"}  # kept through a round trip


def test_renewal_writes_the_lease_cost_beside_throughput(dynamodb, unique_name):
    """kcl-mp's own kclmpCpuPercent rides on the renewal with throughputKBps; a renewal without
    a sample keeps the last one; the leader reads it back from the row (``cost.measured``)."""
    table = LeaseTable(dynamodb, unique_name)
    table.ensure_table()
    table.create_if_absent(Lease(key="shardId-000000000000", owner=None, counter=0))
    lease = table.take(table.get("shardId-000000000000"), "w1")
    costs = cost.LeaseCost()
    costs.record(lease.key, 40.0 + cost.pool_shares(10.0, {lease.key: 100, "shardId-000000000001": 300})[lease.key])
    renewed = table.renew(lease, "w1", {**renewal_attributes(5.0), **cost.renewal_attributes(costs.percent(lease.key))})
    assert renewed is not None
    item = dynamodb.get_item(TableName=unique_name, Key={"leaseKey": {"S": lease.key}})["Item"]
    assert item["kclmpCpuPercent"] == {"N": "42.5"} and item["throughputKBps"] == {"N": "5.0"}
    renewed = table.renew(renewed, "w1", cost.renewal_attributes(None))
    assert cost.measured(table.get(lease.key).extra) == 42.5

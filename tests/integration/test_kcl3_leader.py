"""Leader election through the lock item (kcl_mp.fleet.leader) against a real moto server."""

from __future__ import annotations

import time

import pytest

from kcl_mp.fleet.leader import LeaderElection, LockTable
from kcl_mp.fleet.state_store import StateTables, ensure_table
from kcl_mp.leases.rows import LockView, read_items

from ..support.clock import Clock

pytestmark = [pytest.mark.integration, pytest.mark.timing]


def _tables(dynamodb, unique_name: str) -> StateTables:
    tables = StateTables.separate(unique_name)
    ensure_table(dynamodb, tables.coordinator_table, tables.coordinator_key)
    return tables


def test_one_wins_and_the_other_takes_over_only_after_the_lease_duration(dynamodb, unique_name):
    tables = _tables(dynamodb, unique_name)
    clock = Clock()
    a = LeaderElection(LockTable(dynamodb, tables, "a", lease_duration_ms=10_000), clock)
    b = LeaderElection(LockTable(dynamodb, tables, "b", lease_duration_ms=10_000), clock)
    assert a.check() is True
    assert b.check() is False  # first sighting of a's version
    item = dynamodb.get_item(TableName=tables.coordinator_table, Key={"key": {"S": "Leader"}})["Item"]
    assert set(item) == {"key", "ownerName", "leaseDuration", "recordVersionNumber"}  # Java's 3.1.3 item
    assert item["ownerName"] == {"S": "a"} and item["leaseDuration"] == {"S": "10000"}
    for _ in range(5):  # a heartbeats every 3 s: b never sees a version long enough
        clock.now += 3
        assert a.check() is True
        assert b.check() is False
    version = item["recordVersionNumber"]
    assert dynamodb.get_item(TableName=tables.coordinator_table,
                             Key={"key": {"S": "Leader"}})["Item"]["recordVersionNumber"] != version
    # a stops heartbeating (dead); b first saw the last version right after a's write
    clock.now += 0.5
    assert b.check() is False
    clock.now += 9.5  # 10 s after b saw it: not longer than the lease duration yet
    assert b.check() is False and a.is_leader() is True
    clock.now += 0.6
    assert a.is_leader() is False  # a's belief ended 10 s after its last write began
    assert b.check() is True and b.is_leader() is True
    # a wakes up: its heartbeat fails (it no longer believes it leads, so it contends)
    assert a.check() is False and a.is_leader() is False
    assert b.check() is True
    # b releases (shutdown): the item is deleted and a acquires at once
    assert b.release() is True
    assert dynamodb.get_item(TableName=tables.coordinator_table, Key={"key": {"S": "Leader"}}).get("Item") is None
    assert a.check() is True


def test_a_stale_holder_cannot_heartbeat_over_a_new_leader(dynamodb, unique_name):
    tables = _tables(dynamodb, unique_name)
    lock_a = LockTable(dynamodb, tables, "a", lease_duration_ms=5_000)
    lock_b = LockTable(dynamodb, tables, "b", lease_duration_ms=5_000)
    assert lock_a.acquire("v1", None) is True
    assert lock_b.acquire("v2", None) is False  # present: only the expired or released form may replace it
    seen = lock_b.read()
    assert seen is not None and seen.owner == "a"
    assert lock_b.acquire("v2", seen) is True  # b judged it expired
    assert lock_a.heartbeat("v1", "v3") is False
    assert lock_a.release("v1") is False
    assert lock_b.heartbeat("v2", "v4") is True
    assert lock_b.release("v2") is False  # the version moved on
    assert lock_b.release("v4") is True


def test_released_lock_and_the_lease_table_form(dynamodb, unique_name):
    """In the 3.5 lease table the lock is keyed by leaseKey, carries entityType LEADER and
    reads back through rows.py as the leader lock, never as a lease."""
    from kcl_mp.leases.table import LeaseTable

    LeaseTable(dynamodb, unique_name).ensure_table()
    tables = StateTables.in_lease_table(unique_name)
    a = LeaderElection(LockTable(dynamodb, tables, "a"))
    assert a.check() is True
    items = dynamodb.scan(TableName=unique_name)["Items"]
    scan = read_items(items)
    assert scan.leases == () and len(scan.others) == 1
    view = scan.others[0].view
    assert isinstance(view, LockView) and view.owner == "a" and view.lease_duration_ms == 120_000
    # a lock released without deleting (isReleased "1") is taken at once, by the released form
    dynamodb.update_item(TableName=unique_name, Key={"leaseKey": {"S": "Leader"}},
                         UpdateExpression="SET isReleased = :one", ExpressionAttributeValues={":one": {"S": "1"}})
    b = LeaderElection(LockTable(dynamodb, tables, "b"))
    assert b.check() is True
    assert "isReleased" not in dynamodb.get_item(TableName=unique_name, Key={"leaseKey": {"S": "Leader"}})["Item"]


def test_two_electors_in_real_time_never_both_lead(dynamodb, unique_name):
    """Two electors on the real clock, the lease duration 2 s, checks every 0.2 s: the
    leader stops heartbeating and the other leads within the lease duration (plus one
    check and the lost race's slack); at no sample do both believe they lead."""
    tables = _tables(dynamodb, unique_name)
    electors = [LeaderElection(LockTable(dynamodb, tables, name, lease_duration_ms=2_000)) for name in "ab"]
    deadline = time.monotonic() + 30
    while not any(e.is_leader() for e in electors):
        assert time.monotonic() < deadline
        for e in electors:
            e.check()
    leader = next(e for e in electors if e.is_leader())
    other = next(e for e in electors if e is not leader)
    for _ in range(10):
        leader.check()
        other.check()
        assert not other.is_leader()
        time.sleep(0.2)
    last_beat = leader.held.at  # the leader dies: no more checks
    while not other.is_leader():
        assert not (leader.is_leader() and other.is_leader())
        assert time.monotonic() < deadline
        other.check()
        time.sleep(0.2)
    assert not leader.is_leader()
    took = other.held.at - last_beat
    assert 2.0 < took < 2.0 + 0.2 + 2.0, took  # after the lease duration, within one check (loaded machine: +2 s)


def test_a_contender_reads_the_table_migration_before_taking_the_own_tables_lock(tmp_path, moto_url, dynamodb,
                                                                                   unique_name):
    """Java's 3.5 leader writes COMPLETE and deletes its lock in the own CoordinatorState table.
    A kcl-mp contender whose next lock check comes before its next read of the status (a
    scan's, every watch interval) finds the own table's lock free: it reads the status before
    taking it, takes nothing there and moves to the lease table, whose lock it takes at its
    next check (Java takes the own lock, reads COMPLETE and deletes it again; kcl-mp never
    writes a lock into the table the fleet has left)."""
    import logging
    import random

    from kcl_mp.config import load_config
    from kcl_mp.fleet import table_migration as tm
    from kcl_mp.fleet.role import FleetRole
    from kcl_mp.leases.table import LeaseTable
    from kcl_mp.logs import ShardLog
    from kcl_mp.metrics.catalogue import Recorder

    from ..support.harness import base_properties, write_properties
    from ..support.kcl35_migration import HOUR_MS, own_tables

    app = unique_name
    table = LeaseTable(dynamodb, app)
    table.ensure_table()
    now_ms = int(time.time() * 1000)
    own_tables(dynamodb, app, tm.PENDING, now_ms - 2 * HOUR_MS, lock_owner="java-1")
    props = write_properties(tmp_path / "app.properties", **base_properties(
        moto_url, "unused", app, "true", workerId="kclmp-1", failoverTimeMillis=3000,
        clientVersionConfig="CLIENT_VERSION_CONFIG_3X", migrateAllEntitiesToLeaseTable="true"))
    clock = Clock()
    role = FleetRole(load_config(props), dynamodb, table, ShardLog(logging.getLogger("test"), "kclmp-1"), clock,
                     time.time, random.Random(1), Recorder(enabled=False))
    role.join()  # its first lock check: java-1's lock, first seen
    assert role.follow() is False and role.migration.local == tm.PENDING and not role.is_leader()
    own = f"{app}-CoordinatorState"
    complete = {"entityType": {"S": "TABLE_MIGRATION"}, **tm.set_status(
        role.migration.stored, tm.COMPLETE, "java-1", now_ms).attributes("tm")}
    dynamodb.transact_write_items(TransactItems=[  # Java's finalizeMigrationComplete, then its release
        {"Put": {"TableName": app, "Item": {"leaseKey": {"S": "TableMigration3.5"}, **complete}}},
        {"Put": {"TableName": own, "Item": {"key": {"S": "TableMigration3.5"}, **complete}}}])
    dynamodb.delete_item(TableName=own, Key={"key": {"S": "Leader"}})

    clock.advance(role.config.leader_heartbeat_s)  # the next lock check, before the next status read
    assert clock.now < role.next_follow
    assert role.tick() is False
    assert dynamodb.get_item(TableName=own, Key={"key": {"S": "Leader"}}, ConsistentRead=True).get("Item") is None
    assert role.migration.complete and role.election is not None and role.election.lock.table == app
    clock.advance(role.config.leader_heartbeat_s)
    assert role.tick() is True  # the lease table's lock, free: taken
    lock = dynamodb.get_item(TableName=app, Key={"leaseKey": {"S": "Leader"}}, ConsistentRead=True)["Item"]
    assert lock["ownerName"] == {"S": "kclmp-1"} and lock["entityType"] == {"S": "LEADER"}
    assert dynamodb.get_item(TableName=own, Key={"key": {"S": "Leader"}}, ConsistentRead=True).get("Item") is None

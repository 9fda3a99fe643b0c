"""What is a lease and what is not: the rule by decision table, and KCL 3.5's other rows
(tests/fixtures/java_kcl_3.5_rows.json, shaped as Java's serializers write them) read apart."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from kcl_mp.leases.lease import Lease, not_a_lease
from kcl_mp.leases.rows import CoordinatorState, LeaderLock, StateChange, WorkerMetrics, read_items
from kcl_mp.sequence import ExtendedSequenceNumber

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "java_kcl_3.5_rows.json"
JAVA = json.loads(FIXTURE.read_text())
ROWS = {row["leaseKey"]["S"]: row for row in JAVA["rows"]}
LEASE_3_1 = {"leaseKey": {"S": "shardId-000000000001"}, "leaseCounter": {"N": "3"},
             "leaseOwner": {"S": "java-mld-worker-0"}, "ownerSwitchesSinceCheckpoint": {"N": "0"},
             "checkpoint": {"S": "4988"}, "checkpointSubSequenceNumber": {"N": "0"}}


def _with(item, **changes):
    out = copy.deepcopy(item)
    for name, value in changes.items():
        if value is None:
            out.pop(name, None)
        else:
            out[name] = value
    return out


# (comment, item, why it is not a lease: None when it is one)
CASES = [
    ("a 3.x lease: no entityType", LEASE_3_1, None),
    ("a 3.5 lease: entityType LEASE", JAVA["lease"], None),
    ("a lease kcl-mp creates", Lease("s-0", checkpoint=ExtendedSequenceNumber("TRIM_HORIZON")).to_item(), None),
    ("attributes kcl-mp does not model, of any type",
     _with(LEASE_3_1, throughputKBps={"N": "1.5"}, pendingCheckpointState={"B": b"x"}, foo={"BOOL": True}), None),
    ("a handoff under way", _with(JAVA["lease"], checkpointOwner={"S": "w2"}), None),
    ("the leader lock", ROWS["Leader"], "entityType LEADER"),
    ("the client version", ROWS["Migration3.0"], "entityType CLIENT_VERSION_MIGRATION"),
    ("the table migration", ROWS["TableMigration3.5"], "entityType TABLE_MIGRATION"),
    ("a worker's metrics", ROWS["java-worker-1"], "entityType WORKER_METRIC_STATS"),
    ("a lock item without entityType (as in the 3.x coordinator table)", _with(ROWS["Leader"], entityType=None),
     "no leaseCounter"),
    ("an unknown entityType on a lease-shaped row", _with(JAVA["lease"], entityType={"S": "STREAM"}),
     "entityType STREAM"),
    ("entityType spelled differently", _with(JAVA["lease"], entityType={"S": "lease"}), "entityType lease"),
    ("entityType not a string", _with(JAVA["lease"], entityType={"N": "1"}), "entityType is N, not S"),
    ("entityType LEASE but no counter", _with(JAVA["lease"], leaseCounter=None), "no leaseCounter"),
    ("a counter stored as a string", _with(LEASE_3_1, leaseCounter={"S": "3"}), "leaseCounter is S, not N"),
    ("a counter that is not a whole number", _with(LEASE_3_1, leaseCounter={"N": "3.5"}),
     "leaseCounter '3.5' is not a whole number"),
    ("an owner that is not a string", _with(LEASE_3_1, leaseOwner={"N": "7"}), "leaseOwner is N, not S"),
    ("parents as one string, not a set", _with(LEASE_3_1, parentShardId={"S": "shardId-0"}),
     "parentShardId is S, not SS"),
    ("a checkpoint that is a number", _with(LEASE_3_1, checkpoint={"N": "4988"}), "checkpoint is N, not S"),
    ("no leaseKey string", _with(LEASE_3_1, leaseKey={"S": ""}), "no leaseKey"),
]


@pytest.mark.parametrize("comment, item, why", CASES, ids=[case[0] for case in CASES])
def test_what_is_a_lease(comment, item, why):
    assert not_a_lease(item) == why, comment


def test_a_scan_splits_leases_from_the_other_rows_and_keeps_their_items():
    items = [LEASE_3_1, *JAVA["rows"], JAVA["lease"]]
    found = read_items(copy.deepcopy(items))
    assert [lease.key for lease in found.leases] == ["shardId-000000000001", "shardId-000000000000"]
    assert [row.key for row in found.others] == ["Leader", "Migration3.0", "TableMigration3.5", "java-worker-1"]
    assert [row.item for row in found.others] == JAVA["rows"]  # as scanned, untouched
    assert found.leases[1].to_item() == JAVA["lease"]  # a 3.5 lease keeps its entityType when written back


def test_the_views_are_what_java_stored():
    views = {row.key: row.view for row in read_items(JAVA["rows"]).others}
    assert views["Leader"] == LeaderLock("java-worker-1", 120000, "5ba0e682-30f7-44e9-8c94-f999d1347ffd", False)
    assert views["Migration3.0"] == CoordinatorState(
        "CLIENT_VERSION_3X", "java-worker-1", 1795343451578,
        (StateChange("CLIENT_VERSION_INIT", "java-worker-1", 1795343451576),))
    table = views["TableMigration3.5"]
    assert isinstance(table, CoordinatorState) and table.value == "TABLE_MIGRATION_STATUS_COMPLETE"
    assert [change.value for change in table.history] == [  # the chain TableMigrationState.update leaves
        "TABLE_MIGRATION_STATUS_PENDING", "TABLE_MIGRATION_STATUS_DEPLOYED", "TABLE_MIGRATION_STATUS_INIT",
        "TABLE_MIGRATION_STATUS_INIT"]
    assert views["java-worker-1"] == WorkerMetrics("java-worker-1", 1795347083, {"C": (12.5, 14.25, -1.0)},
                                                   {"C": (100,)}, 1, 1795347083)


def test_summaries_for_an_operator():
    lines = {row.key: row.summary() for row in read_items(JAVA["rows"]).others}
    assert lines == {
        "Leader": "leader lock held by java-worker-1 (leaseDuration 120000 ms)",
        "Migration3.0": "client version CLIENT_VERSION_3X, set by java-worker-1 at 2026-11-22T10:30:51Z",
        "TableMigration3.5": "table migration TABLE_MIGRATION_STATUS_COMPLETE, set by java-worker-1 at "
                             "2026-11-22T11:30:51Z",
        "java-worker-1": "worker metrics of java-worker-1, updated 2026-11-22T11:31:23Z (C -1)",
    }


def test_a_row_of_another_shape_has_no_view_and_says_why():
    odd = [_with(ROWS["Leader"], ownerName={"N": "1"}), _with(LEASE_3_1, leaseCounter={"S": "3"}),
           _with(ROWS["java-worker-1"], lut=None), {"leaseKey": {"S": "x"}, "entityType": {"S": "STREAM"}}]
    rows = read_items(odd).others
    assert [row.view for row in rows] == [None] * 4
    assert [row.summary() for row in rows] == [
        "not a lease: entityType LEADER", "not a lease: leaseCounter is S, not N",
        "not a lease: entityType WORKER_METRIC_STATS", "not a lease: entityType STREAM"]

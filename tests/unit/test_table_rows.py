"""What is a lease and what is not: the rule by decision table, and KCL 3.5's other rows
(tests/fixtures/java_kcl_3.5_rows.json, shaped as Java's serializers write them) read apart."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from kcl_mp.leases.lease import Lease, not_a_lease
from kcl_mp.leases.rows import CoordinatorState, LockView, StateChange, WorkerMetrics, read_items
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
    ("a lease kcl-mp creates", Lease("shardId-000000000000", checkpoint=ExtendedSequenceNumber("TRIM_HORIZON")).to_item(), None),
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
    # every value from_item reads is checked, so reading a lease never fails (security review #1)
    ("a sub-sequence number typed as 1.5 in the console", _with(LEASE_3_1, checkpointSubSequenceNumber={"N": "1.5"}),
     "checkpointSubSequenceNumber '1.5' is not a whole number"),
    ("a pending sub-sequence number of 0.5", _with(LEASE_3_1, pendingCheckpoint={"S": "5000"},
                                                   pendingCheckpointSubSequenceNumber={"N": "0.5"}),
     "pendingCheckpointSubSequenceNumber '0.5' is not a whole number"),
    ("a negative owner switch count", _with(LEASE_3_1, ownerSwitchesSinceCheckpoint={"N": "-2.5"}),
     "ownerSwitchesSinceCheckpoint '-2.5' is not a whole number"),
    ("a negative counter", _with(LEASE_3_1, leaseCounter={"N": "-5"}), "leaseCounter '-5' is not a whole number"),
    ("a counter beyond Java's long", _with(LEASE_3_1, leaseCounter={"N": "9223372036854775808"}),
     "leaseCounter '9223372036854775808' is not a whole number up to 9223372036854775807"),
    ("a hash key that is not decimal", _with(LEASE_3_1, startingHashKey={"S": "abc"}, endingHashKey={"S": "9"}),
     "startingHashKey 'abc' is not a whole number"),
    ("a hash key of 5,000 digits (int() refuses it)", _with(LEASE_3_1, startingHashKey={"S": "1" * 5000},
                                                             endingHashKey={"S": "9"}),
     f"startingHashKey {'1' * 60!r}... is not a whole number up to {2**128 - 1}"),
    ("a hash key beyond 2^128 - 1", _with(LEASE_3_1, startingHashKey={"S": "0"}, endingHashKey={"S": str(2**128)}),
     f"endingHashKey '{2**128}' is not a whole number up to {2**128 - 1}"),
    ("a checkpoint that is no sequence number", _with(LEASE_3_1, checkpoint={"S": "12ab"}),
     "checkpoint '12ab' is not a sequence number"),
    ("a checkpoint longer than any sequence number", _with(LEASE_3_1, checkpoint={"S": "1" * 200}),
     f"checkpoint {'1' * 60!r}... is not a sequence number"),
    ("a key that names no shard", _with(LEASE_3_1, leaseKey={"S": "bogus-003"}),
     "leaseKey 'bogus-003' is not a shard id (shardId- and 12 digits)"),
    ("a key that forges a log line: shown escaped",
     _with(LEASE_3_1, leaseKey={"S": "shardId-000000000777\n2026-11-25 ERROR forged"}),
     "leaseKey 'shardId-000000000777\\n2026-11-25 ERROR forged' is not a shard id (shardId- and 12 digits)"),
    ("a Java multi-stream key: another application's lease",
     _with(LEASE_3_1, leaseKey={"S": "123456789012:orders:1700000000:shardId-000000000001"}),
     "leaseKey '123456789012:orders:1700000000:shardId-000000000001' is not a shard id (shardId- and 12 digits)"),
    ("a 2 KB key: shown cut at 128 characters, the longest ShardId Kinesis allows",
     _with(LEASE_3_1, leaseKey={"S": "x" * 2048}),
     f"leaseKey {'x' * 128!r}... is not a shard id (shardId- and 12 digits)"),
    ("a shard id of the wrong width", _with(LEASE_3_1, leaseKey={"S": "shardId-1"}),
     "leaseKey 'shardId-1' is not a shard id (shardId- and 12 digits)"),
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
    assert views["Leader"] == LockView("java-worker-1", 120000, "5ba0e682-30f7-44e9-8c94-f999d1347ffd", False)
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
        "LEADER row kcl-mp cannot read: ownerName is not S", "not a lease: leaseCounter is S, not N",
        "WORKER_METRIC_STATS row kcl-mp cannot read: lut is missing", "not a lease: entityType STREAM"]


# (comment, row, what the operator is told): a state or metrics row with a value Java would
# not write is read as no view, with the attribute at fault, never as an exception
BAD_STATE_ROWS = [
    ("a lock without leaseDuration", _with(ROWS["Leader"], leaseDuration=None),
     "LEADER row kcl-mp cannot read: leaseDuration is missing"),
    ("a lock whose leaseDuration has a unit", _with(ROWS["Leader"], leaseDuration={"S": "120000ms"}),
     "LEADER row kcl-mp cannot read: leaseDuration '120000ms' is not a whole number"),
    ("a lock without entityType (the 3.x table's shape) and a bad version",
     _with(ROWS["Leader"], entityType=None, recordVersionNumber={"N": "3"}),
     "Leader row kcl-mp cannot read: recordVersionNumber is not S"),
    ("a client version set at 1.5 ms", _with(ROWS["Migration3.0"], mts={"N": "1.5"}),
     "CLIENT_VERSION_MIGRATION row kcl-mp cannot read: mts '1.5' is not a whole number"),
    ("a client version whose history holds a string",
     _with(ROWS["Migration3.0"], h={"L": [{"S": "CLIENT_VERSION_INIT"}]}),
     "CLIENT_VERSION_MIGRATION row kcl-mp cannot read: h[0] is not a map"),
    ("a table migration without its status", _with(ROWS["TableMigration3.5"], tm=None),
     "TABLE_MIGRATION row kcl-mp cannot read: tm is missing"),
    ("worker metrics with a 5,000-digit lut", _with(ROWS["java-worker-1"], lut={"N": "9" * 5000}),
     f"WORKER_METRIC_STATS row kcl-mp cannot read: lut {'9' * 60!r}... is not a whole number"),
    ("worker metrics whose CPU values are strings", _with(ROWS["java-worker-1"], sts={"M": {"C": {"L": [{"S": "x"}]}}}),
     "WORKER_METRIC_STATS row kcl-mp cannot read: sts.C holds 'None', not a number"),
    ("worker metrics whose operating range is a number", _with(ROWS["java-worker-1"], opr={"N": "100"}),
     "WORKER_METRIC_STATS row kcl-mp cannot read: opr is not a map"),
]


@pytest.mark.parametrize("comment, row, summary", BAD_STATE_ROWS, ids=[case[0] for case in BAD_STATE_ROWS])
def test_a_state_row_java_would_not_write_is_shown_with_its_fault(comment, row, summary):
    (found,) = read_items([row]).others
    assert (found.view, found.summary()) == (None, summary), comment


def test_a_date_beyond_the_calendar_is_shown_as_stored():
    (found,) = read_items([_with(ROWS["java-worker-1"], lut={"N": str(2**62)})]).others
    assert found.summary().startswith("worker metrics of java-worker-1, updated 4.61169e+18 s since 1970")

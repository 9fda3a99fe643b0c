"""Every conditional write of the lease table, against a real moto server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kcl_mp.errors import CheckpointOutcome, DependencyError
from kcl_mp.leases.lease import Lease
from kcl_mp.leases.table import OWNER_INDEX, LeaseTable
from kcl_mp.sequence import SHARD_END, ExtendedSequenceNumber

REFERENCE = Path(__file__).resolve().parents[1] / "fixtures" / "java_kcl_3.1.3_tables.json"


@pytest.fixture
def table(dynamodb, unique_name):
    t = LeaseTable(dynamodb, unique_name)
    assert t.ensure_table() is True
    assert t.ensure_table() is False  # idempotent
    return t


def fresh(key="shardId-000000000000"):
    return Lease(key, checkpoint=ExtendedSequenceNumber("TRIM_HORIZON"), hash_range=(0, 99))


def test_table_shape_matches_the_java_daemons(table, dynamodb):
    desc = dynamodb.describe_table(TableName=table.name)["Table"]
    java = next(iter(json.loads(REFERENCE.read_text())["while_running"].values()))
    assert desc["KeySchema"] == java["KeySchema"]
    attributes = desc["AttributeDefinitions"]
    assert sorted(map(json.dumps, attributes)) == sorted(map(json.dumps, java["AttributeDefinitions"]))
    assert desc["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    (index,) = desc["GlobalSecondaryIndexes"]
    assert index["IndexName"] == OWNER_INDEX and index["KeySchema"] == java["GlobalSecondaryIndexes"][0]["KeySchema"]


def test_create_take_renew_release(table):
    assert table.create_if_absent(fresh()) is True
    assert table.create_if_absent(fresh()) is False
    (lease,) = table.list_leases()
    assert lease.owner is None and lease.counter == 0
    taken = table.take(lease, "w1")
    assert taken.owner == "w1" and taken.counter == 1 and taken.owner_switches_since_checkpoint == 0
    assert table.take(lease, "w2") is None  # stale counter: lost race
    renewed = table.renew(taken, "w1")
    assert renewed.counter == 2
    assert table.renew(taken, "w1") is None  # stale counter
    stolen = table.take(renewed, "w2")
    assert stolen.owner == "w2" and stolen.owner_switches_since_checkpoint == 1
    assert table.renew(renewed, "w1") is None
    assert table.release(stolen.key, "w1") is False
    assert table.release(stolen.key, "w2") is True
    released = table.get(stolen.key)
    assert released.owner is None and released.counter == stolen.counter + 1


def test_checkpoint_is_fenced_by_owner_and_shard_end(table):
    table.create_if_absent(fresh())
    lease = table.take(table.get("shardId-000000000000"), "w1")
    assert table.checkpoint(lease.key, "w1", ExtendedSequenceNumber("42", 3)) is None
    stored = table.get(lease.key)
    assert stored.checkpoint == ExtendedSequenceNumber("42", 3) and stored.counter == lease.counter
    assert table.checkpoint(lease.key, "w2", ExtendedSequenceNumber("43")) == CheckpointOutcome.LEASE_MOVED
    assert table.checkpoint(lease.key, "w1", ExtendedSequenceNumber(SHARD_END)) is None
    assert table.checkpoint(lease.key, "w1", ExtendedSequenceNumber("44")) == CheckpointOutcome.INVALID_STATE
    assert table.checkpoint("shardId-nope", "w1", ExtendedSequenceNumber("1")) == CheckpointOutcome.LEASE_MOVED


def test_writes_preserve_attributes_written_by_java(table, dynamodb):
    java_item = {"leaseKey": {"S": "shardId-000000000007"}, "leaseCounter": {"N": "5"},
                 "leaseOwner": {"S": "java-worker"}, "checkpoint": {"S": "100"},
                 "checkpointSubSequenceNumber": {"N": "0"}, "ownerSwitchesSinceCheckpoint": {"N": "0"},
                 "throughputKBps": {"N": "12.5"}, "startingHashKey": {"S": "0"}, "endingHashKey": {"S": "99"},
                 "childShardIds": {"SS": ["shardId-000000000009"]}}
    dynamodb.put_item(TableName=table.name, Item=java_item)
    lease = table.get("shardId-000000000007")
    taken = table.take(lease, "kcl-mp-1")
    table.checkpoint(taken.key, "kcl-mp-1", ExtendedSequenceNumber("101"))
    table.renew(taken, "kcl-mp-1")
    item = dynamodb.get_item(TableName=table.name, Key={"leaseKey": {"S": "shardId-000000000007"}})["Item"]
    for name in ("throughputKBps", "startingHashKey", "endingHashKey", "childShardIds"):
        assert item[name] == java_item[name], name
    assert item["leaseOwner"] == {"S": "kcl-mp-1"} and item["checkpoint"] == {"S": "101"}
    assert item["ownerSwitchesSinceCheckpoint"] == {"N": "0"} and item["leaseCounter"] == {"N": "7"}


def test_only_a_finished_lease_is_deleted_and_children_are_recorded(table):
    table.create_if_absent(fresh("shardId-000000000010"))
    lease = table.take(table.get("shardId-000000000010"), "w1")
    assert table.delete_finished(lease.key) is False  # still processing
    assert table.add_child_shards(lease.key, ["shardId-000000000012"]) and table.add_child_shards(lease.key, ["shardId-000000000011"])
    assert table.checkpoint(lease.key, "w1", ExtendedSequenceNumber("SHARD_END")) is None
    assert table.get(lease.key).child_shard_ids == ("shardId-000000000011", "shardId-000000000012")
    assert table.delete_finished(lease.key) is True
    assert table.get("shardId-000000000010") is None
    assert table.delete_finished(lease.key) is False and table.add_child_shards(lease.key, ["x"]) is False


def test_graceful_handoff_keeps_the_old_owner_checkpointing_until_it_finishes(table):
    """KCL 3.x handoff: the thief names itself owner and the owner checkpointOwner; the
    owner still renews and checkpoints until it finishes; then only the thief can."""
    table.create_if_absent(fresh())
    held = table.take(fresh(), "A")
    asked = table.handoff_start(held, "B")
    assert asked is not None and asked.owner == "B" and asked.checkpoint_owner == "A"
    assert asked.counter == held.counter  # the counter does not move: A's renewals go on
    assert table.handoff_start(asked, "C") is None  # one handoff at a time
    renewed = table.renew(asked, "A")
    assert renewed is not None and renewed.holder == "A"
    assert table.renew(renewed, "B") is None  # the new owner does not renew before it starts
    assert table.checkpoint(held.key, "A", ExtendedSequenceNumber("42")) is None
    assert table.checkpoint(held.key, "B", ExtendedSequenceNumber("43")) == CheckpointOutcome.LEASE_MOVED
    assert table.handoff_finish(held.key, "A") is True
    after = table.get(held.key)
    assert after.owner == "B" and after.checkpoint_owner is None and after.counter == renewed.counter + 1
    assert after.checkpoint == ExtendedSequenceNumber("42")
    assert table.renew(renewed, "A") is None  # the old owner's next renewal fails: it lost the lease
    assert table.checkpoint(held.key, "A", ExtendedSequenceNumber("44")) == CheckpointOutcome.LEASE_MOVED
    assert table.renew(after, "B") is not None
    assert table.checkpoint(held.key, "B", ExtendedSequenceNumber("45")) is None


def test_handoff_cancel_and_forced_take(table):
    table.create_if_absent(fresh())
    held = table.take(fresh(), "A")
    asked = table.handoff_start(held, "B")
    assert table.release(held.key, "B") is False  # a lease mid-handoff is not released, it is cancelled
    assert table.handoff_cancel(held.key, "B", "A") is True
    back = table.get(held.key)
    assert back.owner == "A" and back.checkpoint_owner is None
    asked = table.handoff_start(back, "B")
    forced = table.take(asked, "B")  # the timeout passed: the thief takes it, the handoff ends
    assert forced.owner == "B" and forced.checkpoint_owner is None
    assert table.renew(asked, "A") is None


JAVA_3_5 = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "java_kcl_3.5_rows.json").read_text())


def test_no_write_alters_a_row_that_is_not_a_lease(table, dynamodb):
    """KCL 3.5's rows, and rows shaped a little like leases (a counter stored as a string, an
    unknown entityType), refuse every write kcl-mp sends, even one aimed at them on purpose."""
    odd = [
        {"leaseKey": {"S": "odd-counter"}, "leaseCounter": {"S": "3"}, "leaseOwner": {"S": "w1"}},
        {"leaseKey": {"S": "odd-type"}, "entityType": {"S": "STREAM"}, "leaseCounter": {"N": "3"},
         "leaseOwner": {"S": "w1"}, "checkpoint": {"S": SHARD_END}},
    ]
    rows = [*JAVA_3_5["rows"], *odd]
    for item in rows:
        dynamodb.put_item(TableName=table.name, Item=item)
    found = table.scan()
    assert found.leases == () and [row.key for row in found.others] == sorted(row["leaseKey"]["S"] for row in rows)
    for item in rows:
        key = item["leaseKey"]["S"]
        assert table.get(key) is None
        aimed = Lease(key, owner="w1", counter=3, checkpoint_owner=None)
        assert table.create_if_absent(Lease(key)) is False
        assert table.take(aimed, "w2") is None
        assert table.renew(aimed, "w1") is None
        assert table.handoff_start(aimed, "w2") is None
        assert table.handoff_finish(key, "w1") is False
        assert table.handoff_cancel(key, "w1", "w2") is False
        assert table.release(key, "w1") is False
        assert table.add_child_shards(key, ["child"]) is False
        assert table.checkpoint(key, "w1", ExtendedSequenceNumber("5")) == CheckpointOutcome.LEASE_MOVED
        assert table.delete_finished(key) is False
    after = dynamodb.scan(TableName=table.name, ConsistentRead=True)["Items"]
    assert sorted(map(json.dumps, after)) == sorted(map(json.dumps, rows))


def test_a_3_5_lease_is_a_lease_and_keeps_its_entity_type(table, dynamodb):
    dynamodb.put_item(TableName=table.name, Item=JAVA_3_5["lease"])
    (lease,) = table.list_leases()
    taken = table.take(lease, "w2")
    assert taken is not None and table.renew(taken, "w2") is not None
    assert table.checkpoint(lease.key, "w2", ExtendedSequenceNumber("5")) is None
    item = dynamodb.get_item(TableName=table.name, Key={"leaseKey": {"S": lease.key}},
                             ConsistentRead=True)["Item"]
    assert item["entityType"] == {"S": "LEASE"} and item["leaseOwner"] == {"S": "w2"}
    assert item["checkpoint"] == {"S": "5"}


def test_a_finished_lease_is_never_taken_nor_asked_for(table):
    """The checkpoint does not move the counter: a view read before the shard end still has
    the right counter, so only the SHARD_END condition refuses the take and the handoff."""
    table.create_if_absent(fresh())
    seen = table.take(fresh(), "A")  # what a thief's scan saw: open, held by A
    assert table.checkpoint(seen.key, "A", ExtendedSequenceNumber(SHARD_END)) is None
    assert table.get(seen.key).counter == seen.counter
    assert table.handoff_start(seen, "B") is None
    assert table.take(seen, "B") is None
    assert table.take(seen.with_(owner=None), "B") is None  # unowned or expired alike
    after = table.get(seen.key)
    assert (after.owner, after.checkpoint_owner, after.counter) == ("A", None, seen.counter)
    # during a handoff the old owner may still finish the shard; the forced take is refused
    table.create_if_absent(fresh("shardId-000000000001"))
    asked = table.handoff_start(table.take(fresh("shardId-000000000001"), "A"), "B")
    assert table.checkpoint(asked.key, "A", ExtendedSequenceNumber(SHARD_END)) is None
    assert table.take(asked, "B") is None
    assert table.get(asked.key).checkpoint_owner == "A"


def test_a_table_of_the_lease_tables_name_with_another_key_is_refused_naming_both_keys(dynamodb, unique_name):
    """A data table named as the application (its key pk): every lease read would fail with
    DynamoDB's 'key element does not match the schema'; kcl-mp says what is wrong instead."""
    dynamodb.create_table(TableName=unique_name, BillingMode="PAY_PER_REQUEST",
                          KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                          AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}])
    with pytest.raises(DependencyError) as refused:
        LeaseTable(dynamodb, unique_name).ensure_table()
    assert str(refused.value).startswith(f"table {unique_name} exists with the key pk HASH, not a lease table's "
                                         "(leaseKey HASH): another table has that name"), refused.value

"""Multi-stream lease items exactly as Java's DynamoDBMultiStreamLeaseSerializer writes them
(tests/fixtures/java_multi_stream_leases.json, from the Java tests), read back by kcl-mp, and
never confused with a single-stream application's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kcl_mp.leases.lease import Lease, not_a_lease
from kcl_mp.leases.multi_stream import StreamIdentifier, choose_epoch, split_key
from kcl_mp.leases.rows import read_items
from kcl_mp.sequence import ExtendedSequenceNumber

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
JAVA = json.loads((FIXTURES / "java_multi_stream_leases.json").read_text())
SINGLE_STREAM_LEASE = json.loads((FIXTURES / "java_kcl_3.5_rows.json").read_text())["lease"]
STREAM = StreamIdentifier.parse(JAVA["identifier"])


@pytest.mark.parametrize("item", JAVA["leases"].values(), ids=list(JAVA["leases"]))
def test_a_java_multi_stream_lease_is_read_and_written_back_unchanged(item: dict[str, Any]) -> None:
    assert not_a_lease(item, streams={"test-stream"}) is None
    lease = Lease.from_item(item)
    assert lease.stream == STREAM == StreamIdentifier("123456789012", "test-stream", 1)
    assert lease.key == STREAM.lease_key(JAVA["shard_id"]) and split_key(lease.key) == (STREAM, JAVA["shard_id"])
    assert {"streamName", "shardId"}.isdisjoint(lease.extra)  # modelled, not carried as unknown attributes
    assert lease.to_item() == item


def test_a_lease_kcl_mp_creates_is_the_item_java_writes() -> None:
    """Java's test lease (createMinimalMultiStreamLease): key, stream, shard, counter 0, TRIM_HORIZON,
    created marked LEASE as Java 3.5's serializer writes every lease (a real 3.5.1 consumer's leases:
    tests/e2e/test_multi_stream_java.py)."""
    lease = Lease(STREAM.lease_key(JAVA["shard_id"]), checkpoint=ExtendedSequenceNumber("TRIM_HORIZON"), stream=STREAM)
    (no_entity_type, entity_type_lease) = JAVA["leases"].values()
    assert lease.to_item() == no_entity_type and lease.new_item() == entity_type_lease


@pytest.mark.parametrize("item", JAVA["not_leases"].values(), ids=list(JAVA["not_leases"]))
def test_rows_java_does_not_read_as_leases_are_not_leases(item: dict[str, Any]) -> None:
    assert not_a_lease(item, streams={"test-stream"}) == f"entityType {item['entityType']['S']}"


def test_single_and_multi_stream_leases_never_see_each_other() -> None:
    multi = list(JAVA["leases"].values())
    scan = read_items([SINGLE_STREAM_LEASE, *multi], streams={"test-stream"})
    assert [lease.key for lease in scan.leases] == [JAVA["identifier"] + ":shardId-000000000000"] * 2
    assert [row.why for row in scan.others] == [
        "leaseKey 'shardId-000000000000' is a single-stream lease's (this application reads many streams)"]
    scan = read_items([SINGLE_STREAM_LEASE, *multi])  # a single-stream application: today's reading
    assert [lease.key for lease in scan.leases] == ["shardId-000000000000"] and scan.leases[0].stream is None
    assert {row.why for row in scan.others} == {
        f"leaseKey {JAVA['identifier'] + ':shardId-000000000000'!r} is not a shard id (shardId- and 12 digits)"}


def _with(item: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {k: v for k, v in {**item, **changes}.items() if v is not None}


MINIMAL = next(iter(JAVA["leases"].values()))
BROKEN = [
    ("no streamName", _with(MINIMAL, streamName=None), "no streamName (Java's multi-stream serializer writes it)"),
    ("no shardId", _with(MINIMAL, shardId=None), "no shardId (Java's multi-stream serializer writes it)"),
    ("streamName of another stream", _with(MINIMAL, streamName={"S": "123456789012:other:1"}),
     "streamName '123456789012:other:1' is not the stream of leaseKey '123456789012:test-stream:1:shardId-000000000000'"),
    ("shardId of another shard", _with(MINIMAL, shardId={"S": "shardId-000000000009"}),
     "shardId 'shardId-000000000009' is not the shard of leaseKey '123456789012:test-stream:1:shardId-000000000000'"),
    ("epoch 0: Java refuses it", _with(MINIMAL, leaseKey={"S": "123456789012:test-stream:0:shardId-000000000000"}),
     "leaseKey '123456789012:test-stream:0:shardId-000000000000' is not a multi-stream lease key "
     "(account:stream:epoch:shardId-...)"),
    ("no shard id after the stream", _with(MINIMAL, leaseKey={"S": "123456789012:test-stream:1:bogus"}),
     "leaseKey '123456789012:test-stream:1:bogus' is not a multi-stream lease key (account:stream:epoch:shardId-...)"),
]


@pytest.mark.parametrize("item,why", [case[1:] for case in BROKEN], ids=[case[0] for case in BROKEN])
def test_a_multi_stream_row_kcl_mp_cannot_read_exactly_is_left_alone(item: dict[str, Any], why: str) -> None:
    assert not_a_lease(item, streams={"test-stream"}) == why


T = 1700000000000
KEYS = [f"123456789012:orders:{T}:shardId-000000000000", f"123456789012:orders:{T + 7}:shardId-000000000001",
        f"210987654321:orders:{T + 9}:shardId-000000000000", "shardId-000000000000", "Leader"]
# id, stream (account, name), creationEpoch key, creation time -> epoch, where from, warned
EPOCHS = [
    ("the leases' epoch first (the newest of two)", ("123456789012", "orders"), None, T + 7, T + 7, "its leases", False),
    ("another account's stream of that name is another stream", ("210987654321", "orders"), None, None, T + 9,
     "its leases", False),
    ("the key when no lease", ("123456789012", "new"), 5, T, 5, "stream.new.creationEpoch", False),
    ("the creation time last", ("123456789012", "new"), None, T, T, "its creation time", False),
    ("a key the leases contradict is not used", ("123456789012", "orders"), 5, T, T + 7, "its leases", True),
    ("a stream created after its leases' epoch was recreated", ("123456789012", "orders"), None, T + 60000, T + 7,
     "its leases", True),
    ("an opaque epoch says nothing of the creation time", ("1", "a"), None, T, 1, "its leases", False),
]


@pytest.mark.parametrize("stream,configured,created,epoch,source,warned", [case[1:] for case in EPOCHS],
                         ids=[case[0] for case in EPOCHS])
def test_the_creation_epoch(stream: tuple[str, str], configured: int | None, created: int | None, epoch: int,
                            source: str, warned: bool) -> None:
    choice = choose_epoch(*stream, [*KEYS, "1:a:1:shardId-000000000000"], configured, created)
    assert choice is not None and (choice.epoch, choice.source, choice.warning is not None) == (epoch, source, warned)


def test_a_stream_not_in_the_list_is_never_adopted() -> None:
    """Java adopts every stream it finds in the table at start-up (KCL#1112); kcl-mp leaves their leases alone."""
    scan = read_items(JAVA["leases"].values(), streams={"orders", "payments"})
    assert scan.leases == () and {row.why for row in scan.others} == {
        "a lease of stream 'test-stream', which this application does not read"}

"""A multi-stream application's leases in a real lease table (moto on loopback): written as Java's
multi-stream serializer writes them, taken, renewed and checkpointed by key, and read back apart
from a single-stream application's."""

from __future__ import annotations

import json
from pathlib import Path

from kcl_mp.leases.lease import Lease
from kcl_mp.leases.multi_stream import StreamIdentifier
from kcl_mp.leases.table import LeaseTable
from kcl_mp.sequence import ExtendedSequenceNumber

JAVA = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "java_multi_stream_leases.json").read_text())
ORDERS = StreamIdentifier("123456789012", "orders", 1700000000000)


def test_multi_stream_leases_through_the_table(dynamodb, unique_name) -> None:
    table = LeaseTable(dynamodb, unique_name, streams=("test-stream", "orders"))
    table.ensure_table()
    java_item = next(iter(JAVA["leases"].values()))
    dynamodb.put_item(TableName=unique_name, Item=java_item)  # a Java worker's lease
    ours = Lease(ORDERS.lease_key("shardId-000000000001"), checkpoint=ExtendedSequenceNumber("TRIM_HORIZON"),
                 stream=ORDERS)
    assert table.create_if_absent(ours) is True
    single = Lease("shardId-000000000001", checkpoint=ExtendedSequenceNumber("LATEST"))
    assert LeaseTable(dynamodb, unique_name).create_if_absent(single) is True  # a single-stream application's

    scan = table.scan()
    assert {lease.key: lease.stream for lease in scan.leases} == {
        java_item["leaseKey"]["S"]: StreamIdentifier.parse(JAVA["identifier"]), ours.key: ORDERS}
    assert [row.key for row in scan.others] == ["shardId-000000000001"]
    assert [lease.key for lease in LeaseTable(dynamodb, unique_name).list_leases()] == ["shardId-000000000001"]

    taken = table.take(next(lease for lease in scan.leases if lease.key == java_item["leaseKey"]["S"]), "w1")
    assert taken is not None and table.renew(taken, "w1") is not None
    assert table.checkpoint(taken.key, "w1", ExtendedSequenceNumber("49590338271490256608559692538361571095921575"
                                                                    "989136588802")) is None
    stored = dynamodb.get_item(TableName=unique_name, Key={"leaseKey": java_item["leaseKey"]})["Item"]
    assert (stored["streamName"], stored["shardId"]) == (java_item["streamName"], java_item["shardId"])
    assert stored["leaseOwner"] == {"S": "w1"} and stored["leaseCounter"] == {"N": "2"}
    assert table.get(taken.key) == Lease.from_item(stored) and LeaseTable(dynamodb, unique_name).get(taken.key) is None

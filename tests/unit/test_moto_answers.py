"""The embedded emulator's answers are written as moto writes them: the same requests answered
by moto's own serializer (in a process of its own) and with the fast paths
(``embedded.attribute_values``, ``embedded.plain_members``) give the same bodies, for every
DynamoDB attribute type, nested ones included, and the Kinesis calls kcl-mp makes."""

from __future__ import annotations

import base64
import json
import subprocess
import sys

import pytest

from kcl_mp.embedded import attribute_values

BINARY_BYTES = b"\x00\x01bytes\xff"
BINARY = base64.b64encode(BINARY_BYTES).decode()
ITEM = {
    "pk": {"S": "item-1"}, "n": {"N": "42.5"}, "empty": {"S": ""}, "b": {"B": BINARY},
    "ss": {"SS": ["a", "b"]}, "ns": {"NS": ["1", "2.5"]}, "bs": {"BS": [BINARY, base64.b64encode(b"x").decode()]},
    "null": {"NULL": True}, "yes": {"BOOL": True}, "no": {"BOOL": False},
    "m": {"M": {"s": {"S": "x"}, "l": {"L": [{"N": "1"}, {"B": BINARY}, {"M": {}}]}, "none": {"NULL": True}}},
    "l": {"L": [{"S": "y"}, {"L": []}, {"SS": ["z"]}, {"BOOL": False}]},
    "em": {"M": {}}, "el": {"L": []},
}
DYNAMODB = [
    ("CreateTable", {"TableName": "t", "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
                     "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}],
                     "BillingMode": "PAY_PER_REQUEST"}),
    ("PutItem", {"TableName": "t", "Item": ITEM, "ReturnValues": "NONE"}),
    ("PutItem", {"TableName": "t", "Item": {**ITEM, "pk": {"S": "item-2"}}}),
    ("PutItem", {"TableName": "t", "Item": {"pk": {"S": "item-2"}, "n": {"N": "1"}}, "ReturnValues": "ALL_OLD"}),
    ("GetItem", {"TableName": "t", "Key": {"pk": {"S": "item-1"}}, "ConsistentRead": True}),
    ("GetItem", {"TableName": "t", "Key": {"pk": {"S": "absent"}}}),
    ("Scan", {"TableName": "t", "ConsistentRead": True, "ReturnConsumedCapacity": "TOTAL"}),
    ("Scan", {"TableName": "t", "Limit": 1}),
    ("Query", {"TableName": "t", "KeyConditionExpression": "pk = :k", "ExpressionAttributeValues": {":k": {"S": "item-1"}}}),
    ("UpdateItem", {"TableName": "t", "Key": {"pk": {"S": "item-1"}}, "UpdateExpression": "SET n = :n, m.s = :s",
                    "ExpressionAttributeValues": {":n": {"N": "7"}, ":s": {"B": BINARY}}, "ReturnValues": "ALL_NEW"}),
    ("UpdateItem", {"TableName": "t", "Key": {"pk": {"S": "item-1"}}, "UpdateExpression": "SET n = :n",
                    "ConditionExpression": "n = :old", "ExpressionAttributeValues": {":n": {"N": "8"}, ":old": {"N": "0"}},
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}),
    ("BatchGetItem", {"RequestItems": {"t": {"Keys": [{"pk": {"S": "item-1"}}, {"pk": {"S": "item-2"}}]}}}),
    ("DeleteItem", {"TableName": "t", "Key": {"pk": {"S": "item-1"}}, "ReturnValues": "ALL_OLD"}),
]
KINESIS = [
    ("CreateStream", {"StreamName": "s", "ShardCount": 2}),
    ("PutRecord", {"StreamName": "s", "Data": BINARY, "PartitionKey": "a"}),
    ("PutRecords", {"StreamName": "s", "Records": [
        {"Data": BINARY, "PartitionKey": "b"}, {"Data": "", "PartitionKey": "c", "ExplicitHashKey": "1"},
        {"Data": base64.b64encode(b"x" * 1000).decode(), "PartitionKey": "d"}]}),
    ("DescribeStream", {"StreamName": "s"}),
    ("DescribeStreamSummary", {"StreamName": "s"}),
    ("ListShards", {"StreamName": "s"}),
    ("ListStreams", {}),
    ("GetShardIterator", {"StreamName": "s", "ShardId": "shardId-000000000000", "ShardIteratorType": "TRIM_HORIZON"}),
    ("GetRecords", {"ShardIterator": "$iterator", "Limit": 10}),
    ("GetShardIterator", {"StreamName": "s", "ShardId": "shardId-000000000001", "ShardIteratorType": "TRIM_HORIZON"}),
    ("GetRecords", {"ShardIterator": "$iterator"}),
    ("GetShardIterator", {"StreamName": "s", "ShardId": "shardId-000000000009", "ShardIteratorType": "LATEST"}),
]
SHARD_0 = {"StreamName": "r", "ShardId": "shardId-000000000000"}
KINESIS_READS = [  # one shard read page by page from each kind of iterator, to its tip and past it
    ("CreateStream", {"StreamName": "r", "ShardCount": 2}),
    ("PutRecords", {"StreamName": "r", "Records": [
        {"Data": base64.b64encode(b"%d" % n).decode(), "PartitionKey": f"k{n}", "ExplicitHashKey": "1"}
        for n in range(20)]}),
    ("GetShardIterator", {**SHARD_0, "ShardIteratorType": "TRIM_HORIZON"}),
    ("GetRecords", {"ShardIterator": "$iterator", "Limit": 3}),
    ("GetRecords", {"ShardIterator": "$iterator", "Limit": 3}),
    ("GetRecords", {"ShardIterator": "$iterator"}),
    ("GetRecords", {"ShardIterator": "$iterator"}),
    ("GetShardIterator", {**SHARD_0, "ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "StartingSequenceNumber": "7"}),
    ("GetRecords", {"ShardIterator": "$iterator", "Limit": 5}),
    ("GetShardIterator", {**SHARD_0, "ShardIteratorType": "AT_SEQUENCE_NUMBER", "StartingSequenceNumber": "19"}),
    ("GetRecords", {"ShardIterator": "$iterator", "Limit": 5}),
    ("GetShardIterator", {**SHARD_0, "ShardIteratorType": "LATEST"}),
    ("PutRecord", {"StreamName": "r", "Data": BINARY, "PartitionKey": "late", "ExplicitHashKey": "1"}),
    ("GetRecords", {"ShardIterator": "$iterator"}),
    ("GetShardIterator", {"StreamName": "r", "ShardId": "shardId-000000000001", "ShardIteratorType": "TRIM_HORIZON"}),
    ("GetRecords", {"ShardIterator": "$iterator"}),
]
SCRIPT = """
import json, sys
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.test import Client
if sys.argv[1] == "fast":
    from kcl_mp.embedded import attribute_values, plain_members, shard_records
    attribute_values.install()
    plain_members.install()
    shard_records.install()
client = Client(DomainDispatcherApplication(create_backend_app))
target, content, service = {"dynamodb": ("DynamoDB_20120810.", "1.0", "dynamodb"),
                            "kinesis": ("Kinesis_20131202.", "1.1", "kinesis")}[sys.argv[2]]
out, iterator = [], None
for operation, body in json.loads(sys.stdin.read()):
    body = {k: iterator if v == "$iterator" else v for k, v in body.items()}
    answer = client.post("/", data=json.dumps(body), headers={
        "X-Amz-Target": target + operation, "Content-Type": "application/x-amz-json-" + content,
        "Host": service + ".us-east-1.amazonaws.com",
        "Authorization": "AWS4-HMAC-SHA256 Credential=test/20261127/us-east-1/" + service + "/aws4_request, "
                         "SignedHeaders=host, Signature=x"})
    text = answer.get_data(as_text=True)
    if answer.status_code == 200:
        iterator = json.loads(text).get("ShardIterator") or json.loads(text).get("NextShardIterator") or iterator
    out.append([operation, answer.status_code, text])
print(json.dumps(out))
"""


def answers(mode: str, service: str, requests: list) -> list[list]:
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode, service], input=json.dumps(requests), capture_output=True,
                          text=True, timeout=120, env={"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                                                       "AWS_DEFAULT_REGION": "us-east-1", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def timeless(value):
    """An answer without its times (CreationDateTime, timestamps and the like differ from run to
    run) nor its shard iterators (they hold a time), nor MillisBehindLatest (the time between
    two records' puts)."""
    if isinstance(value, dict):
        return {k: timeless(v) for k, v in value.items()
                if "DateTime" not in k and "Timestamp" not in k and "ShardIterator" not in k
                and k != "MillisBehindLatest"}
    return [timeless(v) for v in value] if isinstance(value, list) else value


def test_every_attribute_type_is_written_as_moto_writes_it():
    moto, fast = answers("moto", "dynamodb", DYNAMODB), answers("fast", "dynamodb", DYNAMODB)
    assert [a[:2] for a in moto] == [[operation, 200] for operation, _ in DYNAMODB[:10]] + [
        ["UpdateItem", 400], ["BatchGetItem", 200], ["DeleteItem", 200]], moto
    for (operation, _, theirs), (_, _, ours) in zip(moto, fast):
        assert timeless(json.loads(ours)) == timeless(json.loads(theirs)), operation
    scanned = json.loads(fast[6][2])["Items"]
    assert {item["pk"]["S"] for item in scanned} == {"item-1", "item-2"}
    assert next(i for i in scanned if i["pk"]["S"] == "item-1")["m"]["M"]["l"]["L"][1] == {"B": BINARY}


def test_kinesis_answers_are_written_as_moto_writes_them():
    moto, fast = answers("moto", "kinesis", KINESIS), answers("fast", "kinesis", KINESIS)
    assert [a[:2] for a in moto] == [[operation, 200] for operation, _ in KINESIS[:-1]] + [["GetShardIterator", 400]]
    for (operation, _, theirs), (_, _, ours) in zip(moto, fast):
        assert timeless(json.loads(ours)) == timeless(json.loads(theirs)), operation
    records = [r for operation, _, text in fast if operation == "GetRecords" for r in json.loads(text)["Records"]]
    assert sorted(base64.b64decode(r["Data"]) for r in records) == sorted(
        [b"", b"x" * 1000, b"\x00\x01bytes\xff", b"\x00\x01bytes\xff"]), records
    assert all(isinstance(r["ApproximateArrivalTimestamp"], float) for r in records)


def test_a_shard_read_by_key_reads_as_moto_scans_it():
    moto, fast = answers("moto", "kinesis", KINESIS_READS), answers("fast", "kinesis", KINESIS_READS)
    assert [a[:2] for a in moto] == [[operation, 200] for operation, _ in KINESIS_READS]
    for (operation, _, theirs), (_, _, ours) in zip(moto, fast):
        assert timeless(json.loads(ours)) == timeless(json.loads(theirs)), operation
    pages = [[base64.b64decode(r["Data"]) for r in json.loads(text)["Records"]]
             for operation, _, text in fast if operation == "GetRecords"]
    assert pages == [[b"0", b"1", b"2"], [b"3", b"4", b"5"], [b"%d" % n for n in range(6, 20)], [],
                     [b"7", b"8", b"9", b"10", b"11"], [b"18", b"19"], [BINARY_BYTES], []]
    behind = [json.loads(text)["MillisBehindLatest"] for operation, _, text in fast if operation == "GetRecords"]
    assert all(isinstance(ms, int) and ms >= 0 for ms in behind) and behind[2:4] == [0, 0], behind  # 0 at the tip


def test_a_value_moto_did_not_make_plain_is_left_to_moto():
    class Opaque:
        pass

    assert attribute_values.written({"S": "x", "N": 3}, lambda b: "") == {"S": "x", "N": "3"}
    with pytest.raises(attribute_values._NotPlain):  # a value that is not a dict goes to moto's own walk
        attribute_values.written({"M": {"k": Opaque()}}, lambda b: "")

"""Reading the embedded emulator's DynamoDB Streams (kcl_mp.embedded.dynamodb_streams) as a
consumer does, and steering it through its admin path: shared by the emulator's own tests, the
end-to-end tests and the Java adapter's fleet."""

from __future__ import annotations

import json
import urllib.request

from kcl_mp.embedded.dynamodb_streams import ADMIN_PATH


def admin(url: str, **body):
    """POSTs an admin action to the emulator at ``url``; its answer."""
    request = urllib.request.Request(url + ADMIN_PATH, json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())


def make_table(dynamodb, name: str) -> str:
    table = dynamodb.create_table(
        TableName=name, BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"})
    return table["TableDescription"]["LatestStreamArn"]


def shards(streams, arn: str, **extra) -> list[dict]:
    out, start = [], None
    while True:
        page = streams.describe_stream(StreamArn=arn, **extra, **({"ExclusiveStartShardId": start} if start else {}))
        out += page["StreamDescription"]["Shards"]
        start = page["StreamDescription"].get("LastEvaluatedShardId")
        if not start:
            return out


def drain(streams, arn: str, shard_id: str) -> tuple[list[dict], bool]:
    """Every record of one shard from TRIM_HORIZON; whether it ended (no next iterator)."""
    iterator = streams.get_shard_iterator(StreamArn=arn, ShardId=shard_id,
                                          ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
    records: list[dict] = []
    for _ in range(50):
        page = streams.get_records(ShardIterator=iterator)
        records += page["Records"]
        iterator = page.get("NextShardIterator")
        if iterator is None:
            return records, True
        if not page["Records"]:
            return records, False
    raise AssertionError("a shard that never stops answering records")

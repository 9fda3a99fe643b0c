"""The embedded emulator's DynamoDB Streams (kcl_mp.embedded.dynamodb_streams) through boto3,
as a consumer sees it: lineage, rollover and shard end, paging, expiry, trimming, throttling and
the service's error codes, fed by real writes to moto's tables."""

from __future__ import annotations

import time

import pytest
from botocore.exceptions import ClientError

from ..support.dynamodb_streams import drain, make_table, shards

pytestmark = pytest.mark.integration


def code(error: ClientError) -> str:
    return error.response["Error"]["Code"]


def test_records_are_the_services_and_one_items_changes_follow_its_lineage(dynamodb, streams, steer, unique_name):
    steer(action="configure", shards=4)  # for the streams created from now on
    table = unique_name
    arn = make_table(dynamodb, table)
    for round_ in range(3):
        for n in range(20):
            dynamodb.put_item(TableName=table, Item={"pk": {"S": f"k{n}"}, "v": {"N": str(round_)}})
        steer(action="rollover", table=table) if round_ == 0 else steer(action="split", table=table)
    dynamodb.delete_item(TableName=table, Key={"pk": {"S": "k0"}})
    steer(action="ttl_delete", table=table, keys={"pk": {"S": "k1"}})
    dynamodb.delete_item(TableName=table, Key={"pk": {"S": "k1"}})

    tree = shards(streams, arn, Limit=3)
    ids = [s["ShardId"] for s in tree]
    assert len(tree) == 4 + 4 + 8 + 16 and len(set(ids)) == len(ids)
    roots = [s for s in tree if "ParentShardId" not in s]
    assert len(roots) == 4 and all("EndingSequenceNumber" in s["SequenceNumberRange"] for s in roots)
    children = streams.describe_stream(StreamArn=arn, ShardFilter={"Type": "CHILD_SHARDS", "ShardId": tree[5]["ShardId"]})
    assert [s["ParentShardId"] for s in children["StreamDescription"]["Shards"]] == [tree[5]["ShardId"]] * 2

    per_key: dict[str, list[str]] = {}
    by_id = {s["ShardId"]: s for s in tree}

    def depth(shard_id: str) -> int:
        parent = by_id[shard_id].get("ParentShardId")
        return 0 if parent is None else 1 + depth(parent)

    for shard in sorted(tree, key=lambda s: depth(s["ShardId"])):  # parents before children
        records, ended = drain(streams, arn, shard["ShardId"])
        assert ended == ("EndingSequenceNumber" in shard["SequenceNumberRange"])
        for record in records:
            assert record["eventVersion"] == "1.1" and record["awsRegion"] == "us-east-1"
            assert record["eventSource"] == "aws:dynamodb"
            per_key.setdefault(record["dynamodb"]["Keys"]["pk"]["S"], []).append(
                record["eventName"] + ("/ttl" if "userIdentity" in record else ""))
    assert per_key["k5"] == ["INSERT", "MODIFY", "MODIFY"]
    assert per_key["k0"] == ["INSERT", "MODIFY", "MODIFY", "REMOVE"]
    assert per_key["k1"] == ["INSERT", "MODIFY", "MODIFY", "REMOVE/ttl"]


def test_paging_over_300_shards_and_the_limits(dynamodb, streams, steer, unique_name):
    steer(action="configure", shards=300)
    arn = make_table(dynamodb, unique_name)
    assert len(shards(streams, arn, Limit=100)) == 300
    with pytest.raises(ClientError) as e:
        streams.describe_stream(StreamArn=arn, Limit=101)
    assert code(e.value) == "ValidationException"
    first = shards(streams, arn)[0]["ShardId"]
    for kind, why in (("AT_TIMESTAMP", "ValidationException"),):
        with pytest.raises(ClientError) as e:
            streams.get_shard_iterator(StreamArn=arn, ShardId=first, ShardIteratorType=kind)
        assert code(e.value) == why
    with pytest.raises(ClientError) as e:
        streams.get_shard_iterator(StreamArn=arn, ShardId="shardId-00000000000000000000-00000000",
                                   ShardIteratorType="TRIM_HORIZON")
    assert code(e.value) == "ResourceNotFoundException"
    with pytest.raises(ClientError) as e:
        streams.describe_stream(StreamArn=arn.replace("/stream/", "/stream/x"))
    assert code(e.value) == "ResourceNotFoundException"


def test_expiry_trimming_and_a_third_reader(dynamodb, streams, steer, unique_name):
    arn = make_table(dynamodb, unique_name)
    for n in range(5):
        dynamodb.put_item(TableName=unique_name, Item={"pk": {"S": f"k{n}"}})
    shard = shards(streams, arn)[0]["ShardId"]

    steer(action="configure", iterator_ttl_s=0.5, max_readers=100)
    iterator = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON")
    time.sleep(0.7)
    with pytest.raises(ClientError) as e:
        streams.get_records(ShardIterator=iterator["ShardIterator"])
    assert code(e.value) == "ExpiredIteratorException"
    steer(action="configure", iterator_ttl_s=900.0)

    records, _ = drain(streams, arn, shard)
    first = records[0]["dynamodb"]["SequenceNumber"]
    stale = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="AT_SEQUENCE_NUMBER",
                                       SequenceNumber=first)["ShardIterator"]
    steer(action="trim", table=unique_name, older_than_s=-10)  # every record so far
    for call in (lambda: streams.get_records(ShardIterator=stale),
                 lambda: streams.get_shard_iterator(StreamArn=arn, ShardId=shard,
                                                    ShardIteratorType="AFTER_SEQUENCE_NUMBER", SequenceNumber=first)):
        with pytest.raises(ClientError) as e:
            call()
        assert code(e.value) == "TrimmedDataAccessException"
    assert drain(streams, arn, shard) == ([], False)

    steer(action="configure", max_readers=2, reader_window_s=60.0)  # a loaded machine is slow between calls
    arn = make_table(dynamodb, unique_name + "-readers")
    shard = shards(streams, arn)[0]["ShardId"]
    readers = [streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="LATEST")["ShardIterator"]
               for _ in range(3)]
    streams.get_records(ShardIterator=readers[0])
    streams.get_records(ShardIterator=readers[1])
    with pytest.raises(ClientError) as e:
        streams.get_records(ShardIterator=readers[2])
    assert code(e.value) == "LimitExceededException"


def test_a_disabled_stream_ends_its_shards(dynamodb, streams, steer, unique_name):
    arn = make_table(dynamodb, unique_name)
    dynamodb.put_item(TableName=unique_name, Item={"pk": {"S": "a"}})
    dynamodb.update_table(TableName=unique_name, StreamSpecification={"StreamEnabled": False})
    description = streams.describe_stream(StreamArn=arn)["StreamDescription"]
    assert description["StreamStatus"] == "DISABLED"
    records, ended = drain(streams, arn, description["Shards"][0]["ShardId"])
    assert len(records) == 1 and ended

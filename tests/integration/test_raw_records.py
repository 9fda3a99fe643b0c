"""The shard worker's Kinesis client (``aws.clients.client(..., raw_records=True)``: GetRecords
and SubscribeToShard events decoded by orjson, unwalked) gives the data path exactly what
botocore's own parsing gives, and fails exactly as botocore does.

Each case reads the same records twice, through the client botocore parses (bytes and
datetimes) and through the raw one, both as ``client`` configures them (ClientLimits), and
compares what reaches a processor: the processRecords lines (data, partition key,
sequence and sub-sequence numbers, arrival time; KPL aggregates de-aggregated),
MillisBehindLatest, and ChildShards at a shard's end (kinesis-mock closes shards; moto
never does). Errors come from a real server too: the throttling proxy in front of moto, a
stub answering ExpiredIteratorException as Kinesis does.
"""

from __future__ import annotations

import time

import boto3
import pytest
from botocore.exceptions import ClientError

from kcl_mp.aws.clients import client
from kcl_mp.aws.errors import translate
from kcl_mp.config import ClientSettings, CredentialProvider
from kcl_mp.devtools.producer import produce
from kcl_mp.embedded import ensure_stream
from kcl_mp.errors import ThrottledError
from kcl_mp.multilang.wire import make_batch
from kcl_mp.retrieval.deaggregate import user_records

from ..support.aws_stub import AwsStub
from ..support.kinesis_mock import split_in_half
from ..support.throttle_proxy import ThrottleProxy

pytestmark = pytest.mark.integration


def both(url: str) -> dict[str, object]:
    settings = ClientSettings("us-east-1", url, (CredentialProvider("EnvironmentVariableCredentialsProvider"),))
    return {"botocore": client("kinesis", settings), "raw": client("kinesis", settings, raw_records=True)}


def read_shard(kinesis, stream: str, shard: str, *, pages: int = 50) -> tuple[list[bytes], list, dict | None]:
    """processRecords lines, MillisBehindLatest of each page, and the last page (None while open)."""
    iterator = kinesis.get_shard_iterator(StreamName=stream, ShardId=shard,
                                          ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
    lines, behind = [], []
    for _ in range(pages):
        page = kinesis.get_records(ShardIterator=iterator, Limit=25)
        lines.append(make_batch(user_records(page["Records"]), page.get("MillisBehindLatest")).line)
        behind.append(page.get("MillisBehindLatest"))
        iterator = page.get("NextShardIterator")
        if iterator is None:
            return lines, behind, page
        if not page["Records"] and page.get("MillisBehindLatest") == 0:
            return lines, behind, None
    raise AssertionError(f"{shard} not read to its end in {pages} pages")


def test_get_records_raw_gives_the_lines_botocore_gives(moto_url, unique_name):
    kinesis = boto3.client("kinesis", endpoint_url=moto_url, region_name="us-east-1")
    ensure_stream(kinesis, unique_name, 2)
    puts = produce(kinesis, unique_name, 120, aggregated_share=0.3, seed=7)
    kinesis.put_record(StreamName=unique_name, Data=b"\x00\xff" * 600, PartitionKey="binary-1kb")
    reads = {name: [read_shard(c, unique_name, shard) for shard in ("shardId-000000000000", "shardId-000000000001")]
             for name, c in both(moto_url).items()}
    assert reads["raw"] == reads["botocore"]
    delivered = sum(line.count(b'"action":"record"') for lines, _, _ in reads["raw"] for line in lines)
    assert delivered == len(puts) + 1  # every user record, the aggregated ones de-aggregated


def test_shard_end_gives_the_same_child_shards(kinesis_mock_url, unique_name):
    kinesis = boto3.client("kinesis", endpoint_url=kinesis_mock_url, region_name="us-east-1")
    ensure_stream(kinesis, unique_name, 1)
    produce(kinesis, unique_name, 30, aggregated_share=0.2, seed=3)
    split_in_half(kinesis, unique_name, kinesis.list_shards(StreamName=unique_name)["Shards"][0])
    produce(kinesis, unique_name, 10, aggregated_share=0.0, seed=4)
    reads = {name: read_shard(c, unique_name, "shardId-000000000000") for name, c in both(kinesis_mock_url).items()}
    lines, behind, last = reads["raw"]
    assert last is not None and len(last["ChildShards"]) == 2  # the parent was read to its end
    assert (lines, behind, last["ChildShards"]) == (reads["botocore"][0], reads["botocore"][1],
                                                    reads["botocore"][2]["ChildShards"])
    assert sum(line.count(b'"action":"record"') for line in lines) >= 30


def subscribed_lines(kinesis, arn: str, shard: str, records: int) -> list[bytes]:
    """processRecords lines from one subscription at TRIM_HORIZON until ``records`` arrived."""
    stream = kinesis.subscribe_to_shard(ConsumerARN=arn, ShardId=shard,
                                        StartingPosition={"Type": "TRIM_HORIZON"})["EventStream"]
    lines, seen, deadline = [], 0, time.monotonic() + 30
    try:
        for event in stream:
            body = event.get("SubscribeToShardEvent")
            if body and body["Records"]:
                # MillisBehindLatest left out: the two subscriptions run seconds apart
                lines.append(make_batch(user_records(body["Records"]), None).line)
                seen += lines[-1].count(b'"action":"record"')
            if seen >= records or time.monotonic() > deadline:
                return lines
    finally:
        stream.close()
    return lines


def test_fan_out_events_raw_give_the_lines_botocore_gives(efo_proxy, unique_name):
    kinesis = boto3.client("kinesis", endpoint_url=efo_proxy.url, region_name="us-east-1")
    ensure_stream(kinesis, unique_name, 1)
    puts = produce(kinesis, unique_name, 40, aggregated_share=0.3, seed=5)
    stream_arn = kinesis.describe_stream_summary(StreamName=unique_name)["StreamDescriptionSummary"]["StreamARN"]
    arn = kinesis.register_stream_consumer(StreamARN=stream_arn, ConsumerName=unique_name)["Consumer"]["ConsumerARN"]
    deadline = time.monotonic() + 30
    while kinesis.describe_stream_consumer(ConsumerARN=arn)["ConsumerDescription"]["ConsumerStatus"] != "ACTIVE":
        assert time.monotonic() < deadline, "consumer not ACTIVE"
        time.sleep(0.2)
    reads = {}
    for name, c in both(efo_proxy.url).items():
        if reads:
            time.sleep(5.2)  # one subscription per shard and consumer every 5 s
        reads[name] = b"".join(subscribed_lines(c, arn, "shardId-000000000000", len(puts)))
    assert reads["raw"] == reads["botocore"]
    assert reads["raw"].count(b'"action":"record"') == len(puts)


def test_a_throttled_get_records_is_retried_and_translated_as_before(moto_url, unique_name):
    kinesis = boto3.client("kinesis", endpoint_url=moto_url, region_name="us-east-1")
    ensure_stream(kinesis, unique_name, 1)
    iterator = kinesis.get_shard_iterator(StreamName=unique_name, ShardId="shardId-000000000000",
                                          ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
    proxy = ThrottleProxy(moto_url, "kinesis", seed=1, share=1.0, max_delay_s=0.05)
    try:
        failures = {}
        for name, c in both(proxy.url).items():
            with pytest.raises(ClientError) as caught:
                c.get_records(ShardIterator=iterator)
            failures[name] = caught.value
    finally:
        proxy.stop()
    raw, plain = failures["raw"], failures["botocore"]
    assert raw.response["Error"] == plain.response["Error"]
    assert raw.response["ResponseMetadata"]["RetryAttempts"] == plain.response["ResponseMetadata"]["RetryAttempts"] == 3
    error = translate(raw, "GetRecords on shardId-000000000000")
    assert isinstance(error, ThrottledError) and error.code == "ProvisionedThroughputExceededException"
    assert proxy.counts["throttled:GetRecords"] == 8  # four tries each (ClientLimits.total_attempts)


def test_an_expired_iterator_fails_as_before():
    stub = AwsStub(lambda n, target: "ExpiredIteratorException")
    try:
        failures = {}
        for name, c in both(stub.url).items():
            with pytest.raises(ClientError) as caught:
                c.get_records(ShardIterator="AAAA")
            failures[name] = caught.value
    finally:
        stub.stop()
    raw, plain = failures["raw"], failures["botocore"]
    assert raw.response["Error"] == plain.response["Error"]
    assert raw.response["Error"]["Code"] == "ExpiredIteratorException"
    assert raw.response["ResponseMetadata"]["RetryAttempts"] == 0  # not retried: the fetcher gets a new iterator
    error = translate(raw, "GetRecords on shardId-000000000000")
    assert error.retriable and error.code == "ExpiredIteratorException"

"""DynamoDB Streams behind the stream seam (kcl_mp.retrieval.dynamodb_stream), against the
embedded emulator: listing over 300 shards, children at a shard's end, the records a processor
gets, iterator expiry, trimming past the checkpoint (skipped, or retried under the user's key),
a throttled third reader, and a shard the stream no longer has."""

from __future__ import annotations

import base64
import json
import logging
import random
import time

import boto3
import pytest

from kcl_mp.aws.clients import client as aws_client
from kcl_mp.backoff import Backoff
from kcl_mp.config import ClientSettings, CredentialProvider, InitialPosition, RetrievalSettings, load_config
from kcl_mp.config.settings import DynamoDBStreamsSettings
from kcl_mp.errors import ThrottledError
from kcl_mp.leases.table import LeaseTable
from kcl_mp.logs import ShardLog
from kcl_mp.multilang.wire import make_batch
from kcl_mp.retrieval.dynamodb_record import adapter_json
from kcl_mp.retrieval.dynamodb_stream import DynamoDBStream
from kcl_mp.retrieval.polling import Fetched, Fetcher, Positioned, ShardEnded
from kcl_mp.sequence import ExtendedSequenceNumber
from kcl_mp.supervisor.coordinator import LeaseCoordinator

from ..support.dynamodb_streams import make_table
from ..support.harness import base_properties, wait_until, write_properties

pytestmark = pytest.mark.integration

READS = RetrievalSettings(mode="POLLING", max_records=1000, idle_time_between_reads_ms=200)
QUICK = Backoff(base_s=0.05, cap_s=0.2)
LOG = logging.getLogger("test.dynamodb_streams")


def _client(moto_url: str, raw: bool = True):
    settings = ClientSettings("us-east-1", moto_url, (CredentialProvider("EnvironmentVariableCredentialsProvider"),))
    return aws_client("dynamodbstreams", settings, raw_records=raw)


def _stream(moto_url: str, arn: str, table: str, **settings: str) -> DynamoDBStream:
    return DynamoDBStream(_client(moto_url), arn, table, DynamoDBStreamsSettings(**settings))  # type: ignore[arg-type]


def _fetcher(stream: DynamoDBStream, shard_id: str, start: str = "TRIM_HORIZON", **keys) -> Fetcher:
    fetcher = Fetcher(stream, shard_id, ExtendedSequenceNumber(start), InitialPosition("TRIM_HORIZON"),
                      keys.pop("settings", READS), make_batch, LOG, backoff=QUICK, rng=random.Random(1), **keys)
    fetcher.start()
    return fetcher


class Taken:
    """What a fetcher handed over: the records' objects, in order, and how it ended."""

    def __init__(self, fetcher: Fetcher):
        self.fetcher, self.records, self.ended = fetcher, [], None

    def take(self, timeout: float = 0.2) -> None:
        item = self.fetcher.next(timeout)
        if isinstance(item, Fetched):
            self.records += json.loads(item.batch.line)["records"]
        elif isinstance(item, ShardEnded):
            self.ended = item
        else:
            assert item is None or isinstance(item, Positioned), item

    def until(self, condition, timeout: float, what: str) -> None:
        def check() -> bool:
            self.take()
            return condition()

        wait_until(check, timeout, what, interval=0)

    def changes(self) -> list[dict]:
        return [json.loads(base64.b64decode(r["data"])) for r in self.records]


def _first_shard(moto_url: str, arn: str) -> str:
    streams = boto3.client("dynamodbstreams", endpoint_url=moto_url, region_name="us-east-1")
    return streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]


def test_listing_pages_300_shards_and_children_come_by_the_filter(moto_url, dynamodb, steer, unique_name):
    steer(action="configure", shards=300)
    arn = make_table(dynamodb, unique_name)
    stream = _stream(moto_url, arn, unique_name)
    calls: list[dict] = []
    stream.dynamodbstreams.meta.events.register("provide-client-params.dynamodbstreams.DescribeStream",
                                                lambda params, **_: calls.append(dict(params)))
    shards = stream.list_shards()
    assert len(shards) == 300 and len({s.shard_id for s in shards}) == 300
    assert [c.get("ExclusiveStartShardId") is not None for c in calls] == [False, True, True]
    assert all(c["Limit"] == 100 for c in calls)
    assert all(s.hash_range == (0, 1) and s.parent_shard_ids == () for s in shards)
    assert stream.describe() == arn

    steer(action="configure", describe_per_second=0)  # throttled past botocore's retries: the listing fails, no wait
    with pytest.raises(ThrottledError, match="LimitExceededException"):
        stream.list_shards()
    steer(action="configure", describe_per_second=10)

    closed = shards[7].shard_id
    opened = steer(action="split", table=unique_name, shard=closed)["opened"]
    children = stream.child_shards(closed)
    assert [c["ShardId"] for c in children] == opened
    assert all(c["ParentShards"] == [closed] and c["HashKeyRange"] == {"StartingHashKey": "0", "EndingHashKey": "1"}
               for c in children)


def test_records_reach_the_processor_as_the_adapter_writes_them_then_the_shard_ends(moto_url, dynamodb, steer,
                                                                                   unique_name):
    arn = make_table(dynamodb, unique_name)
    shard = _first_shard(moto_url, arn)
    dynamodb.put_item(TableName=unique_name, Item={"pk": {"S": "a"}, "n": {"N": "1"}, "b": {"B": b"\x00\xff"}})
    dynamodb.update_item(TableName=unique_name, Key={"pk": {"S": "a"}}, UpdateExpression="SET n = :n",
                         ExpressionAttributeValues={":n": {"N": "2"}})
    steer(action="ttl_delete", table=unique_name, keys={"pk": {"S": "a"}})
    dynamodb.delete_item(TableName=unique_name, Key={"pk": {"S": "a"}})
    child = steer(action="rollover", table=unique_name)["opened"][0]

    taken = Taken(_fetcher(_stream(moto_url, arn, unique_name), shard))
    taken.until(lambda: taken.ended is not None, 30, "the shard's end")
    taken.fetcher.stop()
    plain = boto3.client("dynamodbstreams", endpoint_url=moto_url, region_name="us-east-1")
    iterator = plain.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON")
    service = plain.get_records(ShardIterator=iterator["ShardIterator"])["Records"]  # boto3's own parse

    assert [base64.b64decode(r["data"]) for r in taken.records] == [adapter_json(r) for r in service]
    assert [r["partitionKey"] for r in taken.records] == [r["dynamodb"]["SequenceNumber"] for r in service]
    assert [r["sequenceNumber"] for r in taken.records] == [r["dynamodb"]["SequenceNumber"] for r in service]
    assert all(r["subSequenceNumber"] == 0 for r in taken.records)
    assert [r["approximateArrivalTimestamp"] for r in taken.records] == [
        round(r["dynamodb"]["ApproximateCreationDateTime"].timestamp() * 1000) for r in service]
    changes = taken.changes()
    assert [c["eventName"] for c in changes] == ["INSERT", "MODIFY", "REMOVE"]
    assert changes[2]["userIdentity"] == {"principalId": "dynamodb.amazonaws.com", "type": "Service"}
    assert changes[0]["dynamodb"]["NewImage"]["b"] == {"B": "AP8="}
    assert taken.ended.children[0]["ShardId"] == child and not taken.ended.gone


def test_the_1x_shape_has_null_partition_keys_and_sub_sequence_numbers(moto_url, dynamodb, unique_name):
    arn = make_table(dynamodb, unique_name)
    dynamodb.put_item(TableName=unique_name, Item={"pk": {"S": "a"}})
    stream = _stream(moto_url, arn, unique_name, record_format="ADAPTER_V1")
    fetcher = Fetcher(stream, _first_shard(moto_url, arn), ExtendedSequenceNumber("TRIM_HORIZON"),
                      InitialPosition("TRIM_HORIZON"), READS, lambda users, behind: make_batch(users, behind, keyless=True),
                      LOG)
    fetcher.start()
    taken = Taken(fetcher)
    taken.until(lambda: len(taken.records) == 1, 30, "the record")
    fetcher.stop()
    assert taken.records[0]["partitionKey"] is None and taken.records[0]["subSequenceNumber"] is None
    assert taken.changes()[0]["eventName"] == "INSERT"


def test_expired_iterators_are_taken_again_after_the_last_record_delivered(moto_url, dynamodb, steer, unique_name):
    """Every iterator expires before the next read (a 15-minute expiry compressed to 0.1 s):
    each read starts again after the last record delivered, so nothing is lost or repeated."""
    arn = make_table(dynamodb, unique_name)
    steer(action="configure", iterator_ttl_s=0.1)
    taken = Taken(_fetcher(_stream(moto_url, arn, unique_name), _first_shard(moto_url, arn)))
    for n in range(12):
        dynamodb.put_item(TableName=unique_name, Item={"pk": {"S": f"k{n}"}})
        time.sleep(0.05)
        taken.take(0.05)
    taken.until(lambda: len(taken.records) >= 12, 30, "twelve records")
    taken.fetcher.stop()
    assert [c["dynamodb"]["Keys"]["pk"]["S"] for c in taken.changes()] == [f"k{n}" for n in range(12)]
    assert taken.fetcher.iterators_expired >= 2


def test_trimming_past_the_checkpoint_skips_to_the_trim_horizon_logged_and_counted(
        moto_url, dynamodb, steer, unique_name, caplog):
    arn = make_table(dynamodb, unique_name)
    shard = _first_shard(moto_url, arn)
    for n in range(3):
        dynamodb.put_item(TableName=unique_name, Item={"pk": {"S": f"old{n}"}})
    first = Taken(_fetcher(_stream(moto_url, arn, unique_name), shard))
    first.until(lambda: len(first.records) == 3, 30, "the first records")
    first.fetcher.stop()
    checkpoint = first.records[0]["sequenceNumber"]  # the processor checkpointed the first of them
    steer(action="trim", table=unique_name, older_than_s=-10)  # all three gone: past the checkpoint
    dynamodb.put_item(TableName=unique_name, Item={"pk": {"S": "new"}})

    with caplog.at_level(logging.WARNING, LOG.name):
        skipping = Taken(_fetcher(_stream(moto_url, arn, unique_name), shard, checkpoint))
        skipping.until(lambda: len(skipping.records) == 1, 30, "the record after the trim")
    skipping.fetcher.stop()
    assert skipping.changes()[0]["dynamodb"]["Keys"] == {"pk": {"S": "new"}}
    assert skipping.fetcher.trimmed_skips == 1
    named = [r.getMessage() for r in caplog.records if shard in r.getMessage() and checkpoint in r.getMessage()]
    assert len(named) == 2, named  # the skip, then the range lost, both naming the shard and the checkpoint

    retrying = Taken(_fetcher(_stream(moto_url, arn, unique_name, skip_records_behavior="KCL_RETRY"), shard,
                              checkpoint))
    wait_until(lambda: retrying.fetcher.trim_retries >= 3, 30, "three retries of the trimmed position")
    retrying.take(0.05)
    retrying.fetcher.stop()
    assert retrying.records == [] and retrying.fetcher.trimmed_skips == 0


def test_a_throttled_third_reader_backs_off_and_reads_everything(moto_url, dynamodb, steer, unique_name):
    arn = make_table(dynamodb, unique_name)
    shard = _first_shard(moto_url, arn)
    for n in range(5):
        dynamodb.put_item(TableName=unique_name, Item={"pk": {"S": f"k{n}"}})
    steer(action="configure", max_readers=2, reader_window_s=60.0)
    plain = boto3.client("dynamodbstreams", endpoint_url=moto_url, region_name="us-east-1")
    for _ in range(2):  # two other readers of the shard
        iterator = plain.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="LATEST")
        plain.get_records(ShardIterator=iterator["ShardIterator"])
    taken = Taken(_fetcher(_stream(moto_url, arn, unique_name), shard))
    wait_until(lambda: taken.fetcher.reads_retried >= 2, 30, "the third reader throttled twice")
    assert taken.records == []
    steer(action="configure", max_readers=3)  # one of the others stops reading
    taken.until(lambda: len(taken.records) == 5, 30, "every record once the throttling stops")
    taken.fetcher.stop()
    assert [c["dynamodb"]["Keys"]["pk"]["S"] for c in taken.changes()] == [f"k{n}" for n in range(5)]


def test_a_shard_the_stream_does_not_have_is_its_end(moto_url, dynamodb, unique_name):
    arn = make_table(dynamodb, unique_name)
    taken = Taken(_fetcher(_stream(moto_url, arn, unique_name), "shardId-00000000000000000001-00000000"))
    taken.until(lambda: taken.ended is not None, 30, "the shard's end")
    taken.fetcher.stop()
    assert taken.ended == ShardEnded(gone=True)


@pytest.mark.parametrize(("initial", "expected"), [("TRIM_HORIZON", "roots"), ("LATEST", "leaves")])
def test_an_empty_lease_table_is_planned_from_the_whole_tree(tmp_path, moto_url, dynamodb, steer, unique_name,
                                                             monkeypatch, initial, expected):
    """DynamoDB Streams cannot list the shards open at a position: the whole tree is listed and
    the hierarchy rules pick the roots (TRIM_HORIZON: the children follow them) or the open
    leaves (LATEST). Then the audit, over the adapter's key space 0..1, lists nothing more."""
    steer(action="configure", shards=3)
    table, app = unique_name, unique_name + "-app"
    arn = make_table(dynamodb, table)
    roots = steer(action="rollover", table=table)["closed"]
    leaves = steer(action="rollover", table=table)["opened"]
    keys = base_properties(moto_url, table, app, "true", streamArn=arn, initialPositionInStream=initial)
    del keys["streamName"], keys["maxRecords"]
    leases = LeaseTable(dynamodb, app)
    leases.ensure_table()
    coordinator = LeaseCoordinator(load_config(write_properties(tmp_path / "app.properties", **keys)), leases,
                                   _client(moto_url, raw=False), ShardLog(LOG, "host-a"), lambda: 0.0, random.Random(1))
    assert coordinator.sync.sync_shards({}, "test")
    created = {lease.key: lease for lease in leases.list_leases()}
    assert sorted(created) == sorted(roots if expected == "roots" else leaves)
    assert {str(lease.checkpoint) for lease in created.values()} == {initial}
    assert all(lease.hash_range == (0, 1) for lease in created.values())

    coordinator.view.last_seen = created
    calls: list[object] = []
    monkeypatch.setattr(coordinator.sync.stream, "list_shards", lambda *a: calls.append(a) or [])
    assert coordinator.sync.audit() and coordinator.sync.audit()
    assert calls == [], "the audit listed shards although the leases cover the adapter's key space"


@pytest.mark.timing
def test_an_empty_read_waits_twice_the_idle_time(moto_url, dynamodb, unique_name):
    """The adapter's pacing: a quiet shard read every 2 x 200 ms. A bound from above only (a
    loaded machine reads less often, never more)."""
    arn = make_table(dynamodb, unique_name)
    fetcher = _fetcher(_stream(moto_url, arn, unique_name), _first_shard(moto_url, arn))
    began = time.monotonic()
    wait_until(lambda: fetcher.get_records_calls >= 1, 30, "the first read")
    time.sleep(2.0)
    calls, took = fetcher.get_records_calls, time.monotonic() - began
    fetcher.stop()
    assert calls <= took / 0.4 + 1, (calls, took)

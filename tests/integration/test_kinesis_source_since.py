"""``kclmp_kinesis`` started at LATEST or AT_TIMESTAMP, without Spark, on kinesis-mock: a split
made after the start is followed into its children, streaming and in a batch read. (Every
listing of such a query is filtered at its start time; ListShards' AT_TIMESTAMP filter lists only
the shards open *at* that time, so the children never showed and what was put to them was never
read.)"""

from __future__ import annotations

import json
import time

import boto3
import pytest

from kcl_mp.devtools.producer import produce
from kcl_mp.spark.kinesis_options import Options
from kcl_mp.spark.kinesis_source import KinesisBatchReader, KinesisStreamReader

from ..support.kinesis_mock import create_streams, split_in_half
from ..support.source_loop import drain

pytestmark = pytest.mark.integration


def batches(reader: KinesisStreamReader, start: dict, seen: dict[int, list[str]]) -> dict:
    """Spark's loop until nothing moves; ``seen``: id -> the shards it was read from."""
    def note(end: dict, batch) -> None:
        for shard, data in zip(batch.column("shardId").to_pylist(), batch.column("data").to_pylist()):
            seen.setdefault(json.loads(data)["id"], []).append(shard)

    return drain(reader, start, note)


@pytest.mark.parametrize("initial", ["latest", "at_timestamp"])
def test_a_split_after_the_start_is_read_into_its_children(initial, kinesis_mock_url, unique_name, tmp_path):
    kinesis = boto3.client("kinesis", endpoint_url=kinesis_mock_url, region_name="us-east-1")
    create_streams(kinesis, {unique_name: 2})
    produce(kinesis, unique_name, 100, aggregated_share=0.0)  # before the start: not read
    time.sleep(1.0)
    position = "latest" if initial == "latest" else json.dumps({"at_timestamp": round(time.time() * 1000)})
    reader = KinesisStreamReader(Options.parse({
        "streamName": unique_name, "endpointUrl": kinesis_mock_url, "region": "us-east-1",
        "initialPosition": position, "metadataPath": str(tmp_path / "meta"), "maxFetchDuration": "2s"}))
    start = reader.initialOffset()
    time.sleep(0.5)
    put = [p.id for p in produce(kinesis, unique_name, 50, first_id=1000, aggregated_share=0.0)]
    seen: dict[int, list[str]] = {}
    start = batches(reader, start, seen)
    parent = kinesis.list_shards(StreamName=unique_name)["Shards"][0]
    split_in_half(kinesis, unique_name, parent)
    put += [p.id for p in produce(kinesis, unique_name, 50, first_id=2000, aggregated_share=0.0)]
    batches(reader, start, seen)
    children = {s["ShardId"] for s in kinesis.list_shards(StreamName=unique_name)["Shards"]
                if s.get("ParentShardId") == parent["ShardId"]}
    assert sorted(seen) == sorted(put), f"missing {sorted(set(put) - set(seen))[:10]}"
    assert all(len(shards) == 1 for shards in seen.values())
    assert {shard for shards in seen.values() for shard in shards} >= children, "the children were read"


def test_a_batch_read_at_a_timestamp_before_a_split_reads_the_children(kinesis_mock_url, unique_name):
    kinesis = boto3.client("kinesis", endpoint_url=kinesis_mock_url, region_name="us-east-1")
    create_streams(kinesis, {unique_name: 2})
    produce(kinesis, unique_name, 100, aggregated_share=0.0)  # before the timestamp: not read
    time.sleep(1.0)
    since = round(time.time() * 1000)
    time.sleep(0.5)
    put = [p.id for p in produce(kinesis, unique_name, 50, first_id=1000, aggregated_share=0.0)]
    split_in_half(kinesis, unique_name, kinesis.list_shards(StreamName=unique_name)["Shards"][0])
    put += [p.id for p in produce(kinesis, unique_name, 50, first_id=2000, aggregated_share=0.0)]
    reader = KinesisBatchReader(Options.parse({
        "streamName": unique_name, "endpointUrl": kinesis_mock_url, "region": "us-east-1",
        "initialPosition": json.dumps({"at_timestamp": since})}))
    read = [json.loads(data)["id"] for part in reader.partitions() for batch in reader.read(part)
            for data in batch.column("data").to_pylist()]
    assert sorted(read) == sorted(put), f"missing {sorted(set(put) - set(read))[:10]}"

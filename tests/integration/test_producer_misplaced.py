"""The test producer's misplaced KPL aggregates on kinesis-mock, which routes by the MD5 of the
partition key and splits for real: read back from every shard (parents and children) and
de-aggregated, the user records a hash-range filter keeps hold every id exactly once, and the
ones it drops are exactly the puts the producer named ``dropped``."""

from __future__ import annotations

import base64
import hashlib
import json
from collections import Counter

import boto3
import pytest

from kcl_mp.devtools import producer
from kcl_mp.devtools.producer import produce
from kcl_mp.retrieval.deaggregate import user_records

from ..support.kinesis_mock import create_streams, split_in_half

pytestmark = pytest.mark.integration


def read_all(kinesis, stream: str) -> list[tuple[str, int, str, int, bool]]:
    """Every user record of every shard as (shard, id, sequence number, sub, in range)."""
    out = []
    for shard in kinesis.list_shards(StreamName=stream)["Shards"]:
        low, high = (int(shard["HashKeyRange"][k]) for k in ("StartingHashKey", "EndingHashKey"))
        iterator = kinesis.get_shard_iterator(StreamName=stream, ShardId=shard["ShardId"],
                                              ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
        for _ in range(1000):  # bounded: until an empty page of an open shard, or a closed shard's end
            page = kinesis.get_records(ShardIterator=iterator, Limit=10000)
            for data, key, seq, _, sub in user_records(page["Records"]):
                hashed = int(hashlib.md5(key.encode()).hexdigest(), 16)
                out.append((shard["ShardId"], json.loads(base64.b64decode(data))["id"], seq, sub,
                            low <= hashed <= high))
            iterator = page.get("NextShardIterator")
            if iterator is None or (not page["Records"] and page.get("MillisBehindLatest", 0) == 0):
                break
    return out


def test_every_id_once_through_the_hash_range_filter_across_a_split(kinesis_mock_url, unique_name, monkeypatch):
    monkeypatch.setattr(producer, "_LISTINGS", {})
    kinesis = boto3.client("kinesis", endpoint_url=kinesis_mock_url, region_name="us-east-1")
    stream = unique_name
    create_streams(kinesis, {stream: 4})
    puts = produce(kinesis, stream, 2000, aggregated_share=0.3, misplaced_share=0.5, seed=5)
    # the producer's listing is kept RANGES_TTL_S: the puts after the split aggregate by the
    # parent's range and land on its children
    split_in_half(kinesis, stream, kinesis.list_shards(StreamName=stream)["Shards"][0])
    puts += produce(kinesis, stream, 2000, first_id=2000, aggregated_share=0.3, misplaced_share=0.5, seed=6)
    read = read_all(kinesis, stream)
    kept = Counter(i for _, i, _, _, ok in read if ok)
    assert kept == Counter(range(4000)), (sorted(set(range(4000)) - set(kept))[:10],
                                          [i for i, n in kept.items() if n > 1][:10])
    dropped = {(p.shard_id, p.sequence_number, p.sub_sequence_number) for p in puts if p.dropped}
    assert len(dropped) > 100, len(dropped)
    assert {(shard, seq, sub) for shard, _, seq, sub, ok in read if not ok} == dropped
    assert Counter(p.id for p in puts if not p.dropped) == Counter(range(4000))
    print(f"{len(puts)} puts, {len(dropped)} of them dropped copies, {len(read)} user records read")

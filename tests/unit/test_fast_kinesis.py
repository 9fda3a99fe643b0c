"""The benchmark endpoint's pages: what a reader gets page after page, from a precomputed
template or built record by record, must read as one Kinesis shard does."""

import base64

import orjson
import pytest

from kcl_mp.devtools.fast_kinesis import FastKinesis, ServiceError, Source

DATA = bytes(range(7))


def kinesis(page_records=3, records_per_shard=0):
    return FastKinesis(Source("bench", 2, len(DATA), page_records, records_per_shard, 5000), seed=DATA)


def read(k, iterator, limit=10, pages=20):
    records, answers = [], []
    for _ in range(pages):
        answer = orjson.loads(k.get_records(iterator, limit))
        answers.append(answer)
        records += answer["Records"]
        if not answer["Records"]:
            break
        iterator = answer["NextShardIterator"]
    return records, answers


def test_template_pages_and_built_pages_read_as_one_shard():
    k = kinesis()
    start = k.shard_iterator({"StreamName": "bench", "ShardId": "shardId-000000000001",
                              "ShardIteratorType": "TRIM_HORIZON"})["ShardIterator"]
    whole, _ = read(k, start, limit=10, pages=4)  # full pages: the template
    small, _ = read(k, start, limit=2, pages=8)  # 2 then the page's last: built record by record
    assert [r["SequenceNumber"] for r in small] == [r["SequenceNumber"] for r in whole][:12]
    sequences = [int(r["SequenceNumber"]) for r in whole]
    assert sequences == sorted(set(sequences)) and len(sequences) == 12
    assert {base64.b64decode(r["Data"]) for r in whole} == {DATA}
    assert all(isinstance(r["ApproximateArrivalTimestamp"], float) for r in whole)


def test_after_sequence_number_resumes_at_the_next_record():
    k = kinesis()
    start = k.shard_iterator({"ShardId": "shardId-000000000000", "ShardIteratorType": "TRIM_HORIZON"})["ShardIterator"]
    first, _ = read(k, start, pages=3)
    after = k.shard_iterator({"ShardId": "shardId-000000000000", "ShardIteratorType": "AFTER_SEQUENCE_NUMBER",
                              "StartingSequenceNumber": first[4]["SequenceNumber"]})["ShardIterator"]
    rest, _ = read(k, after, pages=2)
    assert [r["SequenceNumber"] for r in rest][:4] == [r["SequenceNumber"] for r in first][5:9]


@pytest.mark.parametrize("records, behind", [(7, [5000, 5000, 0, 0]),  # the last page built record by record
                                             (6, [5000, 0, 0])])  # the last page full: the template, lag 0
def test_a_bounded_shard_ends_at_the_tip_with_no_lag(records, behind):
    k = kinesis(records_per_shard=records)
    start = k.shard_iterator({"ShardId": "shardId-000000000000", "ShardIteratorType": "TRIM_HORIZON"})["ShardIterator"]
    got, answers = read(k, start)
    assert [r["SequenceNumber"] for r in got] == [f"49{p:019d}{s:05d}" for p in range(3) for s in range(3)][:records]
    assert [a["MillisBehindLatest"] for a in answers] == behind
    assert answers[-1]["NextShardIterator"] == answers[-2]["NextShardIterator"]  # open: the reader keeps polling


def test_unknown_shards_and_streams_are_refused_as_kinesis_refuses_them():
    k = kinesis()
    with pytest.raises(ServiceError) as shard:
        k.handle("GetShardIterator", {"StreamName": "bench", "ShardId": "shardId-000000000002",
                                      "ShardIteratorType": "TRIM_HORIZON"})
    with pytest.raises(ServiceError) as stream:
        k.handle("ListShards", {"StreamName": "other"})
    with pytest.raises(ServiceError) as iterator:
        k.handle("GetRecords", {"ShardIterator": "garbage"})
    assert (shard.value.code, stream.value.code, iterator.value.code) == (
        "ResourceNotFoundException", "ResourceNotFoundException", "InvalidArgumentException")
    assert [s["ShardId"] for s in orjson.loads(k.handle("ListShards", {"StreamName": "bench"}))["Shards"]] == [
        "shardId-000000000000", "shardId-000000000001"]

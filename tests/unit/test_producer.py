"""The test producer's misplaced KPL aggregates (``produce(misplaced_share=...)``) on an in-memory
Kinesis that routes as Kinesis does (MD5 of the partition key into the open shards' hash key
ranges) and splits shards: every id reaches a reader that drops out-of-range user records
exactly once, and the ``Put`` list names the copies it drops."""

from __future__ import annotations

import base64
import hashlib
import json
from collections import Counter

import pytest

from kcl_mp.devtools import producer
from kcl_mp.devtools.producer import Put, produce
from kcl_mp.retrieval.deaggregate import user_records

TOP = 2**128 - 1


def md5(key: str) -> int:
    return int(hashlib.md5(key.encode()).hexdigest(), 16)


class FakeKinesis:
    """ListShards, PutRecords and SplitShard of one stream, in memory."""

    def __init__(self, shards: int):
        step = (TOP + 1) // shards
        self.shards: dict[str, dict] = {}
        for n in range(shards):
            self._add((n * step, TOP if n == shards - 1 else (n + 1) * step - 1))
        self.seq = 0
        self.listings = 0

    def _add(self, hash_range: tuple[int, int], parent: str | None = None) -> str:
        shard_id = f"shardId-{len(self.shards):012d}"
        self.shards[shard_id] = {"range": hash_range, "open": True, "parent": parent, "records": []}
        return shard_id

    def list_shards(self, **kwargs):
        self.listings += 1
        return {"Shards": [{"ShardId": shard_id,
                            "HashKeyRange": {"StartingHashKey": str(s["range"][0]), "EndingHashKey": str(s["range"][1])},
                            "SequenceNumberRange": {"StartingSequenceNumber": "0",
                                                    **({} if s["open"] else {"EndingSequenceNumber": "9"})}}
                           for shard_id, s in self.shards.items()]}

    def put_records(self, StreamName, Records):  # noqa: N803 (boto3's names)
        assert len(Records) <= 500
        out = []
        for entry in Records:
            hashed = int(entry["ExplicitHashKey"]) if entry.get("ExplicitHashKey") else md5(entry["PartitionKey"])
            (shard_id,) = [i for i, s in self.shards.items() if s["open"] and s["range"][0] <= hashed <= s["range"][1]]
            self.seq += 1
            self.shards[shard_id]["records"].append({"SequenceNumber": str(self.seq), "Data": entry["Data"],
                                                     "PartitionKey": entry["PartitionKey"]})
            out.append({"ShardId": shard_id, "SequenceNumber": str(self.seq)})
        return {"Records": out}

    def split(self, shard_id: str) -> None:
        low, high = self.shards[shard_id]["range"]
        self.shards[shard_id]["open"] = False
        self._add((low, (low + high) // 2), shard_id)
        self._add(((low + high) // 2 + 1, high), shard_id)

    def read(self) -> list[tuple[str, int, int, bool]]:
        """Every user record as (shard, id, sub-sequence number, kept): ``kept`` False for a
        user record outside its shard's hash range (what the Java KCL and kcl-mp drop; a plain
        record is never outside: Kinesis routed it by the same hash)."""
        out = []
        for shard_id, shard in self.shards.items():
            low, high = shard["range"]
            for data, key, _, _, sub in user_records(shard["records"]):
                out.append((shard_id, json.loads(base64.b64decode(data))["id"], sub, low <= md5(key) <= high))
        return out


@pytest.fixture(autouse=True)
def fresh_listings(monkeypatch):
    monkeypatch.setattr(producer, "_LISTINGS", {})


def delivered(kinesis: FakeKinesis) -> Counter:
    return Counter(i for _, i, _, kept in kinesis.read() if kept)


def test_by_default_no_aggregate_holds_another_shards_record():
    kinesis = FakeKinesis(8)
    puts = produce(kinesis, "s", 3000, aggregated_share=0.3)
    assert not any(put.dropped for put in puts)
    assert sorted(put.id for put in puts) == list(range(3000))
    assert all(kept for *_, kept in kinesis.read())
    assert delivered(kinesis) == Counter(range(3000))


def test_the_default_puts_are_those_of_before():
    """The option draws from the seeded generator only when asked for: the same seed puts the
    same records to the same shards as it did without the option."""
    a, b = FakeKinesis(4), FakeKinesis(4)
    assert produce(a, "s", 2000, seed=3) == produce(b, "s", 2000, seed=3, misplaced_share=0.0)


def test_misplaced_user_records_are_put_again_alone_and_named_dropped():
    kinesis = FakeKinesis(8)
    puts = produce(kinesis, "s", 5000, aggregated_share=0.5, misplaced_share=0.5, seed=1)
    dropped = [put for put in puts if put.dropped]
    kept = [put for put in puts if not put.dropped]
    assert len(dropped) > 100, len(dropped)  # about 5000/3 puts, half aggregates, half of those one record elsewhere
    # every id once among the kept puts; each dropped one has its copy, put alone (sub 0) on
    # the shard that owns its key
    assert Counter(put.id for put in kept) == Counter(range(5000))
    again = {put.id: put for put in kept}
    for put in dropped:
        copy = again[put.id]
        assert copy.shard_id != put.shard_id and copy.sub_sequence_number == 0
        assert int(copy.sequence_number) > int(put.sequence_number)
        low, high = kinesis.shards[copy.shard_id]["range"]
        assert low <= md5(put.partition_key) <= high
    # what a hash-range-filtering reader sees: every id exactly once; the records it drops are
    # exactly the puts named dropped
    assert delivered(kinesis) == Counter(range(5000))
    assert {(shard, i, sub) for shard, i, sub, kept in kinesis.read() if not kept} == \
        {(p.shard_id, p.id, p.sub_sequence_number) for p in dropped}


def test_an_aggregate_put_with_ranges_listed_before_a_split_is_put_right():
    """Stale ranges (the listing is kept RANGES_TTL_S): aggregates built for the parent's range
    land on a child that owns only part of it; the user records outside the child's range are
    put again (the KPL's wrong-shard rule), so none is lost to the reader's filter."""
    kinesis = FakeKinesis(2)
    first = produce(kinesis, "s", 500, aggregated_share=0.5, misplaced_share=0.01, seed=2)
    kinesis.split("shardId-000000000000")
    kinesis.split("shardId-000000000001")
    listings = kinesis.listings
    later = produce(kinesis, "s", 2000, first_id=500, aggregated_share=0.5, misplaced_share=0.01, seed=3)
    assert kinesis.listings == listings + 1, "the children were listed once, when a put first named one"
    puts = first + later
    assert sum(put.dropped for put in later) > 50
    assert delivered(kinesis) == Counter(range(2500))
    assert Counter(put.id for put in puts if not put.dropped) == Counter(range(2500))


def test_stale_ranges_alone_are_mended_as_the_kpl_mends_them():
    """No misplaced share asked: aggregates put with ranges listed before a split still land
    user records on children that do not own them; those are put again alone (the KPL's
    retrier), so a filtering reader delivers every id once and the puts say which copies go."""
    kinesis = FakeKinesis(2)
    produce(kinesis, "s", 100, aggregated_share=0.5, seed=2)
    kinesis.split("shardId-000000000000")
    kinesis.split("shardId-000000000001")
    puts = produce(kinesis, "s", 2000, first_id=100, aggregated_share=0.5, seed=3)
    assert any(put.dropped for put in puts)
    assert delivered(kinesis) == Counter(range(2100))


def test_misplaced_share_is_a_share():
    with pytest.raises(ValueError, match="0 to 1"):
        produce(FakeKinesis(1), "s", 1, misplaced_share=1.5)


def test_a_put_names_dropped_last_so_positional_puts_stay_valid():
    assert Put(1, "k", "{}", "shardId-0", "5", 0) == Put(1, "k", "{}", "shardId-0", "5", 0, False)

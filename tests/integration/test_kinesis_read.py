"""``kclmp_kinesis`` without Spark, on kinesis-mock: the executor's read decided once and
replayed the same (a retry, a speculative twin, a replay after more arrived), its bounds, the
create-only manifest on a directory and on S3, and what the planner costs an idle shard."""

from __future__ import annotations

import threading
import time

import boto3
import pytest

from kcl_mp.devtools.producer import produce
from kcl_mp.spark.kinesis_options import Options
from kcl_mp.spark.kinesis_plan import IDLE_PROBE_GAP_S
from kcl_mp.spark.kinesis_read import Connection, ReadLimits, ShardTake, read_manifest, read_take, read_takes
from kcl_mp.spark.kinesis_source import KinesisStreamReader
from kcl_mp.spark.storage import Storage

from ..support.kinesis_mock import create_streams
from ..support.source_loop import drain

pytestmark = pytest.mark.integration
FULL = (0, 2**128 - 1)
QUICK = ReadLimits(fetch_interval_s=0.0)


@pytest.fixture
def stream(kinesis_mock_url, unique_name):
    kinesis = boto3.client("kinesis", endpoint_url=kinesis_mock_url, region_name="us-east-1")
    create_streams(kinesis, {unique_name: 1})
    shard = kinesis.list_shards(StreamName=unique_name)["Shards"][0]["ShardId"]
    return kinesis, unique_name, shard


def ids(batches) -> list[tuple[str, int, bytes]]:
    return [(seq, sub, data) for b in batches
            for seq, sub, data in zip(b.column("sequenceNumber").to_pylist(), b.column("subSequenceNumber").to_pylist(),
                                      b.column("data").to_pylist())]


def test_a_batch_is_decided_once_and_read_the_same_by_a_retry_twins_and_after_more_arrived(
        stream, kinesis_mock_url, tmp_path):
    kinesis, name, shard = stream
    produce(kinesis, name, 300, aggregated_share=0.2)
    client = Connection("us-east-1", kinesis_mock_url).kinesis()
    storage = Storage(str(tmp_path / "meta"))
    take = ShardTake(name, shard, FULL, {"at": "TRIM_HORIZON"}, 1, cap=100)
    first = ids(read_take(client, storage, take, QUICK))
    assert 100 - 5 < len(first) <= 100, "the cap, at whole Kinesis records (an aggregate holds up to 5)"
    manifest = read_manifest(storage, take.manifest)
    assert manifest["end"] == first[-1][0] and manifest["rows"] == len(first) and not manifest["ended"]
    produce(kinesis, name, 50, first_id=1000)
    assert ids(read_take(client, storage, take, QUICK)) == first, "a retry reads to the recorded end"
    twins: list[list] = [[], []]
    racers = [threading.Thread(target=lambda i=i: twins[i].extend(ids(read_take(
        client, storage, ShardTake(name, shard, FULL, {"at": "TRIM_HORIZON"}, 2), QUICK)))) for i in range(2)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(60)
    assert twins[0] == twins[1] and len(twins[0]) == 350, "speculative twins of a new batch: one decision"
    assert sorted(p.name for p in (tmp_path / "meta" / name / shard).iterdir()) == [
        "000000000001.json", "000000000002.json"], "no temporary file left"


def test_availablenow_time_bound_and_an_empty_read(stream, kinesis_mock_url, tmp_path):
    kinesis, name, shard = stream
    produce(kinesis, name, 20)
    client = Connection("us-east-1", kinesis_mock_url).kinesis()
    storage = Storage(str(tmp_path / "meta"))
    everything = ids(read_take(client, storage, ShardTake(name, shard, FULL, {"at": "TRIM_HORIZON"}, 1), QUICK))
    assert len(everything) == 20
    none_before = ShardTake(name, shard, FULL, {"at": "TRIM_HORIZON"}, 2, until=0)
    assert ids(read_take(client, storage, none_before, QUICK)) == []
    assert read_manifest(storage, none_before.manifest)["end"] is None
    at_tip = ShardTake(name, shard, FULL, {"after": everything[-1][0]}, 3)
    assert ids(read_take(client, storage, at_tip, QUICK)) == []


def test_a_tasks_shards_read_side_by_side_come_shard_by_shard_as_each_replays(kinesis_mock_url, unique_name, tmp_path):
    kinesis = boto3.client("kinesis", endpoint_url=kinesis_mock_url, region_name="us-east-1")
    create_streams(kinesis, {unique_name: 3})
    produce(kinesis, unique_name, 120, aggregated_share=0.2)
    shards = sorted(s["ShardId"] for s in kinesis.list_shards(StreamName=unique_name)["Shards"])
    client = Connection("us-east-1", kinesis_mock_url).kinesis()
    storage = Storage(str(tmp_path / "meta"))
    takes = [ShardTake(unique_name, shard, FULL, {"at": "TRIM_HORIZON"}, 1) for shard in shards]
    batches = list(read_takes(client, storage, takes, QUICK))
    order = [b.column("shardId")[0].as_py() for b in batches if b.num_rows]
    assert order == sorted(order) and set(order) <= set(shards), "shard by shard, in the task's order"
    assert ids(batches) == [row for take in takes for row in ids(read_take(client, storage, take, QUICK))], \
        "each shard's rows are those a replay reads to its recorded end"
    assert len(ids(batches)) == 120, "every user record, aggregates de-aggregated"
    one_each = [ShardTake(unique_name, shard, FULL, {"at": "TRIM_HORIZON"}, 2) for shard in shards]
    list(read_takes(client, storage, one_each, ReadLimits(fetch_interval_s=0.0, batch_bytes=3, records_per_fetch=2)))
    assert [read_manifest(storage, take.manifest)["records"] for take in one_each] == [2, 2, 2], \
        "a task's byte bound is shared by its shards: 3 bytes over 3 shards stop each after its first page"


def test_manifests_on_s3_are_created_once(moto_url, unique_name):
    s3 = boto3.client("s3", endpoint_url=moto_url, region_name="us-east-1")
    s3.create_bucket(Bucket=unique_name)
    storage = Storage(f"s3://{unique_name}/meta", moto_url)
    assert storage.create_bytes("s/shard/000000000001.json", b'{"end": "1", "ended": false}')
    assert not storage.create_bytes("s/shard/000000000001.json", b'{"end": "2", "ended": false}')
    assert read_manifest(storage, "s/shard/000000000001.json")["end"] == "1"
    assert storage.read_if_there("s/shard/000000000002.json") is None
    assert storage.names("s/shard") == ["000000000001.json"]


def test_an_idle_trigger_costs_at_most_two_calls_a_shard_and_writes_nothing(kinesis_mock_url, unique_name, tmp_path):
    kinesis = boto3.client("kinesis", endpoint_url=kinesis_mock_url, region_name="us-east-1")
    create_streams(kinesis, {unique_name: 4})
    produce(kinesis, unique_name, 40)
    reader = KinesisStreamReader(Options.parse({
        "streamName": unique_name, "endpointUrl": kinesis_mock_url, "region": "us-east-1",
        "initialPosition": "trim_horizon", "metadataPath": str(tmp_path / "meta")}))
    calls: list[str] = []
    reader.planner.kinesis.meta.events.register("before-call.kinesis.*", lambda model, **_: calls.append(model.name))
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    assert end["epoch"] == 1 and len(end["active"]) == 4
    for part in reader.partitions(start, end):
        for _ in reader.read(part):
            pass
    calls.clear()
    idle = reader.latestOffset(end, None)
    assert idle == end, "nothing new: the same offset, no batch"
    first_idle = calls.copy()
    assert first_idle.count("GetRecords") == 4 and first_idle.count("GetShardIterator") == 4
    calls.clear()
    assert reader.latestOffset(end, None) == end
    assert calls == ["ListShards"], f"an idle shard is probed at most once a second: {calls}"
    time.sleep(IDLE_PROBE_GAP_S)
    calls.clear()
    assert reader.latestOffset(end, None) == end
    assert calls.count("GetRecords") == 4 and calls.count("GetShardIterator") == 0, \
        f"the next idle trigger reuses each shard's iterator: {calls}"
    assert calls.count("ListShards") == 1
    written = sorted(p.name for p in (tmp_path / "meta").rglob("*.json"))
    assert written == ["000000000001.json"] * 4, "an idle trigger writes no manifest"


def test_idle_shards_past_the_budget_are_probed_in_turn_and_what_wakes_them_is_read_once(
        kinesis_mock_url, unique_name, tmp_path, monkeypatch):
    """Six idle shards, a budget spent before any idle probe, two probe threads: each trigger
    probes the two idle shards least recently probed (one wave), and records put to every shard
    are all read, once, within a few triggers."""
    from kcl_mp.spark import kinesis_source

    monkeypatch.setattr(kinesis_source, "PROBE_THREADS", 2)
    monkeypatch.setattr(kinesis_source, "PROBE_BUDGET_S", 0.0)
    kinesis = boto3.client("kinesis", endpoint_url=kinesis_mock_url, region_name="us-east-1")
    create_streams(kinesis, {unique_name: 6})
    reader = KinesisStreamReader(Options.parse({
        "streamName": unique_name, "endpointUrl": kinesis_mock_url, "region": "us-east-1",
        "initialPosition": "trim_horizon", "metadataPath": str(tmp_path / "meta")}))
    waves: list[tuple[int, int]] = []  # per trigger: (shards probed, of them idle)
    within = reader.planner.probe_within

    def counted(order, shards, busy, deadline):
        found = within(order, shards, busy, deadline)
        waves.append((len(found), len(found) - busy))
        return found

    reader.planner.probe_within = counted
    seen: dict[int, int] = {}

    def note(end: dict, batch) -> None:
        for data in batch.column("data").to_pylist():
            key = int(data.decode().split(":")[1].strip(" }"))
            seen[key] = seen.get(key, 0) + 1

    put = [p.id for p in produce(kinesis, unique_name, 60, aggregated_share=0.0)]
    start = drain(reader, reader.initialOffset(), note)
    assert sorted(seen) == sorted(put)
    waves.clear()
    put += [p.id for p in produce(kinesis, unique_name, 60, first_id=1000, aggregated_share=0.0)]
    drain(reader, start, note)
    assert sorted(seen) == sorted(put) and set(seen.values()) == {1}, "every id read once"
    assert waves[0] == (2, 2), f"the first trigger after the idle ones probes one wave of idle shards: {waves}"
    assert all(idle <= 2 for _, idle in waves), waves


def micro_batches(reader: KinesisStreamReader, start: dict, limit: int, seen: dict) -> dict:
    """Spark's loop until nothing moves, reading at most ``limit`` rows a batch; ``seen``: id ->
    [(epoch, shard)] of every row read."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    def note(end: dict, batch) -> None:
        for shard, data in zip(batch.column("shardId").to_pylist(), batch.column("data").to_pylist()):
            seen.setdefault(int(data.decode().split(":")[1].strip(" }")), []).append((end["epoch"], shard))

    return drain(reader, start, note, ReadMaxRows(limit))


@pytest.mark.parametrize("mode", ["polling", "efo"])
def test_a_split_then_a_merge_every_id_once_parents_before_children(mode, efo_proxy, unique_name, tmp_path):
    """With enhanced fan-out the records come by SubscribeToShard (kinesis-mock's events, through
    the proxy that adds the initial-response), a shard's end by GetRecords. Kinesis refuses a
    consumer's second subscription to a shard within 5 s (ResourceInUse, waited out), so the
    fan-out run takes bigger batches."""
    from ..support.kinesis_mock import split_in_half

    kinesis = boto3.client("kinesis", endpoint_url=efo_proxy.url, region_name="us-east-1")
    create_streams(kinesis, {unique_name: 2})
    reader = KinesisStreamReader(Options.parse({
        "streamName": unique_name, "endpointUrl": efo_proxy.url, "region": "us-east-1", "consumerMode": mode,
        "initialPosition": "trim_horizon", "metadataPath": str(tmp_path / "meta"), "maxFetchDuration": "2s"}))
    calls: list[str] = []  # the planner's client is the executors' too here (one process)
    reader.planner.kinesis.meta.events.register("before-call.kinesis.*", lambda model, **_: calls.append(model.name))
    seen: dict = {}
    put = [p.id for p in produce(kinesis, unique_name, 300, aggregated_share=0.1)]
    limit = 60 if mode == "polling" else 1000
    start = micro_batches(reader, reader.initialOffset(), limit, seen)
    first = kinesis.list_shards(StreamName=unique_name)["Shards"][0]
    split_in_half(kinesis, unique_name, first)
    # a new client: the producer lists the shards afresh (its cached map would mix the children's keys
    # in an aggregate, whose misplaced records a reader drops: the KPL would send them again)
    fresh = boto3.client("kinesis", endpoint_url=efo_proxy.url, region_name="us-east-1")
    put += [p.id for p in produce(fresh, unique_name, 300, first_id=1000, aggregated_share=0.1)]
    start = micro_batches(reader, start, limit, seen)
    shards = kinesis.list_shards(StreamName=unique_name)["Shards"]
    children = [s for s in shards if s.get("ParentShardId") == first["ShardId"]]
    kinesis.merge_shards(StreamName=unique_name, ShardToMerge=children[0]["ShardId"],
                         AdjacentShardToMerge=children[1]["ShardId"])
    from kcl_mp.embedded import wait_active

    wait_active(kinesis, unique_name)
    fresh = boto3.client("kinesis", endpoint_url=efo_proxy.url, region_name="us-east-1")
    put += [p.id for p in produce(fresh, unique_name, 300, first_id=2000, aggregated_share=0.1)]
    micro_batches(reader, start, limit, seen)
    assert sorted(seen) == sorted(put) and all(len(v) == 1 for v in seen.values()), \
        f"{len(seen)} ids read of {len(put)}; twice: {[k for k, v in seen.items() if len(v) > 1][:10]}"
    epochs: dict[str, list[int]] = {}
    for (epoch, shard), in seen.values():
        epochs.setdefault(shard, []).append(epoch)
    lineage = {s["ShardId"]: [p for p in (s.get("ParentShardId"), s.get("AdjacentParentShardId")) if p]
               for s in kinesis.list_shards(StreamName=unique_name)["Shards"]}
    for child, parents in lineage.items():
        for parent in parents:
            if child in epochs and parent in epochs:
                assert min(epochs[child]) > max(epochs[parent]), f"{child} read before its parent {parent} ended"
    assert sum(1 for parents in lineage.values() if len(parents) == 2 and all(p in epochs for p in parents)) == 1
    assert (calls.count("SubscribeToShard") > 0) == (mode == "efo"), calls.count("SubscribeToShard")

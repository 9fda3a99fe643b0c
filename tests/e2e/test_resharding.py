"""Resharding's acceptance: two real kcl-mp hosts, a 4-shard stream on kinesis-mock (which
really splits, merges and ends shards), the lease table on moto, real amazon_kclpy children.

A producer writes per-key counters the whole time; mid-run one shard is split and two
others are merged. Every record must be delivered; for every partition key no record of a
child shard may be processed before the last record of that key in its parent; the parents'
leases must be gone once their children are processed, and the table must end with exactly
the open shards' leases, beside the four rows a Java KCL 3.5 fleet keeps in the lease table
(its client version rolled back to CLIENT_VERSION_2X, so the hosts take by the 2.x rules),
which no host counts, syncs, deletes or writes: they end byte for byte as they began.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from pathlib import Path

import boto3
import pytest

from kcl_mp.embedded import wait_active
from kcl_mp.leases.lease import Lease
from kcl_mp.leases.rows import read_items

from ..support.harness import (
    RECORDER,
    BackgroundProducer,
    Daemon,
    assert_takers_count_only_leases,
    base_properties,
    recorded,
    records_only,
    stop_all,
    wait_until,
    write_properties,
)
from ..support.kinesis_mock import split_in_half
from ..support.throttle_proxy import ThrottleProxy

pytestmark = pytest.mark.integration

KEYS = [f"key-{i:02d}" for i in range(32)]


def put_counters(kinesis, stream: str, n: int) -> list:
    """One record per key, data ``<key>:<n>``: per key, n is the order of writing."""
    entries = [{"Data": f"{key}:{n}".encode(), "PartitionKey": key} for key in KEYS]
    for _ in range(20):  # the stream may be UPDATING for a moment: retry what failed
        response = kinesis.put_records(StreamName=stream, Records=entries)
        entries = [e for e, r in zip(entries, response["Records"]) if "ErrorCode" in r]
        if not entries:
            return []
        time.sleep(0.05)
    raise AssertionError(f"put_records kept failing for {len(entries)} records")


def counter_producer(kinesis, stream: str) -> BackgroundProducer:
    return BackgroundProducer(lambda n: put_counters(kinesis, stream, n), every_s=0.1)


def finish(producer: BackgroundProducer) -> set[tuple[str, int]]:
    """Stop the producer; every (key, counter) it wrote."""
    producer.finish()
    return {(key, n) for key in KEYS for n in range(producer.rounds)}


def _delivered(out: Path) -> set[tuple[str, int]]:
    return {(e["pk"], int(e["data"].rsplit(":", 1)[1])) for e in records_only(recorded(out))}


def _checkpointed(out: Path) -> set[str]:
    """The shards whose processor has made a checkpoint that the table took."""
    return {e["_shard"] for e in recorded(out) if e.get("event") == "checkpoint" and not e.get("error")}


def _leases(dynamodb, table: str) -> dict[str, Lease]:
    items = dynamodb.scan(TableName=table, ConsistentRead=True)["Items"]
    return {lease.key: lease for lease in read_items(items).leases}


def _open_shards(kinesis, stream: str) -> set[str]:
    shards = kinesis.list_shards(StreamName=stream)["Shards"]
    return {s["ShardId"] for s in shards if "EndingSequenceNumber" not in s["SequenceNumberRange"]}


def test_split_and_merge_under_two_hosts(tmp_path: Path, kinesis_mock_url, moto_url, dynamodb, unique_name,
                                         java_rows):
    kinesis = boto3.client("kinesis", endpoint_url=kinesis_mock_url, region_name="us-east-1")
    stream, app = unique_name, unique_name + "-app"
    kinesis.create_stream(StreamName=stream, ShardCount=4)
    wait_active(kinesis, stream)
    shards = kinesis.list_shards(StreamName=stream)["Shards"]
    out = tmp_path / "out"
    out.mkdir()
    props = write_properties(tmp_path / "app.properties", **base_properties(
        moto_url, stream, app, f"{sys.executable} {RECORDER}", kinesisEndpoint=kinesis_mock_url,
        failoverTimeMillis=3000, shardSyncIntervalMillis=2000, parentShardPollIntervalMillis=500,
        idleTimeBetweenReadsInMillis=200))
    env = {"RECORDER_DIR": str(out), "RECORDER_CHECKPOINT_EVERY": "40", "RECORDER_LEASES_AT_SHARD_END": f"{app}@{moto_url}"}
    producer = counter_producer(kinesis, stream)
    hosts: dict[str, Daemon] = {}
    java_rows(app)
    producer.start()
    try:
        for name in ("host-a", "host-b"):
            hosts[name] = Daemon(props, tmp_path / f"{name}.log", "--set", f"workerId={name}", "--log-format", "json",
                                 env=env)
            time.sleep(1.0)
        wait_until(lambda: {e["_shard"] for e in records_only(recorded(out))} == {s["ShardId"] for s in shards},
                   60, "records from all four shards")
        wait_until(lambda: {lease.owner for lease in _leases(dynamodb, app).values()} == {"host-a", "host-b"}, 30,
                   "both hosts holding leases")
        time.sleep(2.0)

        first, third, fourth = shards[0], shards[2], shards[3]
        split_in_half(kinesis, stream, first)
        time.sleep(2.0)
        kinesis.merge_shards(StreamName=stream, ShardToMerge=third["ShardId"], AdjacentShardToMerge=fourth["ShardId"])
        wait_active(kinesis, stream)
        open_shards = _open_shards(kinesis, stream)
        # A finished parent's lease goes once its children are processed, i.e. checkpointed past
        # TRIM_HORIZON (Java's rule): produce until each child has a checkpoint (every 40 records)
        # rather than for a fixed time, which a loaded machine turned into 38 records on one child.
        children = open_shards - {s["ShardId"] for s in shards}
        wait_until(lambda: children <= _checkpointed(out), 90, f"a checkpoint on each child {sorted(children)}")
        written = finish(producer)
        parents = {first["ShardId"], third["ShardId"], fourth["ShardId"]}
        wait_until(lambda: written <= _delivered(out), 90, f"all {len(written)} records delivered")
        wait_until(lambda: set(_leases(dynamodb, app)) == open_shards, 60,
                   f"the lease table to hold exactly the open shards {sorted(open_shards)}")
        stop_all(hosts)
    finally:
        producer.stop.set()
        for daemon in hosts.values():
            daemon.kill()

    entries = recorded(out)
    records = records_only(entries)
    assert len(children) == 3, children  # two from the split, one from the merge
    for daemon in hosts.values():  # at most 4 + 3 unfinished leases at any time
        assert_takers_count_only_leases(daemon.output(), range(1, 8))

    # Per key: the parent's records all come before any of the child's, and first deliveries
    # run in the order the counters were written.
    by_key: dict[str, list[dict]] = defaultdict(list)
    for e in records:
        by_key[e["pk"]].append(e)
    crossed = 0
    for key, got in by_key.items():
        in_parent = [e["at"] for e in got if e["_shard"] in parents]
        in_child = [e["at"] for e in got if e["_shard"] in children]
        if in_parent and in_child:
            crossed += 1
            assert max(in_parent) < min(in_child), f"{key}: a child record was processed before the parent's last"
        seen: set[int] = set()
        order = []
        for e in sorted(got, key=lambda e: e["at"]):
            n = int(e["data"].rsplit(":", 1)[1])
            if n not in seen:
                seen.add(n)
                order.append(n)
        assert order == sorted(order), f"{key}: first deliveries out of order"
    assert crossed >= 16, f"only {crossed} keys moved from a parent to a child"

    ended = [e for e in entries if e.get("event") == "shardEnded"]
    assert {e["_shard"] for e in ended} == parents
    listed = kinesis.list_shards(StreamName=stream)["Shards"]
    for e in ended:  # Java's order: the children's leases exist before the processor hears shardEnded
        own = {s["ShardId"] for s in listed if e["_shard"] in (s.get("ParentShardId"), s.get("AdjacentParentShardId"))}
        assert own and own <= set(e["leases"]), (e["_shard"], own, e["leases"])
    checkpoints_at_end = [e for e in entries if e.get("event") == "checkpoint" and e["seq"] is None]
    assert len(checkpoints_at_end) == 3 and not any(e["error"] for e in checkpoints_at_end), checkpoints_at_end
    logs = "".join(daemon.output() for daemon in hosts.values())
    assert "Traceback" not in logs, logs[-3000:]
    for parent in parents:
        assert f"deleted lease {parent}" in logs
    # children came from ChildShards and the leases always covered the key space: the only
    # ListShards calls were each host's start-up sync
    assert logs.count("shard sync (") == logs.count("shard sync (start-up)") == 2, logs.count("shard sync (")
    duplicates = len(records) - len({(e["pk"], e["data"]) for e in records})
    print(f"{len(written)} records written over {producer.rounds} rounds, {len(records)} deliveries "
          f"({duplicates} re-deliveries), {crossed} keys crossed from a parent to a child; "
          f"open shards at the end {sorted(open_shards)}")


def test_a_missed_shard_end_checkpoint_is_retried_loudly_and_cleanup_can_be_off(
        tmp_path: Path, kinesis_mock_url, moto_url, dynamodb, unique_name, java_rows):
    """The processor answers its first shardEnded without a checkpoint. kcl-mp says so, keeps
    the other shard going, holds the children back, and ends the shard with a fresh processor.
    With cleanupLeasesUponShardCompletion=false the finished parent's lease stays, at
    SHARD_END, naming its children."""
    kinesis = boto3.client("kinesis", endpoint_url=kinesis_mock_url, region_name="us-east-1")
    stream, app = unique_name, unique_name + "-app"
    java_rows(app)
    kinesis.create_stream(StreamName=stream, ShardCount=2)
    wait_active(kinesis, stream)
    shards = kinesis.list_shards(StreamName=stream)["Shards"]
    parent, other = shards[0]["ShardId"], shards[1]["ShardId"]
    out = tmp_path / "out"
    out.mkdir()
    props = write_properties(tmp_path / "app.properties", **base_properties(
        moto_url, stream, app, f"{sys.executable} {RECORDER}", kinesisEndpoint=kinesis_mock_url,
        failoverTimeMillis=3000, shardSyncIntervalMillis=2000, parentShardPollIntervalMillis=500,
        idleTimeBetweenReadsInMillis=200, cleanupLeasesUponShardCompletion="false"))
    env = {"RECORDER_DIR": str(out), "RECORDER_CHECKPOINT_EVERY": "40", "RECORDER_SHARD_END_REFUSALS": "1"}
    producer = counter_producer(kinesis, stream)
    producer.start()
    daemon = Daemon(props, tmp_path / "host.log", "--set", "workerId=host-a", env=env)
    try:
        wait_until(lambda: {e["_shard"] for e in records_only(recorded(out))} == {parent, other}, 60,
                   "records from both shards")
        split_in_half(kinesis, stream, shards[0])
        time.sleep(5.0)
        written = finish(producer)
        children = _open_shards(kinesis, stream) - {other}
        wait_until(lambda: written <= _delivered(out), 90, f"all {len(written)} records delivered")
        daemon.stop_gracefully()
    finally:
        producer.stop.set()
        daemon.kill()

    log = daemon.output()
    assert (f"shard {parent}: the processor did not checkpoint at the end of the shard; its children cannot start "
            "until it does; restart 1 of 5") in log
    assert log.count("did not checkpoint at the end of the shard") == 1
    assert f"shard {parent} ended and was checkpointed at SHARD_END" in log
    entries = recorded(out)
    refused_at = next(e for e in entries if e.get("event") == "shardEndNotCheckpointed")
    ended_at = [e for e in entries if e.get("event") == "checkpoint" and e["seq"] is None and e["_shard"] == parent]
    assert len(ended_at) == 1 and ended_at[0]["error"] is None
    records = records_only(entries)
    first_child_record = min(e["at"] for e in records if e["_shard"] in children)
    last_parent_record = max(e["at"] for e in records if e["_shard"] == parent)
    assert last_parent_record < first_child_record
    assert len(list(out.glob(f"{parent}.*.jsonl"))) == 2  # the first processor, then the one that ended it
    kept_going = [e for e in records if e["_shard"] == other and refused_at["at"] < e["at"] < ended_at[0]["at"]]
    assert kept_going, "the other shard paused while this one retried its shard end"
    for child in children:
        assert f"lease {child} waits for its parent shard(s) {parent} to reach SHARD_END" in log
    leases = _leases(dynamodb, app)
    assert set(leases) == {parent, other} | children
    assert leases[parent].is_shard_end and set(leases[parent].child_shard_ids) == children
    assert "deleted lease" not in log


def test_the_processor_hears_shard_end_only_once_its_childrens_leases_exist(tmp_path: Path, kinesis_mock_url,
                                                                            moto_url, unique_name):
    """Java's order at a shard's end: the children's leases first, then shardEnded. Each lease
    write (PutItem) is made a second slow (a proxy in front of DynamoDB), so a processor told
    before the supervisor has written them would find them missing at its SHARD_END checkpoint:
    a host that dies right then leaves the children to the next shard-sync audit."""
    kinesis = boto3.client("kinesis", endpoint_url=kinesis_mock_url, region_name="us-east-1")
    stream, app = unique_name, unique_name + "-app"
    kinesis.create_stream(StreamName=stream, ShardCount=1)
    wait_active(kinesis, stream)
    proxy = ThrottleProxy(moto_url, "dynamodb", seed=1, share=0.0, slow_share=0.0, delays={"PutItem": 1.0})
    out = tmp_path / "out"
    out.mkdir()
    props = write_properties(tmp_path / "app.properties", **base_properties(
        moto_url, stream, app, f"{sys.executable} {RECORDER}", kinesisEndpoint=kinesis_mock_url,
        dynamoDBEndpoint=proxy.url, failoverTimeMillis=10000, shardSyncIntervalMillis=600000,
        idleTimeBetweenReadsInMillis=200))
    daemon = Daemon(props, tmp_path / "run.log", env={"RECORDER_DIR": str(out), "RECORDER_CHECKPOINT_EVERY": "10",
                                                      "RECORDER_LEASES_AT_SHARD_END": f"{app}@{moto_url}"})
    try:
        parent = kinesis.list_shards(StreamName=stream)["Shards"][0]
        put_counters(kinesis, stream, 0)
        wait_until(lambda: len(records_only(recorded(out))) >= len(KEYS), 60, "the parent's records delivered")
        split_in_half(kinesis, stream, parent)
        wait_until(lambda: any(e.get("event") == "shardEnded" for e in recorded(out)), 60, "the parent's shardEnded")
        daemon.stop_gracefully()
    finally:
        daemon.kill()
        proxy.stop()
    children = {s["ShardId"] for s in kinesis.list_shards(StreamName=stream)["Shards"]
                if s.get("ParentShardId") == parent["ShardId"]}
    ended = [e for e in recorded(out) if e.get("event") == "shardEnded"]
    assert len(children) == 2 and len(ended) == 1, (children, ended)
    assert children <= set(ended[0]["leases"]), f"shardEnded came before the leases of {children}: {ended[0]['leases']}"
    assert "no word in" not in daemon.output()

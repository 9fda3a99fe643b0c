"""The lease coordinator's shard sync against real emulators: ListShards on kinesis-mock
(paging, the filter for an empty table), the lease table on moto. A shard end whose
children were never created (the host died in between) is found by the audit and repaired;
a finished parent is deleted only once its children are being processed."""

from __future__ import annotations

import logging
import random

import boto3
import pytest

from kcl_mp.config import load_config
from kcl_mp.embedded import wait_active
from kcl_mp.leases.lease import Lease
from kcl_mp.leases.table import LeaseTable
from kcl_mp.logs import ShardLog
from kcl_mp.retrieval import kinesis_shards
from kcl_mp.sequence import ExtendedSequenceNumber
from kcl_mp.supervisor.coordinator import LeaseCoordinator

from ..support.harness import base_properties, write_properties
from ..support.kinesis_mock import split_in_half

pytestmark = pytest.mark.integration


def _coordinator(tmp_path, kinesis, kinesis_mock_url, moto_url, dynamodb, stream, app, **keys):
    props = write_properties(tmp_path / "app.properties", **base_properties(
        moto_url, stream, app, "true", kinesisEndpoint=kinesis_mock_url, workerId="host-a", **keys))
    table = LeaseTable(dynamodb, app)
    table.ensure_table()
    return LeaseCoordinator(load_config(props), table, kinesis, ShardLog(logging.getLogger("test"), "host-a"),
                            lambda: 0.0, random.Random(1))


def _split_first(kinesis, stream) -> tuple[str, list[str]]:
    first = kinesis.list_shards(StreamName=stream)["Shards"][0]
    split_in_half(kinesis, stream, first)
    children = [s["ShardId"] for s in kinesis.list_shards(StreamName=stream)["Shards"]
                if s.get("ParentShardId") == first["ShardId"]]
    return first["ShardId"], children


def test_paging_the_empty_table_filter_and_an_interrupted_shard_end(
        tmp_path, kinesis_mock_url, moto_url, dynamodb, unique_name, monkeypatch):
    kinesis = boto3.client("kinesis", endpoint_url=kinesis_mock_url, region_name="us-east-1")
    stream, app = unique_name, unique_name + "-app"
    kinesis.create_stream(StreamName=stream, ShardCount=5)
    wait_active(kinesis, stream)
    parent, children = _split_first(kinesis, stream)
    monkeypatch.setattr(kinesis_shards, "LIST_SHARDS_PAGE", 2)  # 7 shards: four pages
    coordinator = _coordinator(tmp_path, kinesis, kinesis_mock_url, moto_url, dynamodb, stream, app,
                               initialPositionInStream="LATEST")
    assert len(coordinator.sync.list_shards()) == 7

    # Empty table, LATEST: the shards open now (AT_LATEST): not the closed parent.
    assert coordinator.sync.sync_shards({}, "test")
    table = coordinator.table
    keys = {lease.key for lease in table.list_leases()}
    assert parent not in keys and set(children) <= keys and len(keys) == 6

    # The parent's lease as an interrupted shard end left it: SHARD_END, no child leases.
    for child in children:
        dynamodb.delete_item(TableName=app, Key={"leaseKey": {"S": child}})
    table.create_if_absent(Lease(parent, checkpoint=ExtendedSequenceNumber("SHARD_END")))
    coordinator.last_seen = {lease.key: lease for lease in table.list_leases()}
    assert coordinator.sync.audit() and not set(children) & {lease.key for lease in table.list_leases()}  # seen once
    assert coordinator.sync.confirming  # the loop audits again a failover time later, not an interval
    assert coordinator.sync.audit() and not coordinator.sync.confirming  # seen twice: the sync runs
    after = {lease.key: lease for lease in table.list_leases()}
    assert set(children) <= set(after)
    assert all(after[c].checkpoint.sequence_number == "TRIM_HORIZON" and after[c].parent_shard_ids == (parent,)
               for c in children)
    assert parent in after  # its children have not started yet

    # Once both children checkpointed, the next audit deletes the parent (no ListShards needed).
    for child in children:
        table.take(after[child], "host-a")
        assert table.checkpoint(child, "host-a", ExtendedSequenceNumber("49000000000000000000000000001")) is None
    coordinator.last_seen = {lease.key: lease for lease in table.list_leases()}
    calls = []
    monkeypatch.setattr(coordinator.sync, "list_shards", lambda *a: calls.append(a) or [])
    assert coordinator.sync.audit()
    assert parent not in {lease.key for lease in table.list_leases()}
    assert calls == [], "the audit listed shards although the leases covered the key space"


def test_each_stream_of_a_multi_stream_application_is_synced_under_its_own_keys(
        tmp_path, kinesis_mock_url, moto_url, dynamodb, unique_name, monkeypatch):
    """Two streams, one of them split: each stream's leases under its own keys, its shard end
    repaired and its finished parent deleted within its stream, the other stream untouched."""
    kinesis = boto3.client("kinesis", endpoint_url=kinesis_mock_url, region_name="us-east-1")
    resharded, other, app = unique_name + "-r", unique_name + "-o", unique_name + "-app"
    for stream, count in ((resharded, 2), (other, 1)):
        kinesis.create_stream(StreamName=stream, ShardCount=count)
        wait_active(kinesis, stream)
    parent, children = _split_first(kinesis, resharded)
    props = write_properties(tmp_path / "app.properties", **{
        k: v for k, v in base_properties(moto_url, resharded, app, "true", kinesisEndpoint=kinesis_mock_url,
                                         workerId="host-a", initialPositionInStream="LATEST").items()
        if k != "streamName"}, streamNames=f"{resharded},{other}")
    config = load_config(props)
    table = LeaseTable(dynamodb, app, config.stream_names)
    table.ensure_table()
    coordinator = LeaseCoordinator(config, table, kinesis, ShardLog(logging.getLogger("test"), "host-a"),
                                   lambda: 0.0, random.Random(1))
    coordinator.sync.describe_stream()
    assert coordinator.sync.sync_shards({}, "test")
    leases = {lease.key: lease for lease in table.list_leases()}
    ids = {lease.stream.name: lease.stream for lease in leases.values()}
    r, o = ids[resharded], ids[other]
    summary = kinesis.describe_stream_summary(StreamName=resharded)["StreamDescriptionSummary"]
    assert r.creation_epoch == int(summary["StreamCreationTimestamp"].timestamp() * 1000)
    assert r.account == summary["StreamARN"].split(":")[4]
    assert set(leases) == {r.lease_key(s) for s in (*children, "shardId-000000000001")} | {
        o.lease_key("shardId-000000000000")}

    # The resharded stream's parent as an interrupted shard end left it: the audit repairs it.
    for child in children:
        dynamodb.delete_item(TableName=app, Key={"leaseKey": {"S": r.lease_key(child)}})
    table.create_if_absent(Lease(r.lease_key(parent), checkpoint=ExtendedSequenceNumber("SHARD_END"), stream=r))
    coordinator.last_seen = {lease.key: lease for lease in table.list_leases()}
    assert coordinator.sync.audit() and coordinator.sync.audit()  # seen twice: the sync runs
    after = {lease.key: lease for lease in table.list_leases()}
    for child in children:
        lease = after[r.lease_key(child)]
        assert (lease.stream, lease.checkpoint.sequence_number, lease.parent_shard_ids) == (r, "TRIM_HORIZON", (parent,))
        assert lease.parent_keys == (r.lease_key(parent),)
    assert r.lease_key(parent) in after  # its children have not started yet

    for child in children:
        table.take(after[r.lease_key(child)], "host-a")
        assert table.checkpoint(r.lease_key(child), "host-a", ExtendedSequenceNumber("49000000000000000000001")) is None
    coordinator.last_seen = {lease.key: lease for lease in table.list_leases()}
    assert coordinator.sync.audit()
    assert {lease.key for lease in table.list_leases()} == {
        *(r.lease_key(c) for c in children), r.lease_key("shardId-000000000001"), o.lease_key("shardId-000000000000")}

    # A shard end read here: its children are created from ChildShards, under its stream's keys.
    ended = o.lease_key("shardId-000000000000")
    child = {"ShardId": "shardId-000000000009", "ParentShards": ["shardId-000000000000"],
             "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": "340282366920938463463374607431768211455"}}
    assert coordinator.sync.create_children(ended, [child])
    created = table.get(o.lease_key("shardId-000000000009"))
    assert created is not None and created.stream == o and created.parent_keys == (ended,)
    assert table.get(ended).child_shard_ids == ("shardId-000000000009",)

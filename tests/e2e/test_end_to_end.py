"""The walking skeleton's acceptance: the real CLI, a real moto server, real amazon_kclpy children.

A 4-shard stream with 20,000 user records (8,000 through fan-out) (10% of the puts KPL-aggregated, five user
records each). kcl-mp delivers every record exactly once, with the right key, data,
sequence and sub-sequence numbers; SIGTERM ends it cleanly with final checkpoints and
released leases; a second run resumes after the checkpoints.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from collections import Counter
from pathlib import Path

import boto3
import pytest

from kcl_mp.devtools.producer import produce
from kcl_mp.embedded import ensure_stream

from ..support.harness import RECORDER, Daemon, base_properties, recorded, records_only, wait_until, write_properties

pytestmark = pytest.mark.integration
REFERENCE = Path(__file__).resolve().parents[1] / "fixtures" / "java_kcl_3.1.3_tables.json"


def scan(dynamodb, table):
    return dynamodb.scan(TableName=table, ConsistentRead=True)["Items"]


@pytest.mark.parametrize("mode,count", [("POLLING", 20_000), ("FANOUT", 8_000)])
def test_consumes_every_record_once_then_resumes(mode, count, request, tmp_path, dynamodb, moto_url, unique_name):
    """POLLING: GetRecords on moto. FANOUT: SubscribeToShard on kinesis-mock (moto has no
    SubscribeToShard), through the framing proxy; the lease table stays on moto. FANOUT puts
    fewer records: kinesis-mock takes puts at about a third of moto's rate."""
    kinesis, more_keys = request.getfixturevalue("kinesis"), {}
    if mode == "FANOUT":
        proxy = request.getfixturevalue("efo_proxy")
        kinesis = boto3.client("kinesis", endpoint_url=proxy.url, region_name="us-east-1")
        more_keys = {"retrievalMode": "FANOUT", "kinesisEndpoint": proxy.url}
    stream, app = unique_name, unique_name + "-app"
    ensure_stream(kinesis, stream, 4)
    started = time.monotonic()
    puts = produce(kinesis, stream, count, aggregated_share=0.1, per_aggregate=5, seed=1)
    assert len(puts) == count and len({p.shard_id for p in puts}) == 4
    assert sum(1 for p in puts if p.sub_sequence_number > 0) > count // 20  # aggregates really are there
    out = tmp_path / "out"
    out.mkdir()
    props = write_properties(tmp_path / "app.properties", **base_properties(
        moto_url, stream, app, f"{sys.executable} {RECORDER}", **more_keys))
    env = {"RECORDER_DIR": str(out), "RECORDER_CHECKPOINT_EVERY": "500"}

    daemon = Daemon(props, tmp_path / "run1.log", env=env)
    try:
        wait_until(lambda: len(records_only(recorded(out))) >= count, 180, f"{count:,} records delivered")
        delivered_at = time.monotonic() - started
        daemon.signal(signal.SIGTERM)
        assert daemon.wait(60) == 0, daemon.output()[-3000:]
    finally:
        daemon.kill()
    print(f"first run: {count:,} records delivered {delivered_at:.1f} s after the first put")

    entries = recorded(out)
    got = records_only(entries)
    assert len(got) == count, Counter(json.loads(e["data"])["id"] for e in got).most_common(3)
    by_id = {json.loads(e["data"])["id"]: e for e in got}
    assert len(by_id) == count
    for put in puts:
        e = by_id[put.id]
        assert (e["_shard"], e["pk"], e["data"], e["seq"], e["sub"]) == (
            put.shard_id, put.partition_key, put.data, put.sequence_number, put.sub_sequence_number), put
    # Every child: initialize first, shutdownRequested then leaseLost last (PROTOCOL.md 5.4).
    for pid in {e["_pid"] for e in entries}:
        events = [e["event"] for e in entries if e["_pid"] == pid and "event" in e and e["event"] != "checkpoint"]
        assert events == ["initialize", "shutdownRequested", "leaseLost"], events
    assert not [e for e in entries if e.get("event") == "checkpoint" and e["error"]]

    # The lease table: the Java schema, each shard's last record checkpointed, leases released.
    last = {}
    for put in puts:
        key = (int(put.sequence_number), put.sub_sequence_number)
        if put.shard_id not in last or key > last[put.shard_id]:
            last[put.shard_id] = key
    items = {i["leaseKey"]["S"]: i for i in scan(dynamodb, app)}
    assert set(items) == set(last)
    java_types = next(iter(json.loads(REFERENCE.read_text())["while_running"].values()))["attribute_types"]
    for key, item in items.items():
        assert (int(item["checkpoint"]["S"]), int(item["checkpointSubSequenceNumber"]["N"])) == last[key]
        assert "leaseOwner" not in item, f"{key} was not released"
        for name, value in item.items():
            if name in java_types:
                assert list(value) == java_types[name], name
        assert set(java_types) - {"leaseOwner"} <= set(item), set(java_types) - set(item)

    # A second run resumes after the checkpoints and re-delivers nothing before them.
    more = produce(kinesis, stream, 1_000, first_id=count, seed=2)
    daemon = Daemon(props, tmp_path / "run2.log", env=env)
    try:
        wait_until(lambda: len(records_only(recorded(out))) >= count + 1_000, 120, "1,000 more records delivered")
        daemon.signal(signal.SIGTERM)
        assert daemon.wait(60) == 0, daemon.output()[-3000:]
    finally:
        daemon.kill()
    first_pids = {e["_pid"] for e in entries}  # once: a set built per record cost minutes of CPU at 20,000
    after = recorded(out)
    second = [e for e in records_only(after) if e["_pid"] not in first_pids]
    assert sorted(json.loads(e["data"])["id"] for e in second) == sorted(p.id for p in more)
    inits = [e for e in after if e.get("event") == "initialize" and e["_pid"] not in first_pids]
    assert {(e["shard"], int(e["seq"]), e["sub"]) for e in inits} == {(k, *v) for k, v in last.items()}


def test_sigterm_during_processing(tmp_path, kinesis, dynamodb, moto_url, unique_name):
    """SIGTERM while processors are busy: shutdownRequested to each, final checkpoints, released, exit 0."""
    stream, app = unique_name, unique_name + "-app"
    ensure_stream(kinesis, stream, 4)
    produce(kinesis, stream, 4_000, seed=3)
    out = tmp_path / "out"
    out.mkdir()
    props = write_properties(tmp_path / "app.properties", **base_properties(
        moto_url, stream, app, f"{sys.executable} {RECORDER}", maxRecords=100, shutdownGraceMillis=20000))
    env = {"RECORDER_DIR": str(out), "RECORDER_CHECKPOINT_EVERY": "1000000", "RECORDER_BATCH_DELAY_S": "0.3"}
    daemon = Daemon(props, tmp_path / "run.log", env=env)
    try:
        wait_until(lambda: len({e["_shard"] for e in records_only(recorded(out))}) == 4, 90,
                   "every shard processing")
        assert len(records_only(recorded(out))) < 4_000, "the run must still be busy when SIGTERM arrives"
        signalled = time.monotonic()
        daemon.signal(signal.SIGTERM)
        assert daemon.wait(40) == 0, daemon.output()[-3000:]
        took = time.monotonic() - signalled
    finally:
        daemon.kill()
    print(f"stopped {took:.1f} s after SIGTERM")
    entries = recorded(out)
    items = {i["leaseKey"]["S"]: i for i in scan(dynamodb, app)}
    assert len(items) == 4
    for pid in {e["_pid"] for e in entries}:
        mine = [e for e in entries if e["_pid"] == pid]
        events = [e["event"] for e in mine if "event" in e and e["event"] != "checkpoint"]
        assert events == ["initialize", "shutdownRequested", "leaseLost"], events
        last = [e for e in mine if "event" not in e][-1]
        final = [e for e in mine if e.get("event") == "checkpoint"][-1]
        assert final["error"] is None and (final["seq"], final["sub"]) == (last["seq"], last["sub"])
        item = items[mine[0]["_shard"]]
        assert (item["checkpoint"]["S"], int(item["checkpointSubSequenceNumber"]["N"])) == (last["seq"], last["sub"])
        assert "leaseOwner" not in item

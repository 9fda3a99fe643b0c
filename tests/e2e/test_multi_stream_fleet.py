"""Issue 32's acceptance run: three real kcl-mp hosts, twelve Kinesis streams of 1 to 8 shards on
kinesis-mock (which really splits, merges and ends shards), the lease table on moto, in both KCL
modes. Eleven streams are read by the unchanged amazon_kclpy recorder (the application's
executableName, or for two of them their own ``stream.<name>.executableName``), one by Node's
aws-kcl sample processor (its own too). A producer writes per-key counters to every
stream the whole time; while it runs, one shard of one stream is split, two shards of another are
merged, a host is SIGKILLed (supervisor, pool and processors), a thirteenth stream is appended to the
list file and one is removed.

The judge (``redelivered`` and the checks below) finds:
- every record put is delivered, to a processor of its own stream that ran that stream's command
  (the application's processor finds its stream in KCL_STREAM_NAME); a record delivered twice only
  where the processor that got it first had not checkpointed it and never did (it died with the
  killed host, or lost its lease): the at-least-once the KCL promises, nothing more;
- per stream and key, first deliveries in the order written, and no record of a child shard
  delivered before the last of its parent(s);
- the Node stream's leases checkpointed at their last record, its processor told its stream (aws-kcl
  passes initialize's streamName on); each recorder told its stream (KCL_STREAM_IDENTIFIER, the
  stream its lease's key names);
- the leases are Java's multi-stream items, their epoch the stream's creation time; the list file
  names the streams by ARN in one mode, by name in the other;
- at the end, the lease table holds exactly the open shards of the listed streams (the parents
  deleted once their children ran, the removed stream's leases deleted after the wait), all held
  by the two live hosts, max - min <= 1.
"""

from __future__ import annotations

import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import boto3
import pytest

from kcl_mp.embedded import wait_active
from kcl_mp.leases.lease import not_a_lease
from kcl_mp.leases.multi_stream import split_key
from kcl_mp.leases.rows import read_items

from ..support.fleet_findings import redelivered
from ..support.harness import (
    RECORDER,
    ROOT,
    BackgroundProducer,
    Daemon,
    base_properties,
    log_lines,
    recorded,
    records_only,
    stop_all,
    wait_until,
    write_properties,
)
from ..support.kinesis_mock import create_streams, split_in_half

pytestmark = pytest.mark.integration

# Twelve streams at start, a thirteenth appended: its index and role.
SHARDS = (8, 1, 2, 1, 3, 1, 2, 1, 1, 2, 1, 1, 2)
SPLIT, MERGE, NODE_STREAM, REMOVED, APPENDED = 2, 4, 5, 11, 12
OWN_COMMAND = (SPLIT, APPENDED)  # streams with a stream.<name>.executableName of their own (the Node one too)
KEYS = [f"key-{i:02d}" for i in range(24)]  # per round, one record per key in every stream
HOSTS = ("host-a", "host-b", "host-c")
KILLED = "host-c"
NODE = ROOT / "kcl_mp" / "processors" / "nodejs" / "sample_processor.js"
WAIT_MS = 2000  # waitPeriodToDeleteFormerStreamsMillis


class Producer:
    """Per round n, ``stream:key:n`` under each key to every stream in ``to``; ``puts``: (stream, shard,
    sequence number, key, n) of each record Kinesis took."""

    def __init__(self, kinesis, streams: list[str]):
        self.kinesis, self.to = kinesis, list(streams)
        self.thread = BackgroundProducer(self.round, every_s=0.4)

    def round(self, n: int) -> list[tuple[str, str, str, str, int]]:
        done = []
        for stream in list(self.to):
            entries = [{"Data": f"{stream}:{key}:{n}".encode(), "PartitionKey": key} for key in KEYS]
            for _ in range(40):  # a stream being resharded is UPDATING for a moment: retry what failed
                response = self.kinesis.put_records(StreamName=stream, Records=entries)
                done += [(stream, r["ShardId"], r["SequenceNumber"], e["PartitionKey"], n)
                         for e, r in zip(entries, response["Records"]) if "ErrorCode" not in r]
                entries = [e for e, r in zip(entries, response["Records"]) if "ErrorCode" in r]
                if not entries:
                    break
                time.sleep(0.05)
            else:
                raise AssertionError(f"put_records to {stream} kept failing")
        return done

    def written(self, stream: str) -> set[tuple[str, int]]:
        return {(key, n) for s, _, _, key, n in self.thread.puts if s == stream}


@pytest.mark.parametrize("mode", ["CLIENT_VERSION_CONFIG_3X", "CLIENT_VERSION_CONFIG_COMPATIBLE_WITH_2X"])
def test_three_hosts_twelve_streams_reshard_kill_add_remove(mode: str, tmp_path: Path, kinesis_mock_url: str,
                                                            moto_url: str, dynamodb, unique_name: str) -> None:
    began = time.monotonic()
    kinesis = boto3.client("kinesis", endpoint_url=kinesis_mock_url, region_name="us-east-1")
    names = [f"{unique_name}-{i:02d}" for i in range(len(SHARDS))]
    create_streams(kinesis, dict(zip(names, SHARDS, strict=True)))
    first_shards = {name: kinesis.list_shards(StreamName=name)["Shards"] for name in names}
    summaries = {name: kinesis.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"] for name in names}
    # the list file names the streams by ARN in one mode, by name (with regionName) in the other
    line = {name: summaries[name]["StreamARN"] if mode.endswith("3X") else name for name in names}
    listing = tmp_path / "streams.txt"
    listing.write_text("".join(f"{line[name]}\n" for name in names[:APPENDED]))
    out = tmp_path / "out"
    recorder = f"{sys.executable} {RECORDER}"
    # The application's processor: the recorder, in the directory of the stream kcl-mp names in
    # KCL_STREAM_NAME (shard ids repeat across streams); OWN_COMMAND's streams have their own.
    default = tmp_path / "default_processor.sh"
    default.write_text(f"#!/bin/sh\nexec env RECORDER_DIR={out}/$KCL_STREAM_NAME RECORDER_HOST=default {recorder}\n")
    default.chmod(0o755)
    keys = {k: v for k, v in base_properties(
        moto_url, names[0], unique_name, str(default), kinesisEndpoint=kinesis_mock_url, clientVersionConfig=mode,
        # failover 6 s: on a busy machine, moto answers a renewal in over a second at times
        failoverTimeMillis=6000, shardSyncIntervalMillis=2000, parentShardPollIntervalMillis=500,
        idleTimeBetweenReadsInMillis=500,
        streamListFile=listing, streamListReadIntervalMillis=1000, waitPeriodToDeleteFormerStreamsMillis=WAIT_MS,
        formerStreamsLeasesDeletionStrategy="FORMER_STREAMS_AUTO_DETECTION_DEFERRED_DELETION").items()
        if k != "streamName"}
    for i, name in enumerate(names):  # each stream's recorder writes in a directory of its own
        (out / name).mkdir(parents=True)
        if i in OWN_COMMAND:
            keys[f"stream.{name}.executableName"] = f"env RECORDER_DIR={out / name} RECORDER_HOST=own {recorder}"
    keys[f"stream.{names[NODE_STREAM]}.executableName"] = f"node {NODE}"
    hosts = {name: Daemon(write_properties(tmp_path / f"{name}.properties", **keys, workerId=name),
                          tmp_path / f"{name}.log", "--log-format", "json",
                          env={"RECORDER_CHECKPOINT_EVERY": "1",
                               "RECORDER_STDERR_ENV": "KCL_STREAM_IDENTIFIER"}) for name in HOSTS}
    producer = Producer(kinesis, names)
    kclpy = [name for i, name in enumerate(names) if i != NODE_STREAM]
    live = [name for name in HOSTS if name != KILLED]
    marks: dict[str, float] = {}

    def entries() -> list[dict]:
        """What every recorder wrote, ``_shard`` made ``stream/shard`` (shard ids repeat across streams)."""
        return [{**e, "_shard": f"{name}/{e['_shard']}"} for name in kclpy for e in recorded(out / name)]

    def delivered(stream: str) -> set[tuple[str, int]]:
        return {(e["pk"], int(e["data"].rsplit(":", 1)[1])) for e in records_only(recorded(out / stream))}

    def removed_and_delivered() -> bool:
        """Once its records are all delivered, the stream is taken off the list file."""
        if producer.thread.rounds > removed_at and all_delivered([names[REMOVED]]):
            listing.write_text("".join(f"{line[name]}\n" for name in names[:REMOVED] + [names[APPENDED]]))
            return True
        return False

    def undelivered(streams: list[str]) -> dict[str, list[tuple[str, int]]]:
        """Per stream, the records written and not delivered yet (a few of them)."""
        return {s: sorted(missing)[:5] for s in streams if (missing := producer.written(s) - delivered(s))}

    def all_delivered(streams: list[str]) -> bool:
        return not undelivered(streams)

    def leases() -> dict[str, str | None]:
        try:
            items = dynamodb.scan(TableName=unique_name, ConsistentRead=True)["Items"]
        except dynamodb.exceptions.ResourceNotFoundException:  # no host has created it yet
            return {}
        return {lease.key: lease.owner for lease in read_items(items, names).leases}

    def open_shards() -> set[str]:
        """The open shards of the listed streams, as lease keys end (``:stream:epoch:shardId``)."""
        found = set()
        for name in names[:REMOVED] + [names[APPENDED]]:
            found |= {f"{name}/{s['ShardId']}" for s in kinesis.list_shards(StreamName=name)["Shards"]
                      if "EndingSequenceNumber" not in s["SequenceNumberRange"]}
        return found

    def settled() -> bool:
        held = leases()
        found = {f"{key.split(':')[1]}/{key.rsplit(':', 1)[1]}" for key in held}
        count = Counter(held.values())
        return found == open_shards() and set(count) == set(live) and max(count.values()) - min(count.values()) <= 1

    producer.thread.start()
    try:
        wait_until(lambda: all(records_only(recorded(out / s)) for s in kclpy[:-1]) and
                   {owner for owner in leases().values()} == set(HOSTS), 120,
                   "records from every kclpy stream, leases on all three hosts")
        marks["running"] = time.monotonic() - began
        producer.to.remove(names[REMOVED])  # written no more: drained, then taken off the list below
        removed_at = producer.thread.rounds  # the round under way may still write to it
        split_in_half(kinesis, names[SPLIT], first_shards[names[SPLIT]][0])
        kinesis.merge_shards(StreamName=names[MERGE], ShardToMerge=first_shards[names[MERGE]][1]["ShardId"],
                             AdjacentShardToMerge=first_shards[names[MERGE]][2]["ShardId"])
        wait_active(kinesis, names[MERGE])
        time.sleep(1.0)  # records on the children before the kill
        hosts[KILLED].kill()
        killed_at = time.time()
        wait_until(removed_and_delivered, 60, f"the records of {names[REMOVED]} delivered, then it removed")
        time.sleep(2.0)
        producer.thread.finish()
        marks["produced"] = time.monotonic() - began
        try:
            wait_until(lambda: all_delivered(kclpy), 120, "every record of the kclpy streams delivered")
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {undelivered(kclpy)}") from None
        wait_until(settled, 90, f"the open shards' leases balanced over {live}")
        marks["settled"] = time.monotonic() - began
        stop_all({name: hosts[name] for name in live})
    finally:
        producer.thread.stop.set()
        for daemon in hosts.values():
            daemon.kill()
    marks["stopped"] = time.monotonic() - began

    found = entries()
    strays = [e for e in records_only(found) if not e["data"].startswith(e["_shard"].split("/")[0] + ":")]
    assert not strays, strays[:5]  # each record went to a processor of its own stream
    commands = {(e["_shard"].split("/")[0], e["host"]) for e in found if e.get("event") == "initialize"}
    assert commands == {(name, "own" if i in OWN_COMMAND else "default") for i, name in enumerate(names)
                        if i != NODE_STREAM}, commands  # each stream's processor ran its stream's command
    assert not (problems := redelivered(found)), problems[:10]
    twice = len(records_only(found)) - len({(e["_shard"], e["seq"], e["sub"]) for e in records_only(found)})
    lineage = {f"{name}/{s['ShardId']}": [f"{name}/{p}" for p in (s.get("ParentShardId"), s.get("AdjacentParentShardId"))
                                          if p] for name in names for s in kinesis.list_shards(StreamName=name)["Shards"]}
    by_key: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for e in records_only(found):
        by_key[e["_shard"].split("/")[0], e["pk"]].append(e)
    crossed = 0
    for (stream, key), got in by_key.items():
        first: dict[int, float] = {}
        for e in sorted(got, key=lambda e: e["at"]):
            first.setdefault(int(e["data"].rsplit(":", 1)[1]), e["at"])
        assert list(first) == sorted(first), f"{stream} {key}: first deliveries out of order"
        for child, parents in lineage.items():
            in_child = [e["at"] for e in got if e["_shard"] == child]
            in_parents = [e["at"] for e in got if e["_shard"] in parents]
            if in_child and in_parents:
                crossed += 1
                assert max(in_parents) < min(in_child), f"{child} {key}: delivered before its parents' last"
    assert crossed >= len(KEYS), f"only {crossed} keys crossed from a parent to a child"

    last_put = {}
    for stream, shard, seq, _, _ in producer.thread.puts:
        if stream == names[NODE_STREAM]:
            last_put[shard] = max(last_put.get(shard, 0), int(seq))
    node = {lease.key.rsplit(":", 1)[1]: lease.checkpoint for lease in read_items(
        dynamodb.scan(TableName=unique_name, ConsistentRead=True)["Items"], names).leases
        if f":{names[NODE_STREAM]}:" in lease.key}
    assert {shard: str(cp.sequence_number) for shard, cp in node.items() if cp} == {
        shard: str(seq) for shard, seq in last_put.items()}, (node, last_put)

    events = [entry for name in HOSTS for _, entry in log_lines(hosts[name].output())]
    assert {e["stream"] for e in events if e.get("event") == "stream_added"} == {names[APPENDED]}
    deleted = [e for e in events if e.get("event") == "stream_deleted" and e["stream"] == names[REMOVED]]
    assert sum(e["leases"] for e in deleted) == SHARDS[REMOVED], deleted
    assert not [e for e in events if "Traceback" in e.get("msg", "")]
    items = [item for item in dynamodb.scan(TableName=unique_name, ConsistentRead=True)["Items"]
             if not not_a_lease(item, names)]
    for item in items:  # Java's multi-stream items, the epoch the stream's creation time
        stream, shard = split_key(item["leaseKey"]["S"]) or (None, None)
        assert stream is not None and shard is not None, item
        summary = summaries[stream.name]
        assert (stream.account, stream.creation_epoch) == (
            summary["StreamARN"].split(":")[4], int(summary["StreamCreationTimestamp"].timestamp() * 1000))
        assert (item["streamName"], item["shardId"]) == ({"S": stream.serialized}, {"S": shard})
    told = [e for e in events if e["msg"].startswith("processor stderr: KCL_STREAM_IDENTIFIER=")]
    for e in told:  # each recorder was told the stream its lease's key names
        assert e["msg"].rpartition("=")[2] == e["shard"].rpartition(":")[0], e
    assert {e["shard"] for e in told} >= {item["leaseKey"]["S"] for item in items
                                           if f":{names[NODE_STREAM]}:" not in item["leaseKey"]["S"]}
    assert any(e["msg"].startswith(f"processor stderr: sample_processor.js {names[NODE_STREAM]}/shardId-")
               for e in events)  # aws-kcl passed the initialize's streamName on to the Node processor
    print(f"{mode}: {len(producer.thread.puts)} records over {producer.thread.rounds} rounds, {twice} delivered twice "
          f"(all after the first processor's last checkpoint, {KILLED} killed at {killed_at:.1f}); {crossed} keys "
          f"crossed from a parent; phases (s) {({k: round(v, 1) for k, v in marks.items()})}")

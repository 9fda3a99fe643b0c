"""Many streams in one application (issue 32): two real kcl-mp hosts, four Kinesis streams of 1, 2,
4 and 1 shards on moto, in both KCL modes; the unchanged amazon_kclpy recorder processes the first
three, Node's aws-kcl sample processor the fourth.

Every record is delivered once, to a processor of its own stream (the third and fourth have their
own executableName); each processor is told its stream: the recorder prints KCL_STREAM_IDENTIFIER
at initialize (the daemon logs it under the lease's key), the Node sample names the streamName
aws-kcl passed it from initialize in every line; the leases are Java's multi-stream items, their
epoch the stream's creation time; the eight leases are balanced over the two hosts (max - min <= 1).
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

import pytest

from kcl_mp.devtools.producer import produce
from kcl_mp.embedded import ensure_stream
from kcl_mp.leases.multi_stream import split_key

from ..support.harness import (
    RECORDER,
    ROOT,
    Daemon,
    EmbeddedHost,
    base_properties,
    log_lines,
    recorded,
    records_only,
    stop_all,
    wait_until,
    write_properties,
)

pytestmark = pytest.mark.integration
SHARDS = (1, 2, 4, 1)
PER_STREAM = 300
NODE = ROOT / "kcl_mp" / "processors" / "nodejs" / "sample_processor.js"


@pytest.mark.parametrize("mode", ["CLIENT_VERSION_CONFIG_3X", "CLIENT_VERSION_CONFIG_COMPATIBLE_WITH_2X"])
def test_two_hosts_three_streams(mode: str, tmp_path: Path, kinesis, dynamodb, moto_url: str, unique_name: str) -> None:
    names = [f"{unique_name}-{i}" for i in range(len(SHARDS))]
    own, node = names[2], names[3]  # the streams with their own processor commands
    arns, created_ms, stream_of_id, last_put = {}, {}, {}, {}
    for i, (name, shards) in enumerate(zip(names, SHARDS, strict=True)):
        ensure_stream(kinesis, name, shards)
        summary = kinesis.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]
        arns[name], created_ms[name] = summary["StreamARN"], int(summary["StreamCreationTimestamp"].timestamp() * 1000)
        for put in produce(kinesis, name, PER_STREAM, first_id=i * 100_000, seed=i):
            stream_of_id[put.id] = name
            last_put[name] = max(last_put.get(name, 0), int(put.sequence_number))
    out = tmp_path / "out"
    out.mkdir()
    recorder = f"{sys.executable} {RECORDER}"
    # streamArns in one mode, streamNames (with regionName) in the other: both ways of naming them
    listed = {"streamArns": ",".join(arns.values())} if mode.endswith("3X") else {"streamNames": ",".join(names)}
    keys = {k: v for k, v in base_properties(moto_url, names[0], unique_name, f"env RECORDER_HOST=default {recorder}",
                                             clientVersionConfig=mode, **listed).items() if k != "streamName"}
    keys[f"stream.{own}.executableName"] = f"env RECORDER_HOST={own} {recorder}"
    keys[f"stream.{node}.executableName"] = f"node {NODE}"
    env = {"RECORDER_DIR": str(out), "RECORDER_CHECKPOINT_EVERY": "50", "RECORDER_STDERR_ENV": "KCL_STREAM_IDENTIFIER"}
    hosts = {name: Daemon(write_properties(tmp_path / f"{name}.properties", **keys, workerId=name),
                          tmp_path / f"{name}.log", "--log-format", "json", env=env) for name in ("host-a", "host-b")}
    leases = sum(SHARDS)

    def owners() -> Counter:
        items = dynamodb.scan(TableName=unique_name, ConsistentRead=True).get("Items", [])
        return Counter(item.get("leaseOwner", {}).get("S") for item in items if "leaseCounter" in item)

    def node_checkpoint() -> str | None:
        items = dynamodb.scan(TableName=unique_name, ConsistentRead=True).get("Items", [])
        return next((item["checkpoint"]["S"] for item in items if f":{node}:" in item["leaseKey"]["S"]
                     and "checkpoint" in item), None)

    def balanced() -> bool:
        found = owners()
        return sum(found.values()) == leases and set(found) == set(hosts) and max(found.values()) - min(
            found.values()) <= 1

    try:
        to_kclpy = {n for n, stream in stream_of_id.items() if stream != node}
        wait_until(lambda: len(records_only(recorded(out))) >= len(to_kclpy), 240, f"{len(to_kclpy)} records delivered")
        wait_until(lambda: node_checkpoint() == str(last_put[node]), 120, f"{node}'s last record checkpointed")
        wait_until(balanced, 120, f"the {leases} leases balanced over both hosts")
        stop_all(hosts)
    finally:
        for daemon in hosts.values():
            daemon.kill()

    entries = recorded(out)
    got = records_only(entries)
    delivered = Counter(json.loads(e["data"])["id"] for e in got)
    assert set(delivered) == to_kclpy and delivered.most_common(1)[0][1] == 1, delivered.most_common(3)
    counted = [re.search(rf"sample_processor.js {node}/shardId-000000000000: shutting down after (\d+) records",
                         entry["msg"]) for daemon in hosts.values() for _, entry in log_lines(daemon.output())]
    assert sum(int(found.group(1)) for found in counted if found) == PER_STREAM  # each child counts its own
    for pid in {e["_pid"] for e in entries}:  # each processor reads one stream, with that stream's command
        mine = [e for e in entries if e["_pid"] == pid]
        streams = {stream_of_id[json.loads(e["data"])["id"]] for e in records_only(mine)}
        assert len(streams) <= 1, (pid, streams)
        host = next(e["host"] for e in mine if e.get("event") == "initialize")
        assert not streams or host == ("default" if streams != {own} else own), (pid, streams, host)

    items = dynamodb.scan(TableName=unique_name, ConsistentRead=True)["Items"]
    lease_items = [item for item in items if "leaseCounter" in item and "entityType" not in item
                   or item.get("entityType") == {"S": "LEASE"}]
    assert len(lease_items) == leases
    for item in lease_items:  # Java's multi-stream items, the epoch the stream's creation time
        split = split_key(item["leaseKey"]["S"])
        assert split is not None, item
        stream, shard = split
        assert (stream.account, stream.creation_epoch) == (arns[stream.name].split(":")[4], created_ms[stream.name])
        assert (item["streamName"], item["shardId"]) == ({"S": stream.serialized}, {"S": shard})

    told = [entry for daemon in hosts.values() for _, entry in log_lines(daemon.output())
            if entry["msg"].startswith("processor stderr: KCL_STREAM_IDENTIFIER=")]
    assert told, "no processor printed its KCL_STREAM_IDENTIFIER"
    for line in told:  # the lease's key names the stream its processor was told
        assert line["msg"].rpartition("=")[2] == line["shard"].rpartition(":")[0], line
    assert {line["shard"] for line in told} >= {item["leaseKey"]["S"] for item in lease_items
                                                 if f":{node}:" not in item["leaseKey"]["S"]}


def test_the_embedded_demo_creates_every_stream_and_leases_shows_their_leases(tmp_path: Path, unique_name: str
                                                                             ) -> None:
    """``kcl-mp --embedded`` creates each listed stream; ``kcl-mp leases`` reads their leases (and
    shows them under their multi-stream keys)."""
    names = [f"{unique_name}-a", f"{unique_name}-b"]
    host = EmbeddedHost(tmp_path, unique_name, streamNames=",".join(names))
    try:
        host.wait_for_leases(f"lease table {unique_name}: 4 leases (4 active, 0 finished) on 1 workers",
                             "the four leases of the two streams in kcl-mp leases")
        host.daemon.stop_gracefully()
    finally:
        host.daemon.kill()
    for name in names:
        assert f"created stream {name} with 2 shards" in host.daemon.output()
        assert len([line for line in host.shown[-1].stdout.splitlines() if f":{name}:" in line]) == 2, host.shown[-1].stdout


WAIT_MS = 3000  # waitPeriodToDeleteFormerStreamsMillis: short, the drain and the deletion in one test


@pytest.mark.parametrize("mode", ["CLIENT_VERSION_CONFIG_3X", "CLIENT_VERSION_CONFIG_COMPATIBLE_WITH_2X"])
def test_a_stream_appended_and_one_removed_while_two_hosts_run(mode: str, tmp_path: Path, kinesis, dynamodb,
                                                               moto_url: str, unique_name: str) -> None:
    """Two hosts read a list file of two streams (re-read every second); once every record is
    delivered, one stream is removed and a third appended. Every record of the appended stream is
    delivered; the removed one is drained: each of its leases released by a host after its
    processor's last checkpoint, at its last record (the recorder checkpoints only on
    shutdownRequested here), then, out of the list for WAIT_MS, its leases deleted."""
    kept, gone, added = (f"{unique_name}-{x}" for x in ("kept", "gone", "added"))
    stream_of_id, last_seq = {}, {}  # record id -> its stream; (stream, shard) -> its last sequence number
    for i, (name, shards) in enumerate(((kept, 1), (gone, 2), (added, 2))):
        ensure_stream(kinesis, name, shards)
        for put in produce(kinesis, name, 120, first_id=i * 100_000, seed=i, aggregated_share=0):
            stream_of_id[put.id] = name
            last_seq[name, put.shard_id] = max(last_seq.get((name, put.shard_id), 0), int(put.sequence_number))
    listing = tmp_path / "streams.txt"
    listing.write_text(f"{kept}\n{gone}\n")
    out = tmp_path / "out"
    out.mkdir()
    keys = {k: v for k, v in base_properties(
        moto_url, kept, unique_name, f"{sys.executable} {RECORDER}", clientVersionConfig=mode, streamListFile=listing,
        streamListReadIntervalMillis=1000, waitPeriodToDeleteFormerStreamsMillis=WAIT_MS,
        formerStreamsLeasesDeletionStrategy="FORMER_STREAMS_AUTO_DETECTION_DEFERRED_DELETION").items()
        if k != "streamName"}
    env = {"RECORDER_DIR": str(out), "RECORDER_CHECKPOINT_EVERY": "100000"}
    hosts = {name: Daemon(write_properties(tmp_path / f"{name}.properties", **keys, workerId=name),
                          tmp_path / f"{name}.log", "--log-format", "json", env=env) for name in ("host-a", "host-b")}

    def delivered(*streams: str) -> set[int]:
        return {json.loads(e["data"])["id"] for e in records_only(recorded(out))} & {
            n for n, stream in stream_of_id.items() if stream in streams}

    def events(kind: str) -> list[dict]:
        return [entry for daemon in hosts.values() for _, entry in log_lines(daemon.output())
                if entry.get("event") == kind]

    def drained_at_last_record() -> bool:
        """Each shard of the removed stream released by a host at its last record's checkpoint."""
        released = {(split_key(e["lease"])[1], e["checkpoint"]) for e in events("lease_released")  # type: ignore[index]
                    if e.get("stream") == gone}
        return all((shard, str(seq)) in released for (name, shard), seq in last_seq.items() if name == gone)

    def gone_leases() -> int:
        items = dynamodb.scan(TableName=unique_name, ConsistentRead=True)["Items"]
        return sum(f":{gone}:" in item["leaseKey"]["S"] for item in items)

    try:
        first = {n for n, stream in stream_of_id.items() if stream != added}
        wait_until(lambda: delivered(kept, gone) == first, 120, f"the {len(first)} records of the first two streams")
        listing.write_text(f"{kept}\n# {gone} removed\n{added}\n")
        wait_until(drained_at_last_record, 60, f"{gone} drained, each lease at its last record's checkpoint")
        third = {n for n, stream in stream_of_id.items() if stream == added}
        wait_until(lambda: delivered(added) == third, 60, f"the {len(third)} records of {added}, appended")
        wait_until(lambda: gone_leases() == 0, 30, f"the leases of {gone} deleted after {WAIT_MS} ms")
        stop_all(hosts)
    finally:
        for daemon in hosts.values():
            daemon.kill()

    got = Counter(json.loads(e["data"])["id"] for e in records_only(recorded(out)))
    assert set(got) == set(stream_of_id) and got.most_common(1)[0][1] == 1, got.most_common(3)
    for kind, stream in (("stream_added", added), ("stream_draining", gone), ("stream_drained", gone),
                         ("stream_deletion_scheduled", gone)):  # every host saw the change
        assert {e["worker"] for e in events(kind) if e["stream"] == stream} == set(hosts), kind
    deleted = [e for e in events("stream_deleted") if e["stream"] == gone]
    assert sum(e["leases"] for e in deleted) == 2, deleted
    drained = max((d["ts"] for d in events("stream_drained")), default=float("-inf"))
    started_after = [e for e in events("lease_taken") + events("lease_kept") + events("lease_handed_in")
                     if f":{gone}:" in e["lease"] and e["ts"] > drained]
    assert not started_after, started_after  # a drained stream is taken and assigned by nobody

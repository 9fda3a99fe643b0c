"""Hostile input on the record path and on a processor's stdout (issue 27, findings 3, 4 and 5),
with a real kcl-mp daemon on moto and real processor processes (tests/processors/hostile.py).

- KPL aggregates expand about 33 times into processRecords lines: ten 1 MB aggregates of
  170,000 empty user records (1.7 million user records in one GetRecords page) reach the
  processor whole, once each and in order, in calls of at most kclmp.maxRecordsCount records,
  checkpointed between the calls; the pool process's memory grows by a bounded amount (the
  figure is printed, against the default bounds: 3 batches, 8 MiB, 30,000 records per shard).
- Stdout lines that once killed the daemon's reader are skipped with their reason; the
  processor is never restarted for them; a checkpoint at a sequence number that is not a
  Kinesis sequence number gets IllegalArgumentException.
- A processor writing a 16 MiB line and 5,000 unsolicited 65 KB statuses: the pool process's
  memory stays bounded, and the shard fails naming the bound on unread messages.

Memory is the pool process's RSS (psutil), sampled every 50 ms from just before the records
are put until the processor has them all; the pool process is the processor's parent.
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from aws_kinesis_agg.aggregator import RecordAggregator
from aws_kinesis_agg.deaggregator import messages_pb2

from kcl_mp.embedded import ensure_stream, wait_active
from kcl_mp.multilang.child import MAX_QUEUED_BYTES
from kcl_mp.retrieval.deaggregate import DIGEST_SIZE, MAGIC

from ..support.harness import (
    RECORDER,
    ROOT,
    Daemon,
    base_properties,
    recorded,
    records_only,
    wait_until,
    write_properties,
)

pytestmark = pytest.mark.integration

HOSTILE = ROOT / "tests" / "processors" / "hostile.py"
USERS_PER_AGGREGATE = 170_000
AGGREGATES = 10
MB = 1 << 20
# What the pool process may grow by while one shard takes the ten aggregates: the default
# prefetch (3 batches, 8 MiB of lines, 30,000 user records) plus the batch being written, the
# GetRecords page (10 MB of base64) and the batch being made (30,000 user records as dicts).
GROWTH_BOUND_MB = 160


def aggregate(users: int) -> bytes:
    """A KPL aggregate in aws_kinesis_agg's format (its schema, magic and digest): ``users``
    empty user records under one partition key, 6 bytes each."""
    record = messages_pb2.AggregatedRecord()
    record.partition_key_table.append("k")
    for _ in range(users):
        record.records.add(partition_key_index=0, data=b"")
    body = record.SerializeToString()
    assert len(MAGIC) + len(body) + DIGEST_SIZE < MB
    return MAGIC + body + hashlib.md5(body).digest()


class PeakRss(threading.Thread):
    """The largest RSS of one process while running."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.process = psutil.Process(pid)
        self.start_rss = self.peak = self.process.memory_info().rss
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.05):
            try:
                self.peak = max(self.peak, self.process.memory_info().rss)
            except psutil.NoSuchProcess:
                return

    def growth_mb(self) -> float:
        self.done.set()
        self.join(5)
        return (self.peak - self.start_rss) / MB


def states(directory: Path) -> list[dict]:
    """What each processor child wrote about itself (hostile.py), oldest child first."""
    found = []
    for path in sorted(directory.glob("*.json"), key=lambda p: p.stat().st_mtime):
        try:
            found.append(json.loads(path.read_text()))
        except ValueError:
            continue  # being replaced
    return found


def start(tmp_path: Path, moto_url: str, kinesis, unique_name: str, mode: str) -> tuple[Daemon, Path, str]:
    stream, app = unique_name, unique_name + "-app"
    ensure_stream(kinesis, stream, 1)
    out = tmp_path / "states"
    out.mkdir()
    props = write_properties(tmp_path / "app.properties", **base_properties(
        moto_url, stream, app, f"{sys.executable} {HOSTILE} {mode}", maxRecords=10000, **{"kclmp.workerProcesses": 1}))
    daemon = Daemon(props, tmp_path / "run.log", env={"HOSTILE_DIR": str(out)})
    wait_until(lambda: bool(states(out)), 90, "the processor's initialize")
    return daemon, out, stream


def test_ten_kpl_aggregates_reach_the_processor_whole_within_bounded_memory(tmp_path, kinesis, moto_url,
                                                                            unique_name):
    daemon, out, stream = start(tmp_path, moto_url, kinesis, unique_name, "count")
    try:
        data = aggregate(USERS_PER_AGGREGATE)
        time.sleep(1.0)  # the pool process settles after starting the processor
        rss = PeakRss(states(out)[0]["pool"])
        rss.start()
        for _ in range(AGGREGATES):
            kinesis.put_record(StreamName=stream, Data=data, PartitionKey="k")
        put = time.monotonic()
        total = USERS_PER_AGGREGATE * AGGREGATES
        wait_until(lambda: states(out)[-1]["records"] >= total, 240, f"{total} user records", interval=0.2)
        took = time.monotonic() - put
        growth = rss.growth_mb()
        state = states(out)[-1]
        print(f"\nten 1 MB aggregates, {total} user records: {state['calls']} processRecords calls of at most "
              f"{state['max_call_records']} records and {state['max_line'] / MB:.1f} MB; pool process RSS "
              f"{rss.start_rss / MB:.0f} MB -> peak {rss.peak / MB:.0f} MB (+{growth:.0f} MB; bounds: 3 batches, "
              f"8 MiB, 30,000 user records per shard); delivered in {took:.1f} s")
        assert len(states(out)) == 1, "the processor was restarted"
        assert state["records"] == total and state["disorder"] == 0, state  # each once, in order
        assert state["max_call_records"] <= 30_000 and state["calls"] >= total // 30_000, state
        assert state["max_line"] <= 8 * MB + 1024, state
        assert set(state["errors"]) == {None}, state["errors"]  # checkpointed between the calls
        assert growth < GROWTH_BOUND_MB, f"pool process grew {growth:.0f} MB"
        daemon.stop_gracefully()
    finally:
        daemon.kill()


def test_stdout_lines_that_are_not_messages_are_skipped_with_their_reason(tmp_path, kinesis, moto_url, unique_name):
    daemon, out, stream = start(tmp_path, moto_url, kinesis, unique_name, "bad-lines")
    try:
        for n in range(3):
            kinesis.put_record(StreamName=stream, Data=f"r{n}".encode(), PartitionKey="k")
        wait_until(lambda: states(out)[-1]["records"] >= 3, 60, "three records")
        log = daemon.output()
        skipped = [line for line in log.splitlines() if "Skipping unexpected line on STDOUT" in line]
        reasons = [line.rsplit("[", 1)[-1] for line in skipped]
        assert sum("JSON nested too deeply to decode" in r for r in reasons) == 2, skipped  # [ x2000, responseFor
        assert sum("does not start with '{': not a message (not decoded)" in r for r in reasons) == 1, skipped
        assert sum("subSequenceNumber is not a whole number" in r for r in reasons) == 2, skipped  # 1e999, 5000 digits
        assert states(out)[-1]["errors"][0] == "IllegalArgumentException"  # 5,000 digits: no sequence number
        assert len(states(out)) == 1 and log.count("processor started:") == 1, "the processor was restarted"
        assert "closed its stdout" not in log and "Traceback" not in log
        daemon.stop_gracefully()
    finally:
        daemon.kill()


def test_a_processor_flooding_stdout_costs_bounded_memory_and_fails_its_shard(tmp_path, kinesis, moto_url,
                                                                              unique_name):
    daemon, out, stream = start(tmp_path, moto_url, kinesis, unique_name, "flood")
    try:
        rss = PeakRss(states(out)[0]["pool"])
        rss.start()
        kinesis.put_record(StreamName=stream, Data=b"first", PartitionKey="k")
        wait_until(lambda: states(out)[-1]["records"] >= 1, 60, "the first record")
        time.sleep(5.0)  # the 5,000 statuses are read (and all but the bound's worth dropped) meanwhile
        growth = rss.growth_mb()
        kinesis.put_record(StreamName=stream, Data=b"second", PartitionKey="k")  # the next exchange fails
        limit = f"more than {MAX_QUEUED_BYTES} bytes of messages nobody asked for"
        wait_until(lambda: limit in daemon.output(), 60, "the shard failed naming the bound")
        log = daemon.output()
        print(f"\na 16 MiB line and 5,000 unsolicited 65 KB statuses: pool process RSS {rss.start_rss / MB:.0f} MB "
              f"-> peak {rss.peak / MB:.0f} MB (+{growth:.0f} MB; unread messages bounded at "
              f"{MAX_QUEUED_BYTES // MB} MiB)")
        assert "too long for a message (at most 1048576 bytes), not decoded" in log
        assert f"processor failed: processor for shardId-000000000000 wrote {limit}" in log
        assert growth < 100, f"pool process grew {growth:.0f} MB"
        daemon.stop_gracefully()
    finally:
        daemon.kill()


def test_a_kpl_record_put_on_the_wrong_shard_reaches_its_processor_once_from_the_right_one(
        tmp_path, kinesis, moto_url, unique_name):
    """As the Java KCL: an aggregate put with a stale shard map holds a user record of another
    shard's hash range; the KPL sends that record again to its shard (its wrong-shard retry), and
    the copy in the aggregate is dropped, so the processor gets it once."""
    stream = unique_name
    kinesis.create_stream(StreamName=stream, ShardCount=2)
    wait_active(kinesis, stream)
    shards = sorted(kinesis.list_shards(StreamName=stream)["Shards"],
                    key=lambda s: int(s["HashKeyRange"]["StartingHashKey"]))
    upper = int(shards[1]["HashKeyRange"]["StartingHashKey"])

    def hashed(key: str) -> int:
        return int(hashlib.md5(key.encode()).hexdigest(), 16)

    keys = [f"key-{i}" for i in range(100)]
    mine, theirs = next(k for k in keys if hashed(k) < upper), next(k for k in keys if hashed(k) >= upper)
    agg = RecordAggregator()
    agg.add_user_record(mine, b'{"id": 1}')
    agg.add_user_record(theirs, b'{"id": 2}')  # belongs to the other shard
    _, _, blob = agg.clear_and_get().get_contents()
    kinesis.put_record(StreamName=stream, Data=blob, PartitionKey=mine)  # lands on the first shard
    kinesis.put_record(StreamName=stream, Data=b'{"id": 2}', PartitionKey=theirs)  # the KPL's re-send
    out = tmp_path / "out"
    out.mkdir()
    props = write_properties(tmp_path / "app.properties", **base_properties(
        moto_url, stream, unique_name, f"{sys.executable} {RECORDER}", initialPositionInStream="TRIM_HORIZON"))
    daemon = Daemon(props, tmp_path / "run.log", env={"RECORDER_DIR": str(out)})
    try:
        wait_until(lambda: len(records_only(recorded(out))) >= 2, 90, "two records")
        time.sleep(3)  # anything more would have come by now
        got = sorted((json.loads(r["data"])["id"], r["_shard"]) for r in records_only(recorded(out)))
        assert got == [(1, shards[0]["ShardId"]), (2, shards[1]["ShardId"])], got
        daemon.stop_gracefully()
    finally:
        daemon.kill()

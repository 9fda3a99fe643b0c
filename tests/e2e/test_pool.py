"""The worker pool's acceptance: a pool process that dies costs only its shards, and one host
drives many shards while keeping every lease renewed on time (a real kcl-mp host on moto, real
processors)."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from kcl_mp.config.load import load_config
from kcl_mp.devtools.producer import produce
from kcl_mp.embedded import ensure_stream
from kcl_mp.leases.table import LeaseTable

from ..support.harness import (
    RECORDER,
    BackgroundProducer,
    Daemon,
    base_properties,
    recorded,
    records_only,
    wait_until,
    write_properties,
)

pytestmark = [pytest.mark.integration, pytest.mark.timing]

ROOT = Path(__file__).resolve().parents[2]
STARTED = re.compile(r"started shard worker for (\S+) \(pool process (\d+), pid (\d+)\)")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_pool_process_killed_costs_only_its_shards_a_restart_from_their_checkpoints(
        tmp_path, kinesis, dynamodb, moto_url, unique_name):
    stream, app = unique_name, unique_name + "-app"
    ensure_stream(kinesis, stream, 4)
    out = tmp_path / "out"
    out.mkdir()
    props = write_properties(tmp_path / "app.properties", **base_properties(
        moto_url, stream, app, f"{sys.executable} {RECORDER}", failoverTimeMillis=3000,
        **{"kclmp.workerProcesses": 2}))
    producer = BackgroundProducer(lambda n: produce(kinesis, stream, 40, first_id=n * 40, aggregated_share=0.0,
                                                    keys=64, seed=n), every_s=0.25)
    producer.start()
    daemon = Daemon(props, tmp_path / "host.log", "--set", "workerId=host-a",
                    env={"RECORDER_DIR": str(out), "RECORDER_CHECKPOINT_EVERY": "10"})
    table = LeaseTable(dynamodb, app)
    try:
        def each_shard_checkpointed() -> bool:
            try:
                return sum(1 for lease in table.list_leases() if lease.checkpoint and
                           not lease.checkpoint.is_sentinel) == 4
            except Exception:
                return False  # the table is being created

        wait_until(each_shard_checkpointed, 60, "every shard's first checkpoint")
        placed = {m[0]: (int(m[1]), int(m[2])) for m in STARTED.findall(daemon.output())}
        assert len(placed) == 4 and {index for index, _ in placed.values()} == {1, 2}, placed
        victim_pid = next(pid for index, pid in placed.values() if index == 1)
        victims = sorted(key for key, (index, _) in placed.items() if index == 1)
        processors = {e["_pid"] for e in recorded(out) if e.get("event") == "initialize" and e["_shard"] in victims}
        os.kill(victim_pid, signal.SIGKILL)
        wait_until(lambda: not any(_alive(pid) for pid in processors), 30, "its processors to be stopped")
        at_kill = {lease.key: lease.checkpoint.sequence_number for lease in table.list_leases()}
        wait_until(lambda: all(len(list(out.glob(f"{key}.*.jsonl"))) == 2 for key in victims), 60,
                   "its shards' restart")
        time.sleep(2.0)
        producer.finish()
        ids = {p.id for p in producer.puts}
        wait_until(lambda: ids <= {json.loads(e["data"])["id"] for e in records_only(recorded(out))}, 90,
                   f"all {len(ids)} records delivered")
        stopping = time.monotonic()
        daemon.stop_gracefully()
        stop_s = time.monotonic() - stopping
    finally:
        producer.stop.set()
        daemon.kill()
    log = daemon.output()
    assert "Traceback" not in log, log[-3000:]
    # Every pool process (the restarted one too) saw its pipe end at shutdown: none needed a SIGTERM.
    assert "terminated by the supervisor" not in log, (stop_s, log[-3000:])
    line = (f"pool process 1 (pid {victim_pid}) exited with signal SIGKILL; restarting its 2 shards: "
            f"{', '.join(victims)}")
    assert log.count(line) == 1, log[-3000:]
    assert log.count("restart 1 of 5") == 2 and "restart 2 of" not in log, log[-3000:]
    files = {key: sorted(p.name for p in out.glob(f"{key}.*.jsonl")) for key in placed}
    assert all(len(names) == (2 if key in victims else 1) for key, names in files.items()), files
    for key in victims:  # the new processor starts where the old one's last checkpoint stands
        first = next(e for e in recorded(out) if e.get("event") == "initialize" and e["_shard"] == key
                     and e["_pid"] not in processors)
        assert first["seq"] == at_kill[key], (first, at_kill[key])


def test_one_host_keeps_64_leases_renewed_on_time_and_every_shard_delivers(
        tmp_path, kinesis, dynamodb, moto_url, unique_name):
    stream, app, shards = unique_name, unique_name + "-app", 64
    ensure_stream(kinesis, stream, shards)
    failover_ms = 10000
    props = write_properties(tmp_path / "app.properties", **base_properties(
        moto_url, stream, app, f"sh {ROOT / 'processors' / 'shell' / 'processor.sh'}",
        failoverTimeMillis=failover_ms, idleTimeBetweenReadsInMillis=2000, shutdownGraceMillis=5000))
    ranges = [s["HashKeyRange"]["StartingHashKey"] for s in kinesis.list_shards(StreamName=stream)["Shards"]]
    assert len(ranges) == shards
    for start in range(0, shards, 16):  # three records for every shard
        kinesis.put_records(StreamName=stream, Records=[
            {"Data": f"r{n}".encode(), "PartitionKey": "k", "ExplicitHashKey": key}
            for key in ranges[start:start + 16] for n in range(3)])
    changes: dict[str, list[tuple[float, int]]] = {}  # lease -> (when seen, counter) at each change
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.2):
            try:
                items = dynamodb.scan(TableName=app, ConsistentRead=True)["Items"]
            except Exception:
                continue  # the table is being created
            now = time.monotonic()
            for item in items:
                if item.get("leaseOwner", {}).get("S") != "host-a":
                    continue
                seen = changes.setdefault(item["leaseKey"]["S"], [])
                counter = int(item["leaseCounter"]["N"])
                if not seen or seen[-1][1] != counter:
                    seen.append((now, counter))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    daemon = Daemon(props, tmp_path / "host.log", "--set", "workerId=host-a")
    table = LeaseTable(dynamodb, app)
    try:
        def all_delivered() -> bool:
            try:
                leases = table.list_leases()
            except Exception:
                return False
            return sum(1 for lease in leases if lease.checkpoint and not lease.checkpoint.is_sentinel) == shards

        started = time.monotonic()
        wait_until(all_delivered, 60, f"every one of {shards} shards to deliver and checkpoint")
        delivered_at = time.monotonic()
        delivered_s = delivered_at - started
        time.sleep(2 * failover_ms / 1000.0)  # six renewal rounds in steady state
        stop.set()
        watcher.join(10)
        daemon.stop_gracefully()
    finally:
        stop.set()
        daemon.kill()
    log = daemon.output()
    assert "Traceback" not in log and "not starting a processor" not in log, log[-3000:]
    assert len(changes) == shards, sorted(changes)
    # Steady state: from each lease's first counter change after every shard delivered. The start-up
    # surge (64 processors starting, each reading its shard at once, on one moto process) is held
    # to failoverTimeMillis: no other host could have taken a lease meanwhile.
    steady = {key: [c for c in seen if c[0] >= delivered_at] for key, seen in changes.items()}
    gaps = {key: max(b[0] - a[0] for a, b in zip(seen, seen[1:])) for key, seen in steady.items() if len(seen) > 1}
    startup = {key: max(b[0] - a[0] for a, b in zip(seen, seen[1:])) for key, seen in changes.items() if len(seen) > 1}
    assert len(gaps) == shards, "a lease was never renewed"
    worst, first = max(gaps, key=gaps.get), max(startup, key=startup.get)
    pools = {index for _, index, _ in STARTED.findall(log)}
    print(f"{shards} shards on {len(pools)} pool processes: every shard delivered after {delivered_s:.1f} s; the "
          f"largest gap between two counter changes {gaps[worst]:.2f} s ({worst}) in steady state, "
          f"{startup[first]:.2f} s ({first}) from the take on")
    # On time: no renewal round missed (a missed one makes a gap of two intervals), as seen by a
    # watcher that scans the table every 0.2 s on a machine whose other tests may hold both cores.
    renew_s = load_config(props).lease.renew_interval_s
    assert gaps[worst] < 2 * renew_s, (worst, gaps[worst], renew_s, changes[worst])
    assert startup[first] < failover_ms / 1000.0, (first, startup[first], changes[first])

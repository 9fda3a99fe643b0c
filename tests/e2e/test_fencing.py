"""Fencing before delivery, each race set up on purpose: real kcl-mp hosts on a moto server,
real amazon_kclpy recorder children, SIGSTOP and SIGCONT.

- A host (or only its supervisor) is stopped past failoverTimeMillis while a second host takes
  its leases. Judged from what the processors recorded and from a poller of the lease table:
  the stopped host delivered nothing, and checkpointed nothing, after the earliest moment the
  other host could take the lease (its last renewal seen in the table + failoverTimeMillis).
  The whole host is stopped kcl-mp first, its processors 0.3 s later (they only wait for kcl-mp
  by then): a line written just before the stop is then read before it, so a processor's
  "got" time is the delivery's. A checkpoint is judged by when it was asked for, since the
  answer to one in flight at the stop arrives only after the resume.
- The restart after a stall: a processor dies, its restart is scheduled, the host stalls, the
  lease is taken elsewhere; the supervisor, resuming, must not start a processor for it.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import sys
import threading
import time

import psutil
import pytest

from kcl_mp.config import load_config
from kcl_mp.devtools.producer import produce
from kcl_mp.embedded import ensure_stream
from kcl_mp.leases.lease import Lease
from kcl_mp.supervisor.loop import Supervisor

from ..support.harness import (
    RECORDER,
    BackgroundProducer,
    Daemon,
    base_properties,
    recorded,
    records_only,
    stop_all,
    wait_until,
    write_properties,
)

pytestmark = [pytest.mark.integration, pytest.mark.timing]

SHARDS = 4
FAILOVER_MS = 5000
FAILOVER_S = FAILOVER_MS / 1000.0


class TablePoller(threading.Thread):
    """Reads the lease table every 0.1 s: for each read, when it finished and each lease's
    (owner, counter). A value first seen by a read finishing at f landed before f."""

    def __init__(self, dynamodb, table: str):
        super().__init__(daemon=True)
        self.dynamodb, self.table = dynamodb, table
        self.stop = threading.Event()
        self.reads: list[tuple[float, dict[str, tuple[str | None, int]]]] = []
        self.lock = threading.Lock()

    def run(self) -> None:
        for _ in range(100_000):  # bounded
            if self.stop.wait(0.1):
                return
            try:
                items = self.dynamodb.scan(TableName=self.table, ConsistentRead=True)["Items"]
            except Exception:
                continue  # the table may not exist yet
            state = {lease.key: (lease.holder, lease.counter) for lease in map(Lease.from_item, items)}
            with self.lock:
                self.reads.append((time.time(), state))

    def owners(self) -> dict[str, str | None]:
        with self.lock:
            return {key: owner for key, (owner, _) in self.reads[-1][1].items()} if self.reads else {}

    def may_take_at(self, key: str, owner: str, after: float) -> float:
        """The latest moment at which another host could have started to take ``key`` from
        ``owner`` (first after ``after``): ``owner``'s last counter in the table before then,
        first seen (so landed) by that read, plus failoverTimeMillis."""
        with self.lock:
            reads = list(self.reads)
        taken = min(at for at, state in reads if at > after and state.get(key, (None,))[0] not in (owner, None))
        last = max((state[key] for at, state in reads if at < taken and state.get(key, (None,))[0] == owner),
                   key=lambda v: v[1])
        first_seen = min(at for at, state in reads if state.get(key) == last)
        return first_seen + FAILOVER_S


def _host_pids(daemon: Daemon) -> tuple[list[int], list[int]]:
    """The supervisor and its shard workers; their processors."""
    root = psutil.Process(daemon.process.pid)
    workers = root.children()
    return [root.pid] + [p.pid for p in workers], [p.pid for w in workers for p in w.children(recursive=True)]


def _signal(pids: list[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def _settle(poller: TablePoller, out) -> list[str]:
    """Wait until each host holds two leases and host-a's processors deliver both of its own;
    its leases."""
    for _ in range(20):  # bounded: a handoff may still be under way
        wait_until(lambda: sorted(map(str, poller.owners().values())) == ["host-a"] * 2 + ["host-b"] * 2, 120,
                   "the two hosts to hold two leases each")
        owners, since = poller.owners(), time.time()
        a_shards = sorted(key for key, owner in owners.items() if owner == "host-a")

        def delivered_by_a(since: float = since, a_shards: list[str] = a_shards) -> bool:
            entries = recorded(out)
            hosts_of = _by_host(entries)
            return {e["_shard"] for e in records_only(entries)
                    if hosts_of.get(e["_pid"]) == "host-a" and e["got"] > since} >= set(a_shards)

        wait_until(delivered_by_a, 60, "host-a's processors to deliver its shards")
        if poller.owners() == owners:
            return a_shards
    raise AssertionError("the leases kept moving")


def _by_host(entries: list[dict]) -> dict[int, str]:
    """Processor pid -> the host that ran it (the recorder writes it at initialize)."""
    return {e["_pid"]: e["host"] for e in entries if e.get("event") == "initialize"}


@pytest.mark.parametrize("pause", ["supervisor", "host"])
def test_a_paused_host_neither_delivers_nor_checkpoints_once_its_leases_may_be_taken(
        tmp_path, kinesis, dynamodb, moto_url, unique_name, pause):
    stream, app = unique_name, unique_name + "-app"
    ensure_stream(kinesis, stream, SHARDS)
    out = tmp_path / "out"
    out.mkdir()
    props = write_properties(tmp_path / "app.properties", **base_properties(
        moto_url, stream, app, f"{sys.executable} {RECORDER}", failoverTimeMillis=FAILOVER_MS, maxRecords=100,
        gracefulLeaseHandoffTimeoutMillis=10000))
    env = {"RECORDER_DIR": str(out), "RECORDER_CHECKPOINT_EVERY": "1"}  # a checkpoint after every batch
    producer = BackgroundProducer(lambda n: produce(kinesis, stream, 40, first_id=n * 40, aggregated_share=0.0,
                                                    keys=64, seed=n), every_s=0.2)
    poller = TablePoller(dynamodb, app)
    hosts: dict[str, Daemon] = {}
    producer.start()
    poller.start()
    try:
        for name in ("host-a", "host-b"):
            hosts[name] = Daemon(props, tmp_path / f"{name}.log", "--set", f"workerId={name}",
                                 env={**env, "RECORDER_HOST": name})
        a_shards = _settle(poller, out)
        kcl_mp, processors = _host_pids(hosts["host-a"])
        pids = kcl_mp[:1] if pause == "supervisor" else kcl_mp + processors
        stopped_at = time.time()
        _signal(pids[:len(kcl_mp)], signal.SIGSTOP)
        time.sleep(0.3)
        _signal(pids[len(kcl_mp):], signal.SIGSTOP)
        wait_until(lambda: all(poller.owners().get(key) == "host-b" for key in a_shards), 60,
                   "host-b to take host-a's leases", interval=0.1)
        time.sleep(2.0)  # a stopped supervisor's workers run on: they must stay fenced
        _signal(pids, signal.SIGCONT)
        resumed_at = time.time()
        print(f"host-a ({pause}) stopped for {resumed_at - stopped_at:.1f} s; host-b took {a_shards}")

        def told_lost() -> bool:
            entries = recorded(out)
            hosts_of = _by_host(entries)
            return all(any(e.get("event") == "leaseLost" and e["_shard"] == key and hosts_of.get(e["_pid"]) == "host-a"
                           for e in entries) for key in a_shards)

        wait_until(told_lost, 60, "host-a's processors of the lost shards to get leaseLost")
        time.sleep(2.0)
        producer.finish()
        stop_all(hosts)
    finally:
        producer.stop.set()
        poller.stop.set()
        for daemon in hosts.values():
            _signal([daemon.process.pid], signal.SIGCONT)
            daemon.kill()
    poller.join(5)

    entries = recorded(out)
    hosts_of = _by_host(entries)
    # host-a's processors from before the pause (after it, host-a may win leases back by handoffs)
    before = {e["_pid"] for e in entries if e.get("event") == "initialize" and e["at"] < stopped_at}
    by_a = [e for e in entries if hosts_of.get(e["_pid"]) == "host-a" and e["_pid"] in before]
    for key in a_shards:
        deadline = poller.may_take_at(key, "host-a", stopped_at)
        delivered = [e["got"] for e in records_only(by_a) if e["_shard"] == key]
        stored = [e["at" if pause == "supervisor" else "asked"] for e in by_a
                  if e["_shard"] == key and e.get("event") == "checkpoint" and not e["error"]]
        assert delivered and stored, f"{key}: host-a delivered or checkpointed nothing before the pause"
        print(f"{key}: host-a's last delivery {deadline - max(delivered):.2f} s and last checkpoint "
              f"{deadline - max(stored):.2f} s before host-b could take the lease")
        late = [got for got in delivered if got >= deadline]
        assert not late, f"{key}: host-a delivered {len(late)} records after host-b could take the lease"
        assert max(stored) < deadline, f"{key}: host-a checkpointed after host-b could take the lease"
        assert max(delivered) < resumed_at, f"{key}: host-a delivered after it resumed"
    log = hosts["host-a"].output()
    if pause == "supervisor":  # its shard drivers ran on: the fence, not a leaseLost, held their batches
        assert "delivery paused for shard" in log
    else:  # the whole host slept: nothing reached a processor until the leases were known lost. Whether a
        # driver's fetched batch met the stale hold first ("delivery paused") or the supervisor's leaseLost
        # did is a race of the resume (a renewal in flight at the stop times out at once on it)
        assert all(f"lost lease {key}" in log for key in a_shards), log[-3000:]
    b_inits = [e for e in entries if e.get("event") == "initialize" and hosts_of.get(e["_pid"]) == "host-b"]
    assert {e["_shard"] for e in b_inits} >= set(a_shards)


def test_a_host_paused_while_a_restart_is_pending_starts_no_processor_for_a_lease_taken_meanwhile(
        tmp_path, kinesis, dynamodb, moto_url, unique_name):
    """Real hosts: host-a's processor of a shard is killed; as soon as its restart is scheduled
    the whole host is stopped; host-b starts and takes both leases; host-a resumes. The order in
    which the resumed supervisor reaches its steps is chance; whatever it is, host-a must not
    initialize a processor for that shard again."""
    stream, app = unique_name, unique_name + "-app"
    ensure_stream(kinesis, stream, 2)
    out = tmp_path / "out"
    out.mkdir()
    props = write_properties(tmp_path / "app.properties", **base_properties(
        moto_url, stream, app, f"{sys.executable} {RECORDER}", failoverTimeMillis=FAILOVER_MS, maxRecords=100))
    env = {"RECORDER_DIR": str(out), "RECORDER_CHECKPOINT_EVERY": "1"}
    producer = BackgroundProducer(lambda n: produce(kinesis, stream, 20, first_id=n * 20, aggregated_share=0.0,
                                                    keys=32, seed=n), every_s=0.2)
    poller = TablePoller(dynamodb, app)
    hosts: dict[str, Daemon] = {"host-a": Daemon(props, tmp_path / "host-a.log", "--set", "workerId=host-a",
                                                 env={**env, "RECORDER_HOST": "host-a"})}
    key = "shardId-000000000000"
    producer.start()
    poller.start()
    try:
        wait_until(lambda: {e["_shard"] for e in records_only(recorded(out))} == {key, "shardId-000000000001"}, 120,
                   "host-a to deliver both shards")
        victim = next(e["_pid"] for e in recorded(out) if e.get("event") == "initialize" and e["_shard"] == key)
        os.kill(victim, signal.SIGKILL)
        wait_until(lambda: f"shard {key}: the processor failed" in hosts["host-a"].output(), 30,
                   "host-a to schedule the restart", interval=0.02)
        kcl_mp, processors = _host_pids(hosts["host-a"])
        _signal(kcl_mp + processors, signal.SIGSTOP)
        stopped_at = time.time()
        pending = hosts["host-a"].output().count(f"started shard worker for {key}") == 1
        hosts["host-b"] = Daemon(props, tmp_path / "host-b.log", "--set", "workerId=host-b",
                                 env={**env, "RECORDER_HOST": "host-b"})
        wait_until(lambda: set(poller.owners().values()) == {"host-b"}, 60, "host-b to take both leases")
        _signal(kcl_mp + processors, signal.SIGCONT)
        wait_until(lambda: f"lost lease {key}" in hosts["host-a"].output(), 30, "host-a to see the lease lost")
        time.sleep(3.0)  # time enough for a wrongful restart to show
        print(f"host-a stopped with the restart {'still pending' if pending else 'already done'}; resumed after "
              f"{time.time() - stopped_at:.1f} s")
        producer.finish()
        stop_all(hosts)
    finally:
        producer.stop.set()
        poller.stop.set()
        for daemon in hosts.values():
            daemon.kill()
    poller.join(5)
    entries = recorded(out)
    late = [e for e in entries if e.get("event") == "initialize" and e["host"] == "host-a" and e["_shard"] == key
            and e["at"] > stopped_at]
    assert not late, f"host-a initialized a processor for {key} after its stall: {late}"


def test_a_restart_after_a_stall_does_not_start_a_processor_for_a_lease_taken_meanwhile(
        tmp_path, kinesis, dynamodb, moto_url, unique_name, monkeypatch, caplog):
    """The supervisor's own steps, in the order the stall left them: the processor died and its
    restart was scheduled; the host stalled past failoverTimeMillis; another host took the
    lease; on waking the supervisor reaches its spawn step before its next renewal."""
    stream, app = unique_name, unique_name + "-app"
    ensure_stream(kinesis, stream, 1)
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setenv("RECORDER_DIR", str(out))
    monkeypatch.setenv("RECORDER_HOST", "host-a")
    props = write_properties(tmp_path / "app.properties", **base_properties(
        moto_url, stream, app, f"{sys.executable} {RECORDER}", failoverTimeMillis=3000, workerId="host-a"))
    caplog.set_level(logging.INFO)
    supervisor = Supervisor(load_config(props), rng=random.Random(7))
    supervisor.table.ensure_table()
    supervisor.leases.join_fleet()  # as the start-up does, before any scan
    supervisor.leases.sync.sync_shards({}, "test")
    supervisor.leases.scan()
    key = "shardId-000000000000"
    assert key in supervisor.leases.held
    producer = BackgroundProducer(lambda n: produce(kinesis, stream, 20, first_id=n * 20, seed=n), every_s=0.3)
    producer.start()
    try:
        supervisor.spawn_workers()
        wait_until(lambda: any(e.get("event") == "initialize" for e in recorded(out)), 60, "the processor to start")
        first = next(e for e in recorded(out) if e.get("event") == "initialize")
        os.kill(first["_pid"], signal.SIGKILL)

        def reaped() -> bool:
            supervisor.reap_workers()
            return key not in supervisor.shards.active

        wait_until(reaped, 30, "the worker to exit after its processor died", interval=0.1)
        assert key in supervisor.restarts and key in supervisor.leases.held, caplog.text[-2000:]
        time.sleep(3.2)  # the stall: no renewal for longer than failoverTimeMillis
        current = supervisor.table.get(key)
        assert supervisor.table.take(current, "host-b") is not None  # what host-b's taker does
        wait_until(lambda: time.monotonic() >= supervisor.restarts[key].not_before, 60, "the restart to be due")
        supervisor.spawn_workers()  # waking: the spawn step comes before the next renewal
        assert key not in supervisor.shards.active, "a processor was started for a lease renewed too long ago"
        assert f"not starting a processor for {key}" in caplog.text
        supervisor.handle_renewal(supervisor.leases.renew())
        supervisor.spawn_workers()
        assert key not in supervisor.leases.held and key not in supervisor.shards.active
        assert f"lost lease {key}" in caplog.text
    finally:
        producer.stop.set()
        supervisor.shards.pools.stop(10)  # each pool process stops the processors it started
    inits = [e for e in recorded(out) if e.get("event") == "initialize"]
    assert len(inits) == 1, inits


def test_a_scan_or_read_showing_another_holder_drops_the_lease_at_once(tmp_path, kinesis, moto_url, unique_name,
                                                                      caplog):
    stream, app = unique_name, unique_name + "-app"
    ensure_stream(kinesis, stream, 2)
    props = write_properties(tmp_path / "app.properties", **base_properties(
        moto_url, stream, app, "true", failoverTimeMillis=3000, workerId="host-a"))
    caplog.set_level(logging.INFO)
    supervisor = Supervisor(load_config(props), rng=random.Random(7))
    leases = supervisor.leases
    supervisor.table.ensure_table()
    leases.join_fleet()  # as the start-up does, before any scan
    leases.sync.sync_shards({}, "test")
    leases.scan()
    assert sorted(leases.held) == ["shardId-000000000000", "shardId-000000000001"]
    for key in leases.held:
        assert supervisor.table.take(supervisor.table.get(key), "host-b") is not None
    leases.scan()
    assert "shardId-000000000000" not in leases.held and "shardId-000000000001" not in leases.held
    assert "lost lease shardId-000000000000: the lease table shows host-b holding it" in caplog.text
    # A read does the same: the one a restart makes to resume from the last checkpoint.
    for key in ("shardId-000000000000", "shardId-000000000001"):
        assert supervisor.table.release(key, "host-b")
    leases.scan()
    assert len(leases.held) == 2
    assert supervisor.table.take(supervisor.table.get("shardId-000000000001"), "host-c") is not None
    leases.refresh("shardId-000000000001")
    assert list(leases.held) == ["shardId-000000000000"]
    assert "lost lease shardId-000000000001: the lease table shows host-c holding it" in caplog.text

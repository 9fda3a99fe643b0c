"""Renewal rounds against a real moto server, on the real clock, through the renewals' own
client (``renewer.renewal_table``): a host holding many leases keeps every one on its
cadence; a throttling storm (the throttle proxy) costs none; a table that does not answer
costs a round about one renew interval, not the sum of every lease's timeouts; and the
renewal threads are gone when a round returns, so a fork after it (the supervisor forks
shard workers between rounds) finds no lock held."""

from __future__ import annotations

import logging
import random
import socket
import threading
import time

import multiprocess
import pytest

from kcl_mp.aws.clients import client
from kcl_mp.config import ClientSettings, Config, load_config
from kcl_mp.leases.fencing import Hold
from kcl_mp.leases.lease import Lease
from kcl_mp.leases.renewer import renewal_table
from kcl_mp.leases.table import LeaseTable
from kcl_mp.logs import ShardLog
from kcl_mp.sequence import ExtendedSequenceNumber
from kcl_mp.supervisor.coordinator import Held, LeaseCoordinator

from ..support.harness import base_properties, write_properties
from ..support.throttle_proxy import ThrottleProxy

pytestmark = [pytest.mark.integration, pytest.mark.timing]

FAILOVER_MS = 3000
ME = "renewing-host"


def _config(tmp_path, endpoint: str, app: str, **more: object) -> Config:
    return load_config(write_properties(tmp_path / "app.properties", **base_properties(
        endpoint, "unused", app, "true", failoverTimeMillis=FAILOVER_MS, workerId=ME, **more)))


def _holding(config: Config, dynamodb, n: int) -> LeaseCoordinator:
    """A coordinator holding ``n`` leases, created and taken in the table directly (on moto)."""
    table = LeaseTable(dynamodb, config.lease.table_name)
    table.ensure_table()
    coordinator = LeaseCoordinator(config, table, None, ShardLog(logging.getLogger("test.renewer"), ME),
                                   time.monotonic, random.Random(1), renewals=renewal_table(config))
    for i in range(n):
        key = f"shardId-{i:012d}"
        table.create_if_absent(Lease(key, checkpoint=ExtendedSequenceNumber("TRIM_HORIZON")))
        sent_at = time.monotonic()
        coordinator.held[key] = Held(table.take(table.get(key), ME), sent_at)
    assert coordinator.renew().lost == ()  # from here every lease was renewed within one round
    return coordinator


def _rounds(coordinator: LeaseCoordinator, seconds: float, during=None) -> tuple[dict[str, list[float]], list[str]]:
    """Renew on the supervisor's cadence (the next round due a renew interval after this one
    started; the first at once) for ``seconds``; each lease's renewal send times, and the
    leases lost."""
    sent: dict[str, list[float]] = {key: [held.renewed_at] for key, held in coordinator.held.items()}
    lost: list[str] = []
    interval_s = coordinator.config.lease.renew_interval_s
    end = time.monotonic() + seconds
    due = time.monotonic()
    while time.monotonic() < end:
        time.sleep(max(0.0, due - time.monotonic()))
        started = time.monotonic()
        if during is not None:
            during(started)
        lost += coordinator.renew().lost
        due = started + interval_s
        for key, held in coordinator.held.items():
            if held.renewed_at != sent[key][-1]:
                sent[key].append(held.renewed_at)
    return sent, lost


class CounterWatch(threading.Thread):
    """Reads the table (directly, not through a proxy) every 0.1 s: the longest time any
    lease's counter stood still, as another host's scans would time it (held that long
    unchanged for failoverTimeMillis, the lease is theirs to take)."""

    def __init__(self, dynamodb, table_name: str):
        super().__init__(daemon=True)
        self.table = LeaseTable(dynamodb, table_name)
        self.stop = threading.Event()
        self.longest: dict[str, float] = {}  # per lease

    def run(self) -> None:
        changed: dict[str, tuple[int, float]] = {}
        for _ in range(100_000):  # bounded
            if self.stop.wait(0.1):
                return
            leases = self.table.list_leases()
            now = time.monotonic()
            for lease in leases:
                counter, since = changed.get(lease.key, (lease.counter, now))
                if counter != lease.counter:
                    counter, since = lease.counter, now
                changed[lease.key] = (counter, since)
                self.longest[lease.key] = max(self.longest.get(lease.key, 0.0), now - since)

    @property
    def still_s(self) -> float:
        return max(self.longest.values(), default=0.0)

    def __enter__(self) -> CounterWatch:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.join(10)


def _largest_gap(sent: dict[str, list[float]]) -> float:
    return max(b - a for times in sent.values() for a, b in zip(times, times[1:]))


def test_a_host_holding_64_leases_renews_each_on_time(tmp_path, moto_url, dynamodb, unique_name, caplog):
    coordinator = _holding(_config(tmp_path, moto_url, unique_name), dynamodb, 64)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="test.renewer"), CounterWatch(dynamodb, unique_name) as watch:
        sent, lost = _rounds(coordinator, 8.0)
    assert lost == [] and len(coordinator.held) == 64
    # "renewed late" (a round started past failover/2) and "renewing ... failed" (a request that
    # timed out on moto, which answers DynamoDB one request at a time, beside another test) are the
    # product's own warnings, not a broken promise; the bounds below are the promise: no renewal
    # let a lease go stale, no counter still for failover
    assert not [r.getMessage() for r in caplog.records if "expired locally" in r.getMessage()]
    assert min(len(times) for times in sent.values()) >= 6  # about 8 rounds each
    gap = _largest_gap(sent)
    print(f"64 leases: largest gap between two renewals of a lease {gap:.3f} s; longest still counter "
          f"in the table {watch.still_s:.3f} s (failover {FAILOVER_MS} ms)")
    # on time: within failover less the fencing margin, so a lease never goes stale (a round missed
    # makes a gap of two intervals, still inside it), on a machine whose other tests may hold both
    # cores; the table's view below is the promise other hosts act on (under failover)
    # A renewal moto did not answer in time (its warning above) costs its lease one round: then
    # only the table's bound below holds (CI on a loaded machine once saw 2.60 s after such a
    # timeout, the fencing limit 2.47 s, the processor's delivery held back meanwhile as designed)
    timed_out = [r.getMessage() for r in caplog.records if "failed (" in r.getMessage()]
    assert gap < Hold(FAILOVER_MS / 1000, 0.0).limit_s or timed_out, gap
    assert watch.still_s < FAILOVER_MS / 1000  # the table's view: read every 0.1 s, on a busy machine
    # the table agrees: every counter moved once per renewal the coordinator made
    table = coordinator.table
    assert {lease.key: lease.counter for lease in table.list_leases()} == \
        {key: held.lease.counter for key, held in coordinator.held.items()}


def test_a_throttling_storm_costs_no_lease(tmp_path, moto_url, dynamodb, unique_name, caplog):
    """30 % of DynamoDB requests throttled for 4.5 s (as the fault run's storm), 16 leases."""
    proxy = ThrottleProxy(moto_url, "dynamodb", seed=7, share=0.05)
    try:
        coordinator = _holding(_config(tmp_path, proxy.url, unique_name), dynamodb, 16)
        caplog.clear()
        storm: list[float] = []
        calm_until = time.monotonic() + 1.5

        def weather(now: float) -> None:
            if not storm and now > calm_until:
                proxy.set_share(0.30)
                storm.append(now)
            elif len(storm) == 1 and now - storm[0] > 4.5:
                proxy.set_share(0.05)
                storm.append(now)

        with caplog.at_level(logging.INFO, logger="test.renewer"), CounterWatch(dynamodb, unique_name) as watch:
            sent, lost = _rounds(coordinator, 9.0, weather)
    finally:
        proxy.stop()
    assert len(storm) == 2 and proxy.counts["throttled:UpdateItem"] >= 10, (storm, proxy.counts)
    failed = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    print(f"storm: {proxy.counts['throttled']} of {proxy.counts['requests']} requests throttled; "
          f"{len(failed)} renewals failed for a round; largest gap {_largest_gap(sent):.3f} s; longest still "
          f"counter in the table {watch.still_s:.3f} s")
    assert lost == [] and len(coordinator.held) == 16
    assert watch.still_s < FAILOVER_MS / 1000  # no lease another host could have taken
    assert not [r for r in caplog.records if "expired locally" in r.getMessage()]
    assert _largest_gap(sent) < FAILOVER_MS / 1000


def test_a_table_that_does_not_answer_costs_a_round_about_one_renew_interval(tmp_path, moto_url, dynamodb,
                                                                             unique_name, caplog):
    """An endpoint that accepts connections and never answers: each renewal tries until the
    next round is due, then until its lease's expiry, which loses it (locally)."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=128)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        config = _config(tmp_path, moto_url, unique_name)
        coordinator = _holding(config, dynamodb, 8)
        caplog.clear()
        silent = _config(tmp_path, f"http://127.0.0.1:{listener.getsockname()[1]}", unique_name)
        coordinator.renewer.table = renewal_table(silent)
        interval_s = config.lease.renew_interval_s
        durations, lost = [], []
        with caplog.at_level(logging.INFO, logger="test.renewer"):
            for _ in range(4):
                started = time.monotonic()
                lost += coordinator.renew().lost
                durations.append(time.monotonic() - started)
                if not coordinator.held:
                    break
    finally:
        stop.set()
        thread.join(5)
        listener.close()
        for conn in accepted:
            conn.close()
    print("rounds against a silent table:", [round(d, 3) for d in durations], "s")
    assert len(lost) == 8 and not coordinator.held
    read_timeout_s = coordinator.renewer.table.client.meta.config.read_timeout
    assert all(d < interval_s + 2 * read_timeout_s + 1.0 for d in durations), durations
    messages = [r.getMessage() for r in caplog.records]
    assert any("still held for" in m for m in messages) and sum("expired locally" in m for m in messages) == 8


def _child(settings: ClientSettings, table_name: str, key: str) -> None:
    """What a forked shard worker does first: log, then build a client and call DynamoDB."""
    logging.getLogger("test.renewer.child").warning("child of a supervisor that renewed")
    assert LeaseTable(client("dynamodb", settings), table_name).get(key).owner == ME


def test_no_renewal_thread_is_left_at_a_fork(tmp_path, moto_url, dynamodb, unique_name):
    """Rounds of 40 leases on 20 threads, each followed at once by a fork whose child logs and
    calls DynamoDB: no renewal thread exists at the fork, and every child finishes."""
    config = _config(tmp_path, moto_url, unique_name)
    coordinator = _holding(config, dynamodb, 40)
    fork = multiprocess.get_context("fork")
    for _ in range(5):
        assert coordinator.renew().lost == ()
        assert not [t.name for t in threading.enumerate() if t.name.startswith("kcl-mp renewal")]
        child = fork.Process(target=_child, args=(config.dynamodb, unique_name, "shardId-000000000000"))
        child.start()
        child.join(60)
        assert child.exitcode == 0


def test_a_lease_held_by_another_host_between_two_renewals_is_lost_even_if_it_came_back(
        tmp_path, moto_url, dynamodb, unique_name, caplog):
    """The fault run's case (a CI run, the default mode): a host paused in a handoff, another
    took the lease, renewed it and handed it back, all while the first was stopped. Its next
    renewal loses the race; the lease is its own again, but another host's processor went past
    its processor's position, so the lease counts as lost (its processor stops and starts again
    from the checkpoint) instead of renewed. One step of the counter (its own renewal that
    landed though the answer did not) is still its own."""
    coordinator = _holding(_config(tmp_path, moto_url, unique_name), dynamodb, 2)
    table = coordinator.table
    back, landed = "shardId-000000000000", "shardId-000000000001"
    other = "other-host"
    taken = table.take(table.get(back), other)  # ME stopped renewing: another host takes it,
    assert taken is not None
    renewed = table.renew(taken, other)  # renews it,
    assert renewed is not None and table.handoff_start(renewed, ME) is not None  # is asked to hand it to ME
    assert table.handoff_finish(back, other)  # and does
    assert table.get(back).holder == ME and table.get(back).counter >= coordinator.held[back].lease.counter + 3
    assert table.renew(coordinator.held[landed].lease, ME) is not None  # a renewal of ME's whose answer was lost
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="test.renewer"):
        renewal = coordinator.renew()
    assert renewal.lost == (back,), (renewal, [r.getMessage() for r in caplog.records])
    assert set(coordinator.held) == {landed}
    assert table.get(landed).counter == coordinator.held[landed].lease.counter

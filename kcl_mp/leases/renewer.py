"""Renewing the held leases: every lease's renewal at once, each retried within its lease's time.

A round runs each held lease's renewal on a bounded set of threads (maxLeaseRenewalThreads,
20 as in Java) and hands back one ``Outcome`` per lease; the coordinator then does its
bookkeeping (held set, logs, metrics) on the supervisor's thread, as before. One renewal
that waits (throttled, a slow answer) then costs only its own lease's time, not every
later lease's: renewed one after another, a round of 16 leases at 30 % throttling lasted
seconds and expired leases.

Fork safety: the threads live for one round only. ``renew_all`` starts them and joins them
before it returns, and the supervisor forks pool processes only between rounds on its own
thread, so no renewal thread exists at a fork: none can hold a lock (logging's, botocore's,
urllib3's pool) that a child needs. Only a request that outlives botocore's own timeouts
(``client_limits``) could leave a thread behind; it is then reported as a failed renewal.

Retries are this module's, not botocore's (``client_limits``: one try per request, so the
send time of the request that renewed a lease is known exactly: ``Held.renewed_at``). A
renewal retries a failure with backoff until the earlier of

    its lease's last renewal + failoverTimeMillis   past it the result no longer matters:
                                                    other hosts may take the lease
    the round's start + the renew interval          the next round is due: a lease that
                                                    failed here is tried again there

so a round ends within about one renew interval, whatever the table does. At
failoverTimeMillis 3000 (renew interval 0.975 s), in a round starting at t = 1.0, a lease
last renewed at t = 0 retries until t = 1.975; one last renewed at t = -1.9, until t = 1.1.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kcl_mp.aws.clients import ClientLimits, client
from kcl_mp.backoff import Backoff
from kcl_mp.config import Config, LeaseSettings
from kcl_mp.errors import DependencyError
from kcl_mp.leases.fencing import still_ours
from kcl_mp.leases.lease import Lease
from kcl_mp.leases.table import LeaseTable

RETRY = Backoff(base_s=0.05, cap_s=0.5)  # throttling clears in fractions of a second; leases have seconds
MAX_TRIES = 20  # per renewal and round: a bound even for a clock that stands still
CALLS_PER_TRY = 3  # renew; after a lost race, get and renew again


@dataclass(frozen=True)
class Outcome:
    """What became of one lease's renewal in a round."""

    key: str
    lease: Lease | None  # as renewed (maybe asked for by another worker); None: no longer ours
    sent_at: float  # when the request that renewed it (or the last one) was sent
    ended_at: float  # when the renewal ended
    error: DependencyError | None = None  # no answer within the time: still held until its expiry


def client_limits(lease: LeaseSettings) -> ClientLimits:
    """Renewals' own DynamoDB client: one try per request (retries are ``Renewer``'s), each
    waiting at most half a renew interval to connect and a renew interval for its answer
    (at most 5 and 10 s), one connection per renewal thread.

    >>> limits = client_limits(LeaseSettings("t", failover_time_ms=3000))
    >>> limits.connect_timeout_s, limits.read_timeout_s, limits.total_attempts
    (0.487, 0.975, 1)
    >>> client_limits(LeaseSettings("t")).read_timeout_s  # failoverTimeMillis 10000
    3.308
    """
    interval_s = lease.renew_interval_s
    return ClientLimits(connect_timeout_s=round(min(5.0, interval_s / 2), 3),
                        read_timeout_s=round(min(10.0, interval_s), 3), total_attempts=1,
                        max_pool_connections=lease.max_lease_renewal_threads)


def renewal_table(config: Config) -> LeaseTable:
    """The lease table, reached through a client for renewals (``client_limits``)."""
    return LeaseTable(client("dynamodb", config.dynamodb, limits=client_limits(config.lease)),
                      config.lease.table_name, config.stream_names)


def retry_until(renewed_at: float, round_started: float, lease: LeaseSettings) -> float:
    """Until when a renewal retries (the module's docstring says why).

    >>> settings = LeaseSettings("t", failover_time_ms=3000)
    >>> retry_until(0.0, 1.0, settings), retry_until(-1.5, 1.0, settings), retry_until(-1.9, 1.0, settings)
    (1.975, 1.5, 1.1)
    """
    return min(renewed_at + lease.failover_time_ms / 1000.0, round_started + lease.renew_interval_s)


def round_bound_s(lease: LeaseSettings, leases: int) -> float:
    """The longest a round can last: retries end when the next round is due, after which
    each lease still gets one try (its calls each within the client's timeouts), one lease
    after another on each thread; a second to spare. Only a request that outlives its
    timeouts can pass it.

    >>> round_bound_s(LeaseSettings("t", failover_time_ms=3000), 64)  # 4 leases a thread
    20.019
    """
    limits = client_limits(lease)
    per_try_s = CALLS_PER_TRY * (limits.connect_timeout_s + limits.read_timeout_s)
    rounds = -(-leases // min(max(1, leases), lease.max_lease_renewal_threads))
    return round(lease.renew_interval_s + RETRY.cap_s + rounds * per_try_s + 1.0, 3)


@dataclass
class Renewer:
    table: LeaseTable  # through the renewals' own client (``renewal_table``)
    lease: LeaseSettings
    me: str
    clock: Callable[[], float]
    rng: random.Random  # jitter only: its own, so renewal threads never draw from the balancer's
    extra: Callable[[str], dict[str, Any]] = lambda key: {}  # KCL 3.x: throughputKBps beside the counter

    def renew_all(self, held: list[tuple[str, Lease, float]], round_started: float) -> list[Outcome]:
        """Renew each (key, lease as last written, when last renewed) at once; an outcome each.
        The longest unrenewed go first: each lease keeps its place in a long round (more
        leases than threads), so its renewals stay about a renew interval apart."""
        results: list[Outcome | BaseException | None] = [None] * len(held)
        pending = iter(sorted(range(len(held)), key=lambda i: held[i][2]))
        lock = threading.Lock()
        bound_s = round_bound_s(self.lease, len(held))
        deadline = time.monotonic() + bound_s  # real time: an injected clock may stand still

        def work() -> None:
            while time.monotonic() < deadline:
                with lock:
                    i = next(pending, None)
                if i is None:
                    return
                try:
                    results[i] = self.renew_one(*held[i], round_started)
                except BaseException as exc:  # a bug: raised on the supervisor's thread below
                    results[i] = exc

        threads = [threading.Thread(target=work, name=f"kcl-mp renewal {n}", daemon=True)
                   for n in range(min(len(held), self.lease.max_lease_renewal_threads))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        outcomes = []
        for (key, _, _), result in zip(held, results):
            if isinstance(result, BaseException):
                raise result
            if result is None:  # a request outlived its timeouts (the bound allows for every one)
                now = self.clock()
                result = Outcome(key, None, now, now, DependencyError(
                    f"renewing lease {key}: no answer within {bound_s:.1f} s"))
            outcomes.append(result)
        return outcomes

    def renew_one(self, key: str, lease: Lease, renewed_at: float, round_started: float) -> Outcome:
        """Renew one lease, retrying failures with backoff until ``retry_until``. A lost race
        (the counter moved) is checked (``fencing.still_ours``): still ours, and no other host
        held it between, means renew again from what the table holds."""
        until = retry_until(renewed_at, round_started, self.lease)
        attributes = self.extra(key)
        attempt = 0
        while True:
            try:
                sent_at = self.clock()
                renewed = self.table.renew(lease, self.me, attributes)
                if renewed is None:
                    current = self.table.get(key)
                    if not still_ours(lease, current, self.me):
                        return Outcome(key, None, sent_at, self.clock())
                    assert current is not None
                    lease = current
                    sent_at = self.clock()
                    renewed = self.table.renew(current, self.me, attributes)
                return Outcome(key, renewed, sent_at, self.clock())
            except DependencyError as exc:
                delay = RETRY.next_delay(attempt, self.rng)
                now = self.clock()
                if not exc.retriable or now + delay >= until or attempt == MAX_TRIES - 1:
                    return Outcome(key, None, sent_at, now, exc)
                time.sleep(delay)
                attempt += 1

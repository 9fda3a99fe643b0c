"""When the supervisor loop's steps are next due (``supervisor.schedule``): a decision table."""

from __future__ import annotations

import pytest

from kcl_mp.config.settings import LeaseSettings
from kcl_mp.supervisor.schedule import USAGE_LOG_S, Schedule

LEASE = LeaseSettings("t", failover_time_ms=10000, shard_sync_interval_ms=60000, parent_shard_poll_interval_ms=10000,
                      list_shards_backoff_ms=1500, max_list_shards_retry_attempts=2)


def test_start_scans_and_ships_metrics_at_once_and_the_rest_a_cadence_later():
    schedule = Schedule(LEASE, progress_every_s=30.0)
    schedule.start(100.0)
    assert schedule.due == {"renew": 100.0 + LEASE.renew_interval_s, "scan": 100.0, "sync": 160.0, "parents": 110.0,
                            "usage": 100.0 + USAGE_LOG_S, "progress": 130.0, "metrics": 100.0, "streams": 100.0}


@pytest.mark.parametrize("due, progress_every_s, starts_waiting, wake", [
    ({"renew": 103.0, "scan": 109.0, "sync": 160.0, "parents": 110.0, "progress": 130.0}, None, False, 101.0),  # at least every 1 s
    ({"renew": 100.3, "scan": 109.0, "sync": 160.0, "parents": 110.0, "progress": 130.0}, None, False, 100.3),  # the renewal
    ({"renew": 103.0, "scan": 100.2, "sync": 160.0, "parents": 110.0, "progress": 130.0}, None, False, 100.2),  # the scan
    ({"renew": 103.0, "scan": 109.0, "sync": 100.5, "parents": 110.0, "progress": 130.0}, None, False, 100.5),  # a sync retry
    ({"renew": 103.0, "scan": 109.0, "sync": 160.0, "parents": 100.7, "progress": 130.0}, None, False, 100.7),  # parents
    ({"renew": 103.0, "scan": 109.0, "sync": 160.0, "parents": 110.0, "progress": 100.1}, 5.0, False, 100.1),  # progress on
    ({"renew": 103.0, "scan": 109.0, "sync": 160.0, "parents": 110.0, "progress": 100.1}, None, False, 101.0),  # progress off
    ({"renew": 103.0, "scan": 109.0, "sync": 160.0, "parents": 110.0, "progress": 130.0}, None, True, 100.0),  # starts wait
])
def test_wake(due, progress_every_s, starts_waiting, wake):
    schedule = Schedule(LEASE, progress_every_s, due=dict(due))
    assert schedule.wake(100.0, starts_waiting) == pytest.approx(wake)


@pytest.mark.parametrize("outcomes, said, next_sync", [
    ([True], [0], [60.0]),
    ([False], [0], [1.5]),                                         # a failed listing: the backoff
    ([False, False, False], [0, 0, 3], [1.5, 1.5, 60.0]),          # out of retries: said, the cadence resumes
    ([False, False, False, False], [0, 0, 3, 0], [1.5, 1.5, 60.0, 1.5]),  # and counting starts again
    ([False, True, False, False], [0, 0, 0, 0], [1.5, 60.0, 1.5, 1.5]),   # a success resets the count
])
def test_after_sync(outcomes, said, next_sync):
    schedule = Schedule(LEASE, due={"sync": 0.0})
    results = []
    for ok in outcomes:
        results.append((schedule.after_sync(ok, 0.0), schedule.due["sync"]))
    assert results == list(zip(said, next_sync))


@pytest.mark.parametrize("ok, confirming, failover_ms, next_sync", [
    (True, False, 10000, 60.0),   # no gap, or one confirmed and synced: the cadence
    (True, True, 10000, 10.0),    # a gap seen once: confirmed a failover time later
    (True, True, 90000, 60.0),    # ... never later than the cadence
    (False, True, 10000, 1.5),    # a failed listing keeps its backoff
])
def test_a_gap_seen_once_is_audited_again_a_failover_time_later(ok, confirming, failover_ms, next_sync):
    lease = LeaseSettings("t", failover_time_ms=failover_ms, shard_sync_interval_ms=60000,
                          list_shards_backoff_ms=1500, max_list_shards_retry_attempts=2)
    schedule = Schedule(lease, due={"sync": 0.0})
    schedule.after_sync(ok, 0.0, confirming)
    assert schedule.due["sync"] == next_sync

"""UPGRADE_FROM_2X's flip to 3.x (kcl_mp.fleet.flip_monitor) against a real moto server, on a
fake clock: only the fleet's 2.x-rule leader flips, after 600 s of every lease owner reporting
worker metrics with the owner index ACTIVE; a lease owner that stops reporting restarts the wait."""

from __future__ import annotations

import logging

import pytest

from kcl_mp.fleet import client_version
from kcl_mp.fleet.client_version import CONFIG_COMPATIBLE_WITH_2X, ClientVersion
from kcl_mp.fleet.flip_monitor import FlipMonitor
from kcl_mp.fleet.state_store import CoordinatorStateStore, StateTables
from kcl_mp.leases.lease import Lease
from kcl_mp.leases.owner_index import ensure_owner_index, wait_for_owner_index
from kcl_mp.leases.table import LeaseTable
from kcl_mp.logs import ShardLog

pytestmark = pytest.mark.integration

OWNERS = ("w1", "w2", "w3")


def _fleet(dynamodb, app: str) -> tuple[dict[str, Lease], CoordinatorStateStore]:
    table = LeaseTable(dynamodb, app)
    table.ensure_table()
    ensure_owner_index(dynamodb, app)
    wait_for_owner_index(dynamodb, app)
    leases = {f"s{i}": Lease(f"s{i}", owner, 1) for i, owner in enumerate(OWNERS)}
    store = CoordinatorStateStore(dynamodb, StateTables.separate(app), "w1", clock_ms=lambda: 1_000)
    store.ensure_table()
    assert store.initialise_client_version(CONFIG_COMPATIBLE_WITH_2X).value == ClientVersion.UPGRADE_FROM_2X.value
    return leases, store


def _monitor(dynamodb, app: str, me: str, now: list[float]) -> FlipMonitor:
    return FlipMonitor(me, dynamodb, app, ShardLog(logging.getLogger("test"), me), lambda: now[0], lambda: 1_700_000_000.0)


def test_the_2x_leader_flips_after_600_s_of_every_owner_reporting(dynamodb, unique_name):
    leases, store = _fleet(dynamodb, unique_name)
    leader = client_version.deterministic_leader(set(OWNERS))
    other = next(w for w in OWNERS if w != leader)
    now = [0.0]
    monitors = {w: _monitor(dynamodb, unique_name, w, now) for w in (leader, other)}
    last = 300.0 + 60.0 + client_version.FLIP_STABILIZE_S  # ready again from 360 s
    for t in range(0, int(last) + 1, int(client_version.MONITOR_INTERVAL_S)):
        now[0] = float(t)
        reporting = set(OWNERS) - ({other} if t == 300 else set())  # one check without other's metrics item
        for monitor in monitors.values():
            monitor.check(leases, store, lambda seen=reporting: seen)
        state = store.client_version()
        if t < last:
            assert state.value == ClientVersion.UPGRADE_FROM_2X.value, t
        assert monitors[other].ready_since is None  # not the 2.x leader: it never counts
    assert monitors[leader].ready_since == 360.0
    assert (state.value, state.modified_by) == (ClientVersion.V3X_WITH_ROLLBACK.value, leader)

"""UPGRADE_FROM_2X: the flip to 3.x, run by the fleet's 2.x-rule leader (Java's MigrationReadyMonitor).

Every MONITOR_INTERVAL_S (60 s) the worker that ``client_version.deterministic_leader``
picks among the lease owners checks that the owner index is ACTIVE and that every lease
owner reports worker metrics (``client_version.ready_to_flip``); once that has held for
FLIP_STABILIZE_S (600 s) it flips the fleet to CLIENT_VERSION_3X_WITH_ROLLBACK (a write
conditioned on the client version it read). Any other worker only forgets the test.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kcl_mp.errors import DependencyError
from kcl_mp.fleet import client_version
from kcl_mp.fleet.client_version import ClientVersion
from kcl_mp.fleet.state_store import CoordinatorStateStore
from kcl_mp.leases import owner_index
from kcl_mp.leases.lease import Lease
from kcl_mp.logs import ShardLog


class FlipMonitor:
    def __init__(self, me: str, client: Any, lease_table: str, log: ShardLog, clock: Callable[[], float],
                 wall: Callable[[], float]):
        self.me, self.client, self.lease_table, self.log = me, client, lease_table, log
        self.clock, self.wall = clock, wall
        self.next_check = 0.0
        self.ready_since: float | None = None  # the flip test has held since

    def check(self, leases: Mapping[str, Lease], store: CoordinatorStateStore,
              reporting: Callable[[], set[str]]) -> None:
        """One look when due (module docstring); ``reporting``: the workers with a live metrics item."""
        now = self.clock()
        if now < self.next_check:
            return
        self.next_check = now + client_version.MONITOR_INTERVAL_S
        owners = {lease.owner for lease in leases.values() if lease.owner}
        if client_version.deterministic_leader(owners) != self.me:
            self.ready_since = None
            return
        try:
            reported = reporting()
            active = owner_index.index_status(self.client, self.lease_table) == "ACTIVE"
        except DependencyError as exc:
            self.log.warning("flip monitor: %s", exc)
            return
        if not client_version.ready_to_flip(active, owners, reported):
            if self.ready_since is not None:
                self.log.info("flip monitor: not ready any more (lease owners without worker metrics: %s)",
                              ", ".join(sorted(owners - reported)) or "none; the owner index is not ACTIVE")
            self.ready_since = None
            return
        if self.ready_since is None:
            self.ready_since = now
            self.log.info("flip monitor: every lease owner reports worker metrics; flipping to 3.x after %.0f s",
                          client_version.FLIP_STABILIZE_S)
        if now - self.ready_since < client_version.FLIP_STABILIZE_S:
            return
        state = store.client_version()
        if state is not None and state.value == ClientVersion.UPGRADE_FROM_2X.value:
            write = client_version.flip(state, self.me, int(self.wall() * 1000))
            if store.write_client_version(write.state, write.expected_cv):
                self.log.warning("flip monitor: flipped the fleet to %s", write.state.value)

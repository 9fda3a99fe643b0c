"""A 3.x follower finding the leases the leader assigned to it, through the lease-owner index.

Java's follower (DynamoDBLeaseDiscoverer.discoverNewLeases, 3.1.3 and 3.5) does not scan
the lease table: it Queries ``LeaseOwnerToLeaseKeyIndex`` for its own worker id
(``owner_index.lease_keys_for_worker``), drops the keys it already holds, and GetItems
the rest; a lease whose GetItem shows another owner (the index is eventually consistent)
is not its own. What it holds is renewed by key, and a renewal that fails shows a lease
lost or handed away, so nothing else needs the whole table. kcl-mp adds one thing: the
first time it sees a lease with parents, it reads the parents' leases too, so the start
waits for them as after a scan (``shard_sync.unfinished_parents``; ``poll_parents``
keeps them current). The leader keeps scanning: its round needs every lease.

Per scan this costs 1 Query page (KEYS_ONLY, 0.5 read units per 4 KB of keys) plus one
GetItem per new lease, instead of a Scan of every item of the table.
"""

from __future__ import annotations

from collections.abc import Set
from typing import Any

from kcl_mp.errors import DependencyError
from kcl_mp.leases import owner_index
from kcl_mp.leases.lease import Lease
from kcl_mp.leases.table import LeaseTable
from kcl_mp.logs import ShardLog


class OwnerIndexDiscovery:
    """The follower's lookups; ``usable`` until the index is seen ACTIVE, then ``discover``."""

    def __init__(self, table: LeaseTable, worker_id: str, log: ShardLog):
        self.table, self.worker_id, self.log = table, worker_id, log
        self.active = False
        self.finished: set[str] = set()  # leases seen at SHARD_END: listed until deleted, never reopened

    def usable(self) -> bool:
        """Whether the index is ACTIVE (one DescribeTable per call until it is; then remembered)."""
        if not self.active:
            try:
                self.active = owner_index.index_status(self.table.client, self.table.name) == "ACTIVE"
            except DependencyError as exc:
                self.log.warning("checking the lease-owner index failed (%s); scanning", exc)
            if self.active:
                self.log.info("finding this worker's leases through %s", owner_index.OWNER_INDEX)
        return self.active

    def discover(self, known: Set[str], seen: dict[str, Any]) -> list[Lease]:
        """The open leases assigned to this worker that are not in ``known``; each, and its
        parents the first time, recorded in ``seen`` (the coordinator's last_seen)."""
        try:
            keys = owner_index.lease_keys_for_worker(self.table.client, self.table.name, self.worker_id)
        except DependencyError:
            self.active = False  # the index went away (or the read failed): scan until it is back
            raise
        self.finished &= set(keys)
        found = []
        for key in keys:
            if key in known or key in self.finished:
                continue
            lease = self.table.get(key)
            if lease is None or lease.owner != self.worker_id:
                continue
            seen[key] = lease
            if lease.is_shard_end:
                self.finished.add(key)
                continue
            for parent in lease.parent_keys:
                if parent not in seen and (current := self.table.get(parent)) is not None:
                    seen[parent] = current
            found.append(lease)
        return found

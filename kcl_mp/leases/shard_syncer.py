"""Shard sync, the I/O half: the lease coordinator's side of ``shard_sync``.

No leader: every host audits its last scan every shardSyncIntervalMillis (no API call)
and lists the shards only when the audit finds something the table does not account
for; the first host to act fixes the table and the others' next scan shows it. The host
where a shard ends creates that shard's children itself, from ChildShards. All writes
are conditional, so two hosts acting at once is harmless. docs/resharding.md says why.

``ShardSyncer`` is an object the ``LeaseCoordinator`` holds: it shares the coordinator's
``TableView`` (the last scan, kept current with this host's own writes) and keeps its own
audit state; ``shard_sync`` decides, the stream (``retrieval.stream``: Kinesis or DynamoDB
Streams) lists, this module writes.

A multi-stream application has a syncer per stream (``stream_syncers``), each given its
stream's identifier: it sees only that stream's leases, keyed by shard id as ``shard_sync``
plans them (``_local``), and writes the leases it plans under the stream's keys (``_keyed``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kcl_mp.config import Config, InitialPosition
from kcl_mp.errors import DependencyError
from kcl_mp.leases import shard_sync
from kcl_mp.leases.lease import Lease
from kcl_mp.leases.multi_stream import StreamIdentifier, shard_of
from kcl_mp.leases.shard_sync import Shard
from kcl_mp.leases.table import LeaseTable
from kcl_mp.logs import ShardLog
from kcl_mp.retrieval.stream import Stream
from kcl_mp.retrieval.streams import open_stream


@dataclass
class TableView:
    """The lease table as this host last saw it: the coordinator's scans fill it, the
    syncer's writes and parent polls keep it current."""

    last_seen: dict[str, Lease] = field(default_factory=dict)  # the last scan (+ this host's own writes since)
    live_workers: tuple[str, ...] = ()  # as the last scan saw them


class ShardSyncer:
    def __init__(self, config: Config, table: LeaseTable, client: Any, log: ShardLog, view: TableView, *,
                 stream: Stream | None = None, identifier: StreamIdentifier | None = None,
                 initial: InitialPosition | None = None):
        """``client``: the stream's (``retrieval.streams.stream_client``). One stream of a multi-stream
        application: its ``stream``, ``identifier`` and initial position (else the configured stream)."""
        self.config, self.table, self.log, self.view = config, table, log, view
        self.stream = stream or open_stream(config, client)
        self.identifier = identifier
        self.initial = initial or config.initial_position
        self.gap_seen = False  # the last audit found leases that leave a gap
        self.confirming = False  # ... for the first time: the next audit comes early, to confirm it

    def _local(self, leases: Mapping[str, Lease]) -> dict[str, Lease]:
        """The leases of this syncer's stream, keyed by shard id as ``shard_sync`` plans them."""
        if self.identifier is None:
            return dict(leases)
        local = (lease.with_(key=shard_of(lease.key), stream=None)
                 for lease in leases.values() if lease.stream == self.identifier)
        return {lease.key: lease for lease in local}

    def _key(self, shard_id: str) -> str:
        return shard_id if self.identifier is None else self.identifier.lease_key(shard_id)

    def _keyed(self, leases: Iterable[Lease]) -> list[Lease]:
        """Planned leases under this stream's keys."""
        return [lease if self.identifier is None else lease.with_(key=self._key(lease.key), stream=self.identifier)
                for lease in leases]

    def sync_shards(self, leases: Mapping[str, Lease], why: str) -> bool:
        """ListShards, create the leases the hierarchy rules ask for, delete finished ones.

        False if the listing failed (the caller retries after listShardsBackoffTimeInMillis).
        """
        initial = self.initial
        local = self._local(leases)
        try:
            if local or not self.stream.filters_at_position:
                shards = self.list_shards()
                plan = shard_sync.plan_new_leases(shards, local, initial)
            else:
                shards = self.list_shards(initial)
                plan = shard_sync.plan_initial_leases(shards, initial)
        except DependencyError as exc:
            self.log.warning("shard sync (%s) failed: %s", why, exc)
            return False
        created = self._create(self._keyed(plan.create))
        self.log.info("shard sync (%s): %d shards listed, %d leases created%s", why, len(shards), created,
                      f" ({len(plan.create) - created} created by another host meanwhile)" if created < len(plan.create)
                      else "")
        if plan.inconsistent:
            log = self.log.debug if self.config.lease.ignore_unexpected_child_shards else self.log.warning
            log("shards %s are listed while a parent is still open (a reshard in progress): no lease for them yet",
                ", ".join(plan.inconsistent))
        if local:
            self.clean_up(leases, shards)
        return True

    def audit(self) -> bool:
        """Every shardSyncIntervalMillis: clean up, and sync only if the table has a gap in
        two audits running (a scan can catch a shard end between its SHARD_END checkpoint
        and its children's creation; Java's auditor also waits for a confirmation). A gap
        seen once sets ``confirming``: the loop audits again a failover time later, not an
        interval (a host killed in that window leaves the gap to the audit to mend)."""
        self.clean_up(self.view.last_seen, None)
        leases = self._local(self.view.last_seen)
        reason = shard_sync.audit(leases, self.stream.max_hash_key)
        seen_before, self.gap_seen = self.gap_seen, reason is not None
        self.confirming = False
        if reason is None:
            self.log.debug("shard sync not needed: the leases cover the key space")
            return True
        if not seen_before and leases:
            self.log.info("the lease table has a gap (%s); syncing shards if the audit in %.0f s still finds one",
                          reason, self.config.lease.failover_time_ms / 1000.0)
            self.confirming = True
            return True
        return self.sync_shards(self.view.last_seen, reason)

    def create_children(self, key: str, children: Sequence[Mapping[str, Any]]) -> bool:
        """Shard ``key`` was read to its end here: record its children in its lease and create
        their leases. False without ChildShards (the caller syncs instead)."""
        if not children:
            return False
        shards = [Shard.from_child(child) for child in children]
        try:
            self.table.add_child_shards(key, [shard.shard_id for shard in shards])
        except DependencyError as exc:
            self.log.warning("recording the children of %s failed: %s", key, exc)
        # A merge's other parent: a 3.x follower's view holds only its own leases, so read it.
        self.poll_parents(sorted({self._key(p) for shard in shards for p in shard.parent_shard_ids
                                  if self._key(p) != key and self._key(p) not in self.view.last_seen}))
        leases = self._local(self.view.last_seen)
        plan = shard_sync.plan_child_leases(shards, leases, ended=shard_of(key))
        listed = {shard.shard_id for shard in shards}
        deferred = sorted(listed - {lease.key for lease in plan} - set(leases))
        if deferred:
            self.log.info("children %s of %s wait for the shard sync (another parent has no lease yet)",
                          ", ".join(deferred), key)
        self._create(self._keyed(plan))
        return True

    def poll_parents(self, keys: Iterable[str]) -> None:
        """Re-read the leases of parents someone waits for (parentShardPollIntervalMillis)."""
        for key in keys:
            try:
                current = self.table.get(key)
            except DependencyError as exc:
                self.log.warning("reading parent lease %s failed: %s", key, exc)
                continue
            if current is None:
                self.view.last_seen.pop(key, None)
            else:
                self.view.last_seen[key] = current

    def clean_up(self, leases: Mapping[str, Lease], shards: Iterable[Shard] | None) -> None:
        """Delete finished leases whose children are being processed (cleanupLeasesUponShardCompletion).

        A live owner cleans up its own; anyone cleans up after a dead or unknown one."""
        if not self.config.lease.cleanup_leases_upon_shard_completion:
            return
        leases = self._local(leases)
        for shard_id in shard_sync.plan_cleanup(leases, shards):
            owner, key = leases[shard_id].owner, self._key(shard_id)
            if owner and owner != self.config.worker_id and owner in self.view.live_workers:
                continue
            try:
                deleted = self.table.delete_finished(key)
            except DependencyError as exc:
                self.log.warning("deleting finished lease %s failed: %s", key, exc)
                continue
            self.view.last_seen.pop(key, None)
            if deleted:
                self.log.info("deleted lease %s: its shard is finished and its children are being processed (or "
                              "it is gone from the stream)", key)

    def _create(self, leases: Iterable[Lease]) -> int:
        """Create each lease unless it exists; how many this call created."""
        count = 0
        for lease in leases:
            try:
                created = self.table.create_if_absent(lease)
            except DependencyError as exc:
                self.log.warning("creating lease %s failed: %s", lease.key, exc)
                continue
            if created:
                count += 1
                self.view.last_seen[lease.key] = lease
                parents = f" (parents {', '.join(lease.parent_shard_ids)})" if lease.parent_shard_ids else ""
                self.log.info("created lease %s at %s%s", lease.key, lease.checkpoint, parents)
        return count

    def describe_stream(self) -> str:
        """The stream's ARN, checked at start-up before anything is written (``Stream.describe``)."""
        return self.stream.describe()

    def list_shards(self, at: InitialPosition | None = None) -> list[Shard]:
        return self.stream.list_shards(at)

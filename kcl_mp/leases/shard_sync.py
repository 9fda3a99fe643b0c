"""Which leases to create and delete for a stream's shards: pure decisions, no I/O.

The lease lifecycle, as the Java KCL documents it: DISCOVERY -> CREATION -> PROCESSING -> SHARD_END -> DELETION.
Vocabulary used below, for a shard id and the lease table as last scanned:

- *leased*: the shard has a lease.
- *superseded*: some lease descends from it (a lease names it as a parent, or names a
  shard that does, ...). Its data was processed, or deliberately skipped, by that
  lineage, so it never gets a lease again.
- *tracked*: leased or superseded.
- *done*: its lease is at SHARD_END, or it is superseded.

Creation, the KCL's hierarchy rules (the Java ``HierarchicalShardSyncer``, restated):

1. Empty table (``plan_initial_leases``): ListShards filtered at the initial position
   (AT_LATEST, AT_TRIM_HORIZON, AT_TIMESTAMP) returns the shards open at that point; each
   gets a lease at the initial position, except one whose parent was returned too (it
   follows its parent, rule 3).
2. Otherwise (``plan_new_leases``, on a full listing), walk up from every open shard
   without a lease. A shard is *reached* when it is tracked, or when one of its listed
   parents is reached, or (TRIM_HORIZON, AT_TIMESTAMP: the user wants the history) when
   it has any listed parent. For every reached shard that is not tracked, each listed
   parent that is not reached gets a lease at the initial position: it is the oldest
   untracked shard of its branch, and its descendants follow it. An open shard that is
   not reached is a new root: a lease at the initial position.
3. A child gets a lease at TRIM_HORIZON (so nothing its parents' successors wrote is
   skipped) once every parent is tracked or gone from the listing and at least one is
   done (``plan_child_leases``, also run at shard end on the ChildShards GetRecords
   returned). Its processor starts only when every parent lease is at SHARD_END or gone
   (``unfinished_parents``).
4. A shard whose listed parent is still open is *inconsistent* (the listing caught a
   reshard half-way): no lease; ignoreUnexpectedChildShards only silences the warning.

Deletion (``plan_cleanup``): a lease at SHARD_END once every child has a lease that has
been checkpointed (is being processed) or is superseded; or, once the stream no longer
lists the shard (aged out) and no child is known.

``audit`` says whether a ListShards is worth its call: not while the open leases' hash
ranges cover the whole key space and every finished lease's children have leases.

    >>> from kcl_mp.config import InitialPosition
    >>> s = [Shard("shardId-0", (), (0, 9), "1", None)]
    >>> [(l.key, str(l.checkpoint)) for l in plan_new_leases(s, {}, InitialPosition("LATEST")).create]
    [('shardId-0', 'LATEST')]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kcl_mp.config import InitialPosition
from kcl_mp.leases.lease import Lease
from kcl_mp.sequence import AT_TIMESTAMP, LATEST, TRIM_HORIZON, ExtendedSequenceNumber

MAX_HASH_KEY = 2**128 - 1
_NOT_STARTED = (TRIM_HORIZON, LATEST, AT_TIMESTAMP)


@dataclass(frozen=True)
class Shard:
    shard_id: str
    parent_shard_ids: tuple[str, ...]
    hash_range: tuple[int, int]
    starting_sequence_number: str | None = None
    ending_sequence_number: str | None = None

    @property
    def is_closed(self) -> bool:
        return self.ending_sequence_number is not None

    @classmethod
    def from_api(cls, shard: Mapping[str, Any]) -> Shard:
        """From a ListShards entry."""
        parents = tuple(p for p in (shard.get("ParentShardId"), shard.get("AdjacentParentShardId")) if p)
        numbers = shard.get("SequenceNumberRange", {})
        return cls(shard["ShardId"], parents, _hash_range(shard["HashKeyRange"]),
                   numbers.get("StartingSequenceNumber"), numbers.get("EndingSequenceNumber"))

    @classmethod
    def from_child(cls, child: Mapping[str, Any]) -> Shard:
        """From a ChildShards entry of the last GetRecords of a shard (an open shard)."""
        return cls(child["ShardId"], tuple(child.get("ParentShards", ())), _hash_range(child["HashKeyRange"]))


def _hash_range(keys: Mapping[str, str]) -> tuple[int, int]:
    return int(keys["StartingHashKey"]), int(keys["EndingHashKey"])


@dataclass(frozen=True)
class SyncPlan:
    create: tuple[Lease, ...] = ()
    inconsistent: tuple[str, ...] = ()  # children listed while a parent is still open


def _lease(shard: Shard, position: str) -> Lease:
    return Lease(key=shard.shard_id, checkpoint=ExtendedSequenceNumber(position, 0),
                 parent_shard_ids=tuple(sorted(shard.parent_shard_ids)), hash_range=shard.hash_range)


def superseded(leases: Mapping[str, Lease], shards: Mapping[str, Shard] | None = None) -> set[str]:
    """Every shard some lease descends from (parents from the leases, then the listing)."""
    found: set[str] = set()
    stack = [p for lease in leases.values() for p in lease.parent_shard_ids]
    for _ in range(1_000_000):  # bounded: each shard id is expanded once
        if not stack:
            break
        shard_id = stack.pop()
        if shard_id in found:
            continue
        found.add(shard_id)
        if shard_id in leases:
            stack.extend(leases[shard_id].parent_shard_ids)
        elif shards and shard_id in shards:
            stack.extend(shards[shard_id].parent_shard_ids)
    return found


def plan_initial_leases(shards_at_position: Iterable[Shard], initial: InitialPosition) -> SyncPlan:
    """Rule 1: the leases of an empty table, from the listing filtered at the initial position."""
    listed = {s.shard_id: s for s in shards_at_position}
    roots = [s for s in listed.values() if not any(p in listed for p in s.parent_shard_ids)]
    return SyncPlan(tuple(_lease(s, initial.kind) for s in sorted(roots, key=lambda s: s.shard_id)))


def plan_new_leases(shards: Iterable[Shard], leases: Mapping[str, Lease], initial: InitialPosition) -> SyncPlan:
    """Rules 2 to 4 on a full listing: leases to create, in shard-id order."""
    listed = {s.shard_id: s for s in shards}
    gone = superseded(leases, listed)
    tracked = set(leases) | gone
    inconsistent = {s.shard_id for s in listed.values()
                    if any(p in listed and not listed[p].is_closed for p in s.parent_shard_ids)}
    wants_history = initial.kind in (TRIM_HORIZON, AT_TIMESTAMP)
    reached: dict[str, bool] = {}
    # Rule 3 first: a child of a finished parent starts at TRIM_HORIZON whatever rule 2 says.
    children = _child_leases(listed.values(), leases, gone, None, listed)
    create: dict[str, Lease] = {lease.key: lease for lease in children}

    def listed_parents(shard_id: str) -> list[str]:
        return [p for p in listed[shard_id].parent_shard_ids if p in listed]

    def reach(shard_id: str) -> bool:
        # Iterative post-order walk (a stream's lineage can be deeper than Python's stack).
        stack = [shard_id]
        for _ in range(4 * len(listed) + 4):
            if not stack:
                break
            current = stack[-1]
            if current in reached:
                stack.pop()
                continue
            if current in tracked:
                reached[current] = True
                stack.pop()
                continue
            parents = listed_parents(current)
            pending = [p for p in parents if p not in reached]
            if pending:
                stack.extend(pending)
                continue
            stack.pop()
            reached[current] = bool(parents) and (wants_history or any(reached[p] for p in parents))
            if reached[current]:
                for parent in parents:
                    if not reached[parent] and parent not in inconsistent:
                        create.setdefault(parent, _lease(listed[parent], initial.kind))
        return reached[shard_id]

    for shard in sorted(listed.values(), key=lambda s: s.shard_id):
        if shard.is_closed or shard.shard_id in tracked or shard.shard_id in inconsistent:
            continue
        if not reach(shard.shard_id):
            create.setdefault(shard.shard_id, _lease(shard, initial.kind))
    chosen = tuple(lease for key, lease in sorted(create.items()) if key not in inconsistent)
    return SyncPlan(chosen, tuple(sorted(inconsistent)))


def plan_child_leases(
    children: Iterable[Shard],
    leases: Mapping[str, Lease],
    *,
    ended: str | None = None,
    listed: Mapping[str, Shard] | None = None,
) -> list[Lease]:
    """Rule 3: children whose parents are accounted for, at TRIM_HORIZON.

    ``ended`` is a shard that just reached its end on this host (counted as done before its
    SHARD_END checkpoint lands). Without ``listed`` (ChildShards, not a listing) every
    parent must be tracked; with it, a parent gone from the listing does not hold a child back.
    """
    return _child_leases(children, leases, superseded(leases, listed), ended, listed)


def _child_leases(children: Iterable[Shard], leases: Mapping[str, Lease], gone: set[str], ended: str | None,
                  listed: Mapping[str, Shard] | None) -> list[Lease]:
    tracked = set(leases) | gone | ({ended} if ended else set())
    plan = []
    for child in sorted(children, key=lambda s: s.shard_id):
        key = child.shard_id
        if key in tracked or not child.parent_shard_ids:
            continue
        parents = child.parent_shard_ids
        accounted = all(p in tracked or (listed is not None and p not in listed) for p in parents)
        done = any(p == ended or p in gone or (p in leases and leases[p].is_shard_end) for p in parents)
        if accounted and done:
            plan.append(_lease(child, TRIM_HORIZON))
    return plan


def unfinished_parents(lease: Lease, leases: Mapping[str, Lease]) -> list[str]:
    """The parents ``lease`` still waits for: those whose lease exists and is not at SHARD_END
    (their lease keys: ``Lease.parent_keys``)."""
    return [p for p in lease.parent_keys if p in leases and not leases[p].is_shard_end]


def plan_cleanup(leases: Mapping[str, Lease], shards: Iterable[Shard] | None = None) -> list[str]:
    """Finished leases that may be deleted, in key order (see the module docstring)."""
    listed = {s.shard_id: s for s in shards} if shards is not None else None
    gone = superseded(leases, listed)
    children: dict[str, set[str]] = {}
    for lease in leases.values():
        for parent in lease.parent_shard_ids:
            children.setdefault(parent, set()).add(lease.key)
    for shard in (listed or {}).values():
        for parent in shard.parent_shard_ids:
            children.setdefault(parent, set()).add(shard.shard_id)

    def started(child: str) -> bool:
        if child in leases:
            checkpoint = leases[child].checkpoint
            return checkpoint is not None and checkpoint.sequence_number not in _NOT_STARTED
        return child in gone

    deletable = []
    for key, lease in sorted(leases.items()):
        if not lease.is_shard_end:
            continue
        known = children.get(key, set()) | set(lease.child_shard_ids)
        if known and all(started(child) for child in known):
            deletable.append(key)
        elif not known and listed is not None and key not in listed:
            deletable.append(key)
    return deletable


def audit(leases: Mapping[str, Lease], max_hash_key: int = MAX_HASH_KEY) -> str | None:
    """Why a full shard sync (ListShards) is needed now, or None when it would find nothing.
    ``max_hash_key``: the top of the stream's key space (DynamoDB Streams: 1, as the adapter maps it)."""
    if not leases:
        return "the lease table is empty"
    gone = superseded(leases)
    ranges = []
    for key, lease in sorted(leases.items()):
        if lease.is_shard_end:
            missing = [c for c in lease.child_shard_ids if c not in leases and c not in gone]
            if missing or (not lease.child_shard_ids and key not in gone):
                return f"finished shard {key} has children without leases"
            continue
        if lease.hash_range is None:
            return f"lease {key} has no hash range"
        ranges.append(lease.hash_range)
    covered_to = -1
    for start, end in sorted(ranges):
        if start > covered_to + 1:
            return f"no lease covers hash keys {covered_to + 1}..{start - 1}"
        covered_to = max(covered_to, end)
    if covered_to < max_hash_key:
        return f"no lease covers hash keys {covered_to + 1}..{max_hash_key}"
    return None

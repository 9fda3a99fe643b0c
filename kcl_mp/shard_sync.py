"""Which leases to create for a stream's shards: a pure decision, no I/O.

Walking-skeleton rule (the resharding work replaces it with the KCL's hierarchy rules
behind the same signature): every shard without a lease gets one. A shard whose parent
is still listed starts at TRIM_HORIZON (a child must not skip what its parent's
successors wrote); every other shard starts at the configured initial position.

    >>> from kcl_mp.config import InitialPosition
    >>> s = [Shard("shardId-0", (), (0, 9), "1", None)]
    >>> [(l.key, str(l.checkpoint)) for l in plan_new_leases(s, {}, InitialPosition("LATEST"))]
    [('shardId-0', 'LATEST')]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from .config import InitialPosition
from .lease import TRIM_HORIZON, ExtendedSequenceNumber, Lease


@dataclass(frozen=True)
class Shard:
    shard_id: str
    parent_shard_ids: tuple[str, ...]
    hash_range: tuple[int, int]
    starting_sequence_number: str
    ending_sequence_number: str | None

    @property
    def is_closed(self) -> bool:
        return self.ending_sequence_number is not None

    @classmethod
    def from_api(cls, shard: Mapping[str, Any]) -> "Shard":
        """From a ListShards entry."""
        parents = tuple(p for p in (shard.get("ParentShardId"), shard.get("AdjacentParentShardId")) if p)
        hashes = shard["HashKeyRange"]
        numbers = shard.get("SequenceNumberRange", {})
        return cls(
            shard_id=shard["ShardId"],
            parent_shard_ids=parents,
            hash_range=(int(hashes["StartingHashKey"]), int(hashes["EndingHashKey"])),
            starting_sequence_number=numbers.get("StartingSequenceNumber", "0"),
            ending_sequence_number=numbers.get("EndingSequenceNumber"),
        )


def plan_new_leases(
    shards: Iterable[Shard], leases: Mapping[str, Lease], initial: InitialPosition
) -> list[Lease]:
    """Leases to create, in shard-id order."""
    listed = {shard.shard_id: shard for shard in shards}
    plan = []
    for shard_id in sorted(listed):
        if shard_id in leases:
            continue
        shard = listed[shard_id]
        has_listed_parent = any(p in listed or p in leases for p in shard.parent_shard_ids)
        start = TRIM_HORIZON if has_listed_parent else initial.kind
        plan.append(
            Lease(
                key=shard_id,
                checkpoint=ExtendedSequenceNumber(start, 0),
                parent_shard_ids=tuple(sorted(shard.parent_shard_ids)),
                hash_range=shard.hash_range,
            )
        )
    return plan

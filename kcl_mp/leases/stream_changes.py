"""Streams that change while a multi-stream application runs: what one look at its list means
(``plan_streams``). Pure (decision table: tests/decisions/stream_changes_cases.json); the
supervisor reads the list and the table, passes the clock, and carries the plan out
(``supervisor.stream_changes``).

Java (amazon-kinesis-client 3.5.1; facts only, no code): ``Scheduler.checkAndSyncStreamShardsAndLeases``
runs on the leader every 60 s; a stream new to the tracker's list gets a shard sync; a stream
gone from it is handled by ``FormerStreamsLeasesDeletionStrategy``::

    NO_STREAMS_LEASES_DELETION                       stop tracking it, keep its leases
    FORMER_STREAMS_AUTO_DETECTION_DEFERRED_DELETION  delete its leases once it has been out of the
                                                     list for the wait; back in the list: revived
    PROVIDED_STREAMS_DEFERRED_DELETION               the same for the streams the user names

What kcl-mp does differently: Java adopts every stream of the lease table at start-up (from LATEST,
KCL#1112); kcl-mp starts only listed streams. A stream of the table that is not listed is a former
stream (its leases are kept, or deleted after the wait, per the strategy), whether it left the list
while this host ran or before it started.

A plan, for the host that deletes (``may_delete``: the 3.x leader, every 2.x host) and for the
others, which drain and start alike but leave the deleting to it::

    start      listed now, not before: its shards synced, its leases consumed
    drain      listed before, not now: its shards told shutdownRequested, their leases released
    revived    back in the list while its leases waited to be deleted: they are kept
    scheduled  a former stream whose leases the strategy deletes, from now + the wait
    delete     former streams whose wait has passed: their leases deleted now
    pending    every former stream still waiting, with when its wait ends (ms)

A former stream stays pending while it has leases (in the table) or was listed before this look;
one whose leases are gone (deleted, here or by another host) leaves it, so a deletion that
failed is tried again at the next look.

>>> former = FormerStreamsSettings("FORMER_STREAMS_AUTO_DETECTION_DEFERRED_DELETION", 60_000)
>>> plan = plan_streams(("a", "b"), ("a", "c"), {"a", "b"}, {}, former, 1_000, may_delete=True)
>>> plan.start, plan.drain, plan.scheduled, dict(plan.pending)
(('c',), ('b',), ('b',), {'b': 61000})
>>> plan_streams(("a", "c"), ("a", "c"), {"a", "b", "c"}, plan.pending, former, 61_000, may_delete=True).delete
('b',)
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from kcl_mp.config.settings import FormerStreamsSettings


@dataclass(frozen=True)
class StreamsPlan:
    start: tuple[str, ...] = ()
    drain: tuple[str, ...] = ()
    revived: tuple[str, ...] = ()
    scheduled: tuple[str, ...] = ()
    delete: tuple[str, ...] = ()
    pending: Mapping[str, int] = field(default_factory=dict)  # former stream -> when its leases are deleted (ms)


def plan_streams(previous: Sequence[str], listed: Sequence[str], in_table: Collection[str],
                 pending: Mapping[str, int], former: FormerStreamsSettings, now_ms: int, may_delete: bool
                 ) -> StreamsPlan:
    """What the list ``listed`` means after ``previous``, given the streams whose leases ``in_table``
    holds (by name) and the former streams ``pending`` deletion (as the last plan left them)."""
    start = tuple(name for name in listed if name not in previous)
    drain = tuple(name for name in previous if name not in listed)
    revived = tuple(sorted(name for name in pending if name in listed))
    candidates = _former(previous, listed, in_table, former)
    kept = {name: at for name, at in pending.items() if name in candidates}
    scheduled = tuple(name for name in candidates if name not in kept)
    kept.update({name: now_ms + former.wait_ms for name in scheduled})
    delete = tuple(sorted(name for name, at in kept.items() if at <= now_ms)) if may_delete else ()
    return StreamsPlan(start, drain, revived, scheduled, delete, kept)


def _former(previous: Sequence[str], listed: Sequence[str], in_table: Collection[str],
            former: FormerStreamsSettings) -> tuple[str, ...]:
    """The former streams whose leases the strategy deletes, in a stable order."""
    known = [*previous, *sorted(name for name in in_table if name not in previous)]
    if former.strategy == "FORMER_STREAMS_AUTO_DETECTION_DEFERRED_DELETION":
        return tuple(name for name in known if name not in listed)
    if former.strategy == "PROVIDED_STREAMS_DEFERRED_DELETION":
        return tuple(name for name in known if name not in listed and name in former.provided)
    return ()

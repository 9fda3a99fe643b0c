"""A running shard's life as the supervisor sees it: one state and its transitions. Pure
(decision table: tests/decisions/shard_life_cases.json).

The Java KCL keeps a shard consumer's life in ``ConsumerStates``; here the supervisor keeps,
for each shard a pool process drives, what it last told the shard and what the shard answered.
The main paths, then every arrow (an event a state has no arrow for leaves it as it is)::

    PROCESSING --handoff--> HANDING_OFF --ready--> HANDED_OVER --lost--> RELEASED
    PROCESSING --stop--> SHUTDOWN_REQUESTED --ready--> SHUTDOWN_READY --lost--> RELEASED
    PROCESSING --lost--> LEASE_LOST --ready--> RELEASED

    state               handoff        stop                ready           lost
    PROCESSING          HANDING_OFF    SHUTDOWN_REQUESTED  SHUTDOWN_READY  LEASE_LOST
    SHUTDOWN_REQUESTED  HANDING_OFF    -                   SHUTDOWN_READY  LEASE_LOST
    HANDING_OFF         -              -                   HANDED_OVER     LEASE_LOST
    SHUTDOWN_READY      -              -                   -               RELEASED
    HANDED_OVER         -              -                   -               RELEASED
    LEASE_LOST          -              -                   RELEASED        -
    RELEASED            -              -                   -               -

- *handoff*: another worker asked for the lease; the shard is told shutdownRequested so its
  processor makes a last checkpoint, then the lease is handed over (HANDED_OVER) and the
  shard told leaseLost.
- *stop*: this host stops; the shard is told shutdownRequested; its lease is released once
  its processor made a last checkpoint (SHUTDOWN_READY) or the grace period ends.
- *ready*: the shard reports its processor's last checkpoint (``channel.ShutdownReady``).
- *lost*: the shard is told leaseLost (its lease is another worker's, or released); it must
  stop, and is terminated if it does not (``Shards.ended``).

Whatever a shard is in, it may end at any time (its exit status, its shard-end report and its
failure are the facts ``restart_policy`` reads, next to the state it ended in).
"""

from __future__ import annotations

from enum import Enum


class ShardState(Enum):
    PROCESSING = "processing"
    SHUTDOWN_REQUESTED = "shutdown requested"  # this host stops: waiting for the last checkpoint
    HANDING_OFF = "handing off"  # another worker asked for the lease: waiting for the last checkpoint
    SHUTDOWN_READY = "shutdown ready"  # its last checkpoint is made (this host stops)
    HANDED_OVER = "handed over"  # its last checkpoint is made and the lease handed over
    LEASE_LOST = "lease lost"  # told leaseLost before a last checkpoint
    RELEASED = "released"  # told leaseLost after its last checkpoint


class Event(Enum):
    HANDOFF = "handoff"
    STOP = "stop"
    READY = "ready"
    LOST = "lost"


S, E = ShardState, Event
TRANSITIONS: dict[ShardState, dict[Event, ShardState]] = {
    S.PROCESSING: {E.HANDOFF: S.HANDING_OFF, E.STOP: S.SHUTDOWN_REQUESTED, E.READY: S.SHUTDOWN_READY,
                   E.LOST: S.LEASE_LOST},
    S.SHUTDOWN_REQUESTED: {E.HANDOFF: S.HANDING_OFF, E.READY: S.SHUTDOWN_READY, E.LOST: S.LEASE_LOST},
    S.HANDING_OFF: {E.READY: S.HANDED_OVER, E.LOST: S.LEASE_LOST},
    S.SHUTDOWN_READY: {E.LOST: S.RELEASED},
    S.HANDED_OVER: {E.LOST: S.RELEASED},
    S.LEASE_LOST: {E.READY: S.RELEASED},
    S.RELEASED: {},
}
TOLD_LOST = frozenset({S.LEASE_LOST, S.RELEASED})  # told leaseLost: it must stop
CHECKPOINTED = frozenset({S.SHUTDOWN_READY, S.HANDED_OVER, S.RELEASED})  # its last checkpoint is made


def next_state(state: ShardState, event: Event) -> ShardState:
    """The state after ``event`` (the module docstring's diagram).

    >>> next_state(ShardState.HANDING_OFF, Event.READY)
    <ShardState.HANDED_OVER: 'handed over'>
    >>> next_state(ShardState.LEASE_LOST, Event.HANDOFF)
    <ShardState.LEASE_LOST: 'lease lost'>
    """
    return TRANSITIONS[state].get(event, state)

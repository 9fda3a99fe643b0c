"""The multilang conversation, pure: the state machine of one child's protocol
(multilang/PROTOCOL.md). No I/O: ``child`` does that; ``wire`` holds the bytes.

The conversation with one child is a state machine. The daemon sends an action, then
takes the child's messages until the ``status`` for it; checkpoint requests in between are
validated here and either answered at once (``Reply``) or handed out to be stored
(``Store``, then ``stored()`` gives the reply)::

      NEW --initialize--> INITIALIZING --status--> READY
      READY --processRecords--> PROCESSING --status--> READY
      READY --shutdownRequested--> SHUTTING_DOWN --status--> SHUTDOWN_REQUESTED
      READY, SHUTDOWN_REQUESTED --leaseLost--> LOSING_LEASE --status--> FINISHED
      READY, SHUTDOWN_REQUESTED --shardEnded--> ENDING_SHARD --status--> FINISHED
      any awaiting state --status for another action--> FAILED   (ProtocolError)
      any state --fail() (the child driver saw an exit, a timeout, a broken pipe)--> FAILED

Nothing is sent after FINISHED or FAILED; sending out of order is a bug (RuntimeError).

Checkpoints (PROTOCOL.md 5.2, 5.3) while awaiting: INITIALIZING and LOSING_LEASE have no
checkpointer (``InvalidStateException``); PROCESSING and SHUTTING_DOWN may checkpoint up to
the last record delivered; ENDING_SHARD up to ``SHARD_END``, and checkpointing the shard's
final record stores ``SHARD_END``. A value below the last successful checkpoint, above the
limit, malformed (not a sentinel nor a Kinesis sequence number: at most 129 digits), or with a
negative sub-sequence gets ``IllegalArgumentException``; the
same value again succeeds without a write.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from kcl_mp.errors import ProtocolError
from kcl_mp.multilang.child_lines import CheckpointRequest, Message, Status
from kcl_mp.multilang.wire import (
    ILLEGAL_ARGUMENT,
    INITIALIZE,
    INVALID_STATE,
    LEASE_LOST,
    LEASE_LOST_LINE,
    PROCESS_RECORDS,
    SHARD_ENDED,
    SHARD_ENDED_LINE,
    SHUTDOWN_REQUESTED,
    SHUTDOWN_REQUESTED_LINE,
    Batch,
    encode_checkpoint_reply,
    encode_initialize,
)
from kcl_mp.sequence import SHARD_END, ExtendedSequenceNumber, is_valid_sequence_number


class ChildState(enum.Enum):
    NEW = "new"
    INITIALIZING = "initializing"
    READY = "ready"
    PROCESSING = "processing"
    SHUTTING_DOWN = "shutting down"
    SHUTDOWN_REQUESTED = "shutdown requested"
    LOSING_LEASE = "losing lease"
    ENDING_SHARD = "ending shard"
    FINISHED = "finished"
    FAILED = "failed"


S = ChildState
# (state, action sent) -> state while its status is awaited
SEND: dict[tuple[ChildState, str], ChildState] = {
    (S.NEW, INITIALIZE): S.INITIALIZING,
    (S.READY, PROCESS_RECORDS): S.PROCESSING,
    (S.READY, SHUTDOWN_REQUESTED): S.SHUTTING_DOWN,
    (S.READY, LEASE_LOST): S.LOSING_LEASE,
    (S.READY, SHARD_ENDED): S.ENDING_SHARD,
    (S.SHUTDOWN_REQUESTED, LEASE_LOST): S.LOSING_LEASE,
    (S.SHUTDOWN_REQUESTED, SHARD_ENDED): S.ENDING_SHARD,
}
# awaiting state -> (the responseFor it needs, the state once it arrives)
AWAIT: dict[ChildState, tuple[str, ChildState]] = {
    S.INITIALIZING: (INITIALIZE, S.READY),
    S.PROCESSING: (PROCESS_RECORDS, S.READY),
    S.SHUTTING_DOWN: (SHUTDOWN_REQUESTED, S.SHUTDOWN_REQUESTED),
    S.LOSING_LEASE: (LEASE_LOST, S.FINISHED),
    S.ENDING_SHARD: (SHARD_ENDED, S.FINISHED),
}
_CHECKPOINTABLE = frozenset({S.PROCESSING, S.SHUTTING_DOWN, S.ENDING_SHARD})
_SHARD_END = ExtendedSequenceNumber(SHARD_END)
del S


@dataclass(frozen=True)
class Reply:
    """Write ``line`` to the child now (a checkpoint answered without storing anything)."""

    line: bytes


@dataclass(frozen=True)
class Store:
    """Store ``position`` in the lease table, then write ``Conversation.stored(...)``."""

    position: ExtendedSequenceNumber
    request: CheckpointRequest


@dataclass(frozen=True)
class Done:
    """The status for ``action`` arrived; the next action may be sent."""

    action: str


@dataclass(frozen=True)
class Ignored:
    """A known message that is not a reply (Java accepts and drops it)."""

    action: str


Outcome = Reply | Store | Done | Ignored


class Conversation:
    """The daemon's side of one child's protocol, as the transition table above.

    ``last_checkpoint`` starts at the lease checkpoint given to ``initialize`` and moves
    only when a ``Store`` is reported successful; ``largest`` is the highest position the
    child may checkpoint (its last delivered record, or SHARD_END at shard end).
    """

    def __init__(self, shard_id: str, stream: Mapping[str, str] | None = None):
        """``stream``: the keys a multi-stream lease's ``initialize`` adds (``LeaseStream.initialize_keys``)."""
        self.shard_id = shard_id
        self.stream = stream
        self.state = ChildState.NEW
        self.last_checkpoint: ExtendedSequenceNumber | None = None
        self.largest: ExtendedSequenceNumber | None = None
        self._at_shard_end: ExtendedSequenceNumber | None = None  # the final record, at shard end
        self._storing: Store | None = None

    @property
    def awaiting(self) -> str | None:
        """The action whose status is awaited, if any."""
        entry = AWAIT.get(self.state)
        return entry[0] if entry else None

    def _send(self, action: str) -> None:
        after = SEND.get((self.state, action))
        if after is None:
            raise RuntimeError(f"cannot send {action} to the processor for {self.shard_id} in state {self.state.value}")
        self.state = after

    # -- actions out ---------------------------------------------------------------------

    def initialize(self, checkpoint: ExtendedSequenceNumber | None) -> bytes:
        self._send(INITIALIZE)
        self.last_checkpoint = self.largest = checkpoint
        return encode_initialize(self.shard_id, checkpoint, self.stream)

    def process_records(self, batch: Batch) -> bytes:
        self._send(PROCESS_RECORDS)
        if batch.last is not None:
            self.largest = batch.last
        return batch.line

    def shutdown_requested(self) -> bytes:
        self._send(SHUTDOWN_REQUESTED)
        return SHUTDOWN_REQUESTED_LINE

    def lease_lost(self) -> bytes:
        self._send(LEASE_LOST)
        return LEASE_LOST_LINE

    def shard_ended(self) -> bytes:
        self._send(SHARD_ENDED)
        self._at_shard_end, self.largest = self.largest, _SHARD_END
        return SHARD_ENDED_LINE

    def fail(self) -> None:
        """The child broke the conversation (exit, timeout, broken pipe): nothing more is sent."""
        self.state = ChildState.FAILED

    @property
    def checkpointed_shard_end(self) -> bool:
        return self.last_checkpoint == _SHARD_END

    # -- messages in ---------------------------------------------------------------------

    def receive(self, message: Message) -> Outcome:
        """What to do about one message from the child while an action is outstanding."""
        if self._storing is not None:
            raise RuntimeError("receive() before the pending checkpoint was reported with stored()")
        entry = AWAIT.get(self.state)
        if entry is None:
            raise RuntimeError(f"no action is outstanding (state {self.state.value})")
        if isinstance(message, CheckpointRequest):
            return self._checkpoint(message)
        if isinstance(message, Status):
            expected, after = entry
            if message.response_for != expected:
                self.state = ChildState.FAILED
                raise ProtocolError(
                    f"processor for {self.shard_id} sent a status for {message.response_for!r} "
                    f"while {expected} was awaited: {message.line.strip()[:200]!r}")
            self.state = after
            return Done(expected)
        return Ignored(message.action)

    def stored(self, store: Store, error: str | None) -> bytes:
        """The reply once ``store.position`` was written (``error`` None) or refused."""
        if store is not self._storing:
            raise RuntimeError("stored() for a checkpoint that is not pending")
        self._storing = None
        if error is None:
            self.last_checkpoint = store.position
        return encode_checkpoint_reply(store.request.sequence_number, store.request.sub_sequence_number, error)

    def _checkpoint(self, request: CheckpointRequest) -> Outcome:
        seq, sub = request.sequence_number, request.sub_sequence_number

        def refuse(error: str) -> Reply:
            return Reply(encode_checkpoint_reply(seq, sub, error))

        if self.state not in _CHECKPOINTABLE:
            return refuse(INVALID_STATE)  # initialize and leaseLost have no checkpointer
        if seq is None:
            target = self.largest
            if target is None:  # no position known at all: Java's advancePosition(null) is a no-op
                return Reply(encode_checkpoint_reply(seq, sub, None))
        else:
            if sub is not None and sub < 0:
                return refuse(ILLEGAL_ARGUMENT)
            if not is_valid_sequence_number(seq):
                return refuse(ILLEGAL_ARGUMENT)
            target = ExtendedSequenceNumber(seq, sub or 0)
            last, largest = self.last_checkpoint, self.largest
            if (last is not None and target < last) or largest is None or target > largest:
                return refuse(ILLEGAL_ARGUMENT)
        if target == self.last_checkpoint:
            return Reply(encode_checkpoint_reply(seq, sub, None))  # already stored: no write
        position = _SHARD_END if target == self._at_shard_end else target
        self._storing = Store(position, request)
        return self._storing


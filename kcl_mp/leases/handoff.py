"""The incoming side of a graceful handoff: what this worker does, each renewal round, with a
lease another worker is handing it. Pure (decision table: tests/decisions/handoff_cases.json).

A 3.x leader (or this worker's steal) writes this worker as the lease's owner while the old owner,
named in ``checkpointOwner``, still holds it: the old owner checkpoints and lets go, or it does not.
Each round the new owner reads the lease and judges, in this order:

1. *gone*: the lease is deleted or owned by someone else now: forget it;
2. *ended*: it reached SHARD_END meanwhile: nothing left to process, forget it;
3. *handed over*: ``checkpointOwner`` is cleared: it is this worker's, start it;
4. *take*: take it by force (a conditional write) when the handoff is overdue
   (gracefulLeaseHandoffTimeoutMillis since the ask), the old owner stopped renewing it
   (its counter has not moved for failoverTimeMillis: *stalled*), or the old owner renews it
   but answers nothing (*silent*: asked by this run, the owner was not seen checkpointing
   before, failoverTimeMillis passed, two renewals since the ask and no checkpoint moved);
5. else *wait*.

A counter that moved since the last read restarts the stall clock (``changed_at``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from kcl_mp.leases.lease import Lease


class Verdict(str, Enum):
    GONE = "gone"
    ENDED = "ended"
    HANDED_OVER = "handed over"
    TAKE = "take"
    WAIT = "wait"


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    changed_at: float  # when the lease's counter last moved, as of this read
    why: str = ""  # for TAKE: the reason, in words


def judge_incoming(me: str, current: Lease | None, last: Lease, asked: Lease | None, asked_at: float,
                   changed_at: float, seen_checkpointing: bool, now: float, failover_s: float,
                   handoff_timeout_s: float) -> Judgement:
    """``current``: the lease as just read; ``last``: as the previous round read it; ``asked``: as
    this run's request left it (None: asked by an earlier run)."""
    if current is None or current.owner != me:
        return Judgement(Verdict.GONE, changed_at)
    if current.is_shard_end:
        return Judgement(Verdict.ENDED, changed_at)
    if not current.checkpoint_owner:
        return Judgement(Verdict.HANDED_OVER, changed_at)
    if current.counter != last.counter:
        changed_at = now
    overdue = now - asked_at > handoff_timeout_s
    stalled = now - changed_at > failover_s
    silent = (asked is not None and not seen_checkpointing and now - asked_at > failover_s
              and current.counter >= asked.counter + 2 and current.checkpoint == asked.checkpoint)
    if stalled:
        return Judgement(Verdict.TAKE, changed_at, "its owner stopped renewing it")
    if overdue:
        return Judgement(Verdict.TAKE, changed_at, "the handoff timed out")
    if silent:
        return Judgement(Verdict.TAKE, changed_at,
                         "its owner renews it but has neither checkpointed nor handed it over: it is not answering")
    return Judgement(Verdict.WAIT, changed_at)

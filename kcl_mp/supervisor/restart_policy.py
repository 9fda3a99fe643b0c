"""What the supervisor does when a shard's driver has ended: the processor's last transition.

Pure: the supervisor gathers the facts (``Gone``), asks ``after_exit``, and carries out the
``Decision``. In order, first match wins:

    reported SHARD_END checkpointed         finished   the shard is done; children may start
    lease no longer held, or host stopping  none       nothing to restart here
    stopped cleanly, no failure, and the    resume     no failure: it stopped for leaseLost (this
      lease is held here again                         host's hold lapsed: a pause, a lost renewal)
                                                       or a refused checkpoint, and the lease came
                                                       back; start at once from its checkpoint
    the executable cannot be started        stop_host  a configuration error: exit 1
    the lease is at SHARD_END already       finished   it checkpointed, then died before saying so
    missed the shard-end checkpoint         restart    (count shard_end_not_checkpointed)
    broke the protocol, processorFailure    stop_host  Java's behaviour, on request
      = EXIT
    any other failure                       restart    (count processor_failures)
    ... the restart is the N-th in a row    release    N > processorMaxRestarts: give the lease
                                                       to another host

A restart waits RESTART_BACKOFF (1 s doubling to 60 s, jittered) from the last checkpoint;
a worker that ran HEALTHY_AFTER_S starts the count again.

>>> from kcl_mp.config import ProcessorSettings
>>> import random
>>> gone = Gone(shard_end=None, code=4, failure="boom", ran_s=3.0, held=True, stopping=False,
...             at_shard_end=False, cannot_start=False, broke_protocol=True)
>>> d = after_exit(gone, 0, ProcessorSettings(command=("p",)), random.Random(1))
>>> d.action.value, d.attempts, d.counters
('restart', 1, ('processor_failures', 'processor_restarts'))
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import Enum

from kcl_mp.backoff import Backoff
from kcl_mp.config import ProcessorSettings
from kcl_mp.errors import EXIT_DEPENDENCY, EXIT_OK, EXIT_PROCESSOR

# A shard driver's exit status, in words (errors.EXIT_*): what the operator reads.
ENDED = {EXIT_PROCESSOR: "the processor failed", EXIT_DEPENDENCY: "AWS kept failing"}
RESTART_BACKOFF = Backoff(base_s=1.0, cap_s=60.0)
HEALTHY_AFTER_S = 60.0  # a worker that ran this long resets its restart count


@dataclass(frozen=True)
class Gone:
    """The facts about a worker that has exited."""

    shard_end: bool | None  # its report: True SHARD_END checkpointed, False missed, None no shard end
    code: int | None  # its exit status
    failure: str | None  # the cause it reported
    ran_s: float
    held: bool  # this host still holds the lease
    stopping: bool  # this host is stopping
    at_shard_end: bool  # the lease's checkpoint, read again, is SHARD_END
    cannot_start: bool  # the executable could not be started at all
    broke_protocol: bool  # the processor failed (crash, hang, wrong answer), not a dependency
    told_lost: bool = False  # the supervisor told it leaseLost before it ended


class Action(str, Enum):
    """What the supervisor does about a shard whose driver ended (a str, so logs read the same)."""

    FINISHED = "finished"  # the shard is done: its children may start
    NONE = "none"  # nothing to do here
    STOP_HOST = "stop_host"  # exit 1
    RESTART = "restart"  # from the last checkpoint, after ``delay_s``
    RESUME = "resume"  # no failure: start again from the last checkpoint now
    RELEASE = "release"  # give the lease to another host


@dataclass(frozen=True)
class Decision:
    action: Action
    why: str = ""
    counters: tuple[str, ...] = ()  # events to count
    attempts: int = 0  # failures in a row, this one included
    delay_s: float = 0.0  # before the restart


def after_exit(gone: Gone, attempts_before: int, settings: ProcessorSettings, rng: random.Random) -> Decision:
    if gone.shard_end:
        return Decision(Action.FINISHED, "ended and was checkpointed at SHARD_END")
    if not gone.held or gone.stopping:
        return Decision(Action.NONE)
    if gone.code == EXIT_OK and not gone.failure and gone.shard_end is None:
        cause = ("stopped for leaseLost when this host's hold on the lease lapsed" if gone.told_lost else
                 "stopped when a checkpoint was refused (the lease had moved)")
        return Decision(Action.RESUME, f"{cause}; the lease is held here again: starting it from its last checkpoint")
    if gone.cannot_start:
        return Decision(Action.STOP_HOST, f"the processor cannot be started ({gone.failure})")
    if gone.at_shard_end:
        return Decision(Action.FINISHED, "is already at SHARD_END: nothing to restart")
    if gone.shard_end is False:
        # Java retries this forever, silently (PROTOCOL.md 6). Say so, and retry with a fresh
        # processor: only this shard's children wait; every other shard goes on.
        counted = "shard_end_not_checkpointed"
        why = "the processor did not checkpoint at the end of the shard; its children cannot start until it does"
    else:
        counted = "processor_failures"
        ended = ENDED.get(gone.code or 0, f"its shard worker ended with status {gone.code}")
        why = f"{ended}: {gone.failure or 'no cause reported'}"
        if gone.broke_protocol and settings.on_failure == "EXIT":
            return Decision(Action.STOP_HOST, f"{why}; stopping this host (kclmp.processorFailure = EXIT, as the Java "
                            "daemon does)", (counted,))
    attempts = (0 if gone.ran_s > HEALTHY_AFTER_S else attempts_before) + 1
    if attempts > settings.max_restarts:
        return Decision(Action.RELEASE, why, (counted, "leases_released_after_failures"), attempts)
    return Decision(Action.RESTART, why, (counted, "processor_restarts"), attempts,
                    RESTART_BACKOFF.next_delay(attempts - 1, rng))

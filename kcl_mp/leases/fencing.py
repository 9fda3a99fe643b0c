"""Fencing before delivery: is this host's hold on a lease known fresh right now?

Another host may take a lease once it has seen the lease's counter unchanged for
failoverTimeMillis by its own clock. It starts counting no earlier than the moment it read
our last renewal, which landed after we SENT it: so our hold is safe until (the send time
of our last successful renewal) + failoverTimeMillis, less what the two clocks and this
host's own delays may add. A shard's records reach its processor, and its checkpoints are
written, only while the hold is younger than ``limit_s = failover_s - margin_s``; after that
nothing is handed over until a renewal succeeds (or the lease is known lost).

All times are this host's CLOCK_MONOTONIC (``time.monotonic()``), which is host-wide, so the
supervisor can send its values to the processes that deliver records. It keeps counting
while a process, or the whole host, is stopped (SIGSTOP, starvation): a host that wakes up
finds its holds old and delivers nothing until its renewals are confirmed again.

The margin, ``MARGIN_S + CLOCK_RATE * failover_s``, at most a third of failover:

- ``CLOCK_RATE`` (1 %): the other host's clock may run faster than ours. NTP slews a clock by
  at most 500 ppm; 1 % is twenty times that, and still only 0.1 s at the default 10 s.
- ``MARGIN_S`` (0.5 s): between the check and the moment the processor has the records, this
  host may be descheduled (a loaded host) and a large batch takes time to write to the pipe.
- The renewal's round trip and the pipe from the supervisor need no margin: the time used is
  when the renewal was sent, and a late message only makes the hold look older (the safe
  side). They decide how old a hold gets in normal running instead: up to one renew interval
  (failover / 3) plus a round trip, so a third of failover as the cap keeps even one failed
  renewal in a row from pausing delivery.

>>> hold = Hold(failover_s=10.0, renewed_at=100.0)
>>> hold.limit_s, hold.fresh(108.0), hold.fresh(109.5)
(9.4, True, False)
>>> hold.renewed(106.0); hold.fresh(109.5), round(hold.fresh_for(109.5), 3)
(True, 5.9)
"""

from __future__ import annotations

from kcl_mp.leases.lease import Lease

MARGIN_S = 0.5
CLOCK_RATE = 0.01


def margin_s(failover_s: float) -> float:
    """How much earlier than failoverTimeMillis a hold counts as stale (see the module doc)."""
    return min(MARGIN_S + CLOCK_RATE * failover_s, failover_s / 3)


def checkpoint_wait_s(failover_s: float) -> float:
    """How long a checkpoint asked for while the hold is stale waits for a renewal: one
    failover period, in which a supervisor that runs renews three times (none means it is
    stopped, or cannot reach the table)."""
    return failover_s


class Hold:
    """One lease's hold as this host knows it: when it was last confirmed (a renewal's send
    time), and whether that is recent enough to hand the shard's records over."""

    __slots__ = ("limit_s", "renewed_at")

    def __init__(self, failover_s: float, renewed_at: float):
        self.limit_s = failover_s - margin_s(failover_s)
        self.renewed_at = renewed_at

    def renewed(self, at: float) -> None:
        """A renewal sent at ``at`` succeeded (an older one arriving late changes nothing)."""
        self.renewed_at = max(self.renewed_at, at)

    def age(self, now: float) -> float:
        return now - self.renewed_at

    def fresh(self, now: float) -> bool:
        return now - self.renewed_at < self.limit_s

    def fresh_for(self, now: float) -> float:
        """Seconds until the hold goes stale (0 if it is already)."""
        return max(0.0, self.limit_s - (now - self.renewed_at))


def still_ours(sent: Lease, current: Lease | None, me: str) -> bool:
    """A renewal of ``sent`` lost its race (the counter moved): may ``current``, as the table
    holds it now, be renewed from, its processor going on where it is? Only if no one but us
    wrote it meanwhile: we hold it and the counter moved by one step at most, our own renewal
    that landed though its answer did not (a retry then finds the counter moved), or a
    leader's write that left it ours. Two steps or more mean another host held it between
    (took it, renewed it, handed it back): its processor must stop and the lease start again
    from its checkpoint, as another host's processor may have gone past ours."""
    return current is not None and current.holder == me and current.counter <= sent.counter + 1

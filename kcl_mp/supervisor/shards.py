"""The shards this host drives, as the supervisor sees them: one ``RunningShard`` each, in a pool process.

It keeps what each shard's driver reported (``worker.channel``), sends the supervisor's word
to the right pool process (commands, renewal batches), starts shards, and notices the ones
that ended, a dead pool process's included: that death is logged and counted once, and its
processors' process groups stopped (``Pools.stop_groups``). What a message or an ending
means for the leases is the supervisor's to decide: ``read`` hands those messages back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kcl_mp.config import Config
from kcl_mp.config.settings import StreamSettings
from kcl_mp.metrics import link
from kcl_mp.metrics.catalogue import Recorder, decode_samples
from kcl_mp.sequence import ExtendedSequenceNumber
from kcl_mp.supervisor.pool import PoolProcess, Pools, describe_exit
from kcl_mp.supervisor.progress import ShardProgress
from kcl_mp.supervisor.shard_life import TOLD_LOST, Event, ShardState, next_state
from kcl_mp.worker import channel
from kcl_mp.worker.usage import Usage, summarize

Command = type[channel.Shutdown] | type[channel.LeaseLost] | type[channel.Terminate] | type[channel.ChildrenCreated]


@dataclass
class RunningShard:
    """One shard being driven by a pool process."""

    key: str
    pool: PoolProcess
    started_at: float
    progress: ShardProgress
    state: ShardState = ShardState.PROCESSING  # what it was told and answered (shard_life)
    told_lost_at: float = float("-inf")  # when it was last told leaseLost or terminated: its time to stop
    shard_end: bool | None = None
    failure: str | None = None
    usage: Usage | None = None  # the processor's process tree, as last sampled
    renewed_at: float = float("-inf")  # the last renewal time it was sent
    exit_code: int | None = None  # set when it ended (ShardExited, or its pool process died)
    bytes_seen: int = 0  # its Progress.delivered_bytes as last acted on (the lease's throughputKBps)


class Shards:
    def __init__(self, config: Config, log_level: str, log_format: str, log: logging.LoggerAdapter,
                 metrics: Recorder, clock: Callable[[], float],
                 record_cost: Callable[[str, float], None] = lambda key, percent: None):
        self.pools = Pools(config, log_level, log_format)
        self.log, self.metrics, self.clock = log, metrics, clock
        self.record_cost = record_cost  # each sample of a lease's CPU: its processor's plus its pool share
        self.active: dict[str, RunningShard] = {}
        self.progress: dict[str, ShardProgress] = {}  # every shard driven here, kept across its restarts
        self.pool_exits = 0

    # -- messages in ------------------------------------------------------------------

    def read(self, pool: PoolProcess) -> list[tuple[RunningShard, channel.FromPool]]:
        """Take in what ``pool`` sent (bounded); give back the messages the leases must hear of:
        LeaseMoved, Children and ShutdownReady."""
        actions: list[tuple[RunningShard, channel.FromPool]] = []
        for _ in range(5000):  # bounded: a chatty pool process cannot starve the loop
            try:
                if pool.closed or not pool.conn.poll():
                    break
                message = pool.conn.recv()
            except (EOFError, OSError):
                pool.closed = True  # it is dying: the reap step restarts its shards
                break
            if isinstance(message, channel.Usage):
                self._usage(message)
                continue
            shard = self.active.get(message.shard)
            if shard is not None and shard.pool is pool and self._record(shard, message):
                actions.append((shard, message))
        return actions

    def _record(self, shard: RunningShard, message: channel.FromPool) -> bool:
        match message:
            case channel.Progress(delivered=delivered, checkpoint=checkpoint, millis_behind_latest=behind):
                shard.progress.update(delivered, checkpoint, behind)
                self.metrics.merge(decode_samples(message.samples))
                return message.delivered_bytes > shard.bytes_seen
            case channel.ShutdownReady(checkpoint=checkpoint):
                shard.state = next_state(shard.state, Event.READY)
                shard.progress.checkpoint = checkpoint
                return True
            case channel.ShardEnd(checkpointed=checkpointed):
                shard.shard_end = bool(checkpointed)
            case channel.Failed(cause=cause):
                shard.failure = cause
            case channel.ProcessorStarted(pid=pid, started=started):
                shard.pool.groups[shard.key] = (pid, started)
            case channel.ShardExited(code=code):
                shard.exit_code = code
            case channel.LeaseMoved() | channel.Children():
                return True
        return False

    def _usage(self, message: channel.Usage) -> None:
        shares = dict(message.pool_shares)
        for key, cpu, rss in message.samples:
            shard = self.active.get(key)
            if shard is not None:
                shard.usage = Usage(cpu, rss)
                self.record_cost(key, cpu + shares.get(key, 0.0))
                self.metrics.add("processor_cpu", cpu, key)
                self.metrics.add("processor_rss", rss, key)

    # -- words out --------------------------------------------------------------------

    def start(self, key: str, checkpoint: ExtendedSequenceNumber, consumer_arn: str | None, renewed_at: float,
              stream: StreamSettings | None = None, hash_range: tuple[int, int] | None = None) -> None:
        pool = self.pools.place(key)
        pool.send(channel.Start(key, checkpoint, consumer_arn, renewed_at, stream, hash_range))
        progress = self.progress.setdefault(key, ShardProgress(key))
        progress.restarted()
        self.active[key] = RunningShard(key, pool, self.clock(), progress, renewed_at=renewed_at)
        self.log.info("started shard worker for %s (pool process %d, pid %d)", key, pool.index, pool.pid)

    def tell(self, shard: RunningShard, command: Command) -> None:
        if command is channel.LeaseLost:
            shard.state = next_state(shard.state, Event.LOST)
            shard.told_lost_at = self.clock()
        shard.pool.send(command(shard.key))

    def ask_shutdown(self, shard: RunningShard, why: Event) -> None:
        """shutdownRequested, ``why``: for a handoff (Event.HANDOFF) or because this host stops (Event.STOP)."""
        shard.state = next_state(shard.state, why)
        self.tell(shard, channel.Shutdown)

    def fence(self, renewed_at: Mapping[str, float]) -> None:
        """Each shard learns of its lease's renewals (one batch per pool process); one whose
        lease is gone (``renewed_at`` has no entry) is told so."""
        batches: dict[int, tuple[PoolProcess, list[tuple[str, float]]]] = {}
        for key, shard in self.active.items():
            if shard.state in TOLD_LOST or shard.exit_code is not None:
                continue
            at = renewed_at.get(key)
            if at is None:
                self.log.info("shard %s: its lease is no longer held here; stopping its processor", key)
                self.tell(shard, channel.LeaseLost)
            elif at > shard.renewed_at:
                shard.renewed_at = at
                batches.setdefault(shard.pool.index, (shard.pool, []))[1].append((key, at))
        for pool, renewed in batches.values():
            pool.send(channel.Renewed(tuple(renewed)))

    # -- endings ----------------------------------------------------------------------

    def ended(self, lost_wait_s: float) -> tuple[list[RunningShard], list[tuple[RunningShard, channel.FromPool]]]:
        """The shards that ended since the last call, removed from the table (a dead pool
        process's among them), and the messages read on the way that the leases must hear of.
        A shard that ignored leaseLost for ``lost_wait_s`` is terminated."""
        now = self.clock()
        actions = [action for pool in self.pools.running for action in self.read(pool)]
        for dead in self.pools.dead():
            actions += self.read(dead)  # what it sent before it died
            self._pool_died(dead)
        ended = []
        for key, shard in list(self.active.items()):
            if shard.exit_code is None:
                if shard.state in TOLD_LOST and now - shard.told_lost_at > lost_wait_s:
                    self.log.warning("shard worker for %s did not stop after leaseLost; terminating it", key)
                    self.tell(shard, channel.Terminate)
                    shard.told_lost_at = now
                continue
            del self.active[key]
            shard.pool.shards.discard(key)
            shard.pool.groups.pop(key, None)
            ended.append(shard)
        return ended, actions

    def _pool_died(self, dead: PoolProcess) -> None:
        """Its shards end now, with its exit status; the supervisor restarts them as any other."""
        code = dead.process.exitcode
        lost = sorted(k for k, w in self.active.items() if w.pool is dead and w.exit_code is None)
        self.pools.stop_groups(dead, set(lost))  # its processors would outlive it
        self.pool_exits += 1
        self.metrics.add("pool_process_exits", 1)
        self.log.error("pool process %d (pid %d) exited with %s; restarting its %d shards: %s", dead.index, dead.pid,
                       describe_exit(code), len(lost), ", ".join(lost) or "-")
        for key in lost:
            shard = self.active[key]
            shard.exit_code = code if code is not None else -1
            shard.failure = shard.failure or f"its pool process {dead.index} (pid {dead.pid}) exited with " \
                                               f"{describe_exit(code)}"

    def running(self, shard: RunningShard) -> bool:
        return shard.exit_code is None and not shard.pool.closed and shard.pool.process.is_alive()

    def finish(self, wait: Callable[[float], None]) -> None:
        """The host's last step, once the leases are released: every shard hears leaseLost; one
        still running 10 s later is terminated; then the pool processes end (their pipes closed;
        the process groups of any that had to be killed are stopped). ``wait`` reads the pipes."""
        for shard in self.active.values():
            self.tell(shard, channel.LeaseLost)
        self._await_ends(wait, 10.0)
        for shard in self.active.values():
            if self.running(shard):
                self.log.warning("shard worker for %s still running; terminating it", shard.key)
                self.tell(shard, channel.Terminate)
        self._await_ends(wait, 5.0)
        for killed in self.pools.stop(5.0):
            self.pools.stop_groups(killed, set(killed.groups))

    def _await_ends(self, wait: Callable[[float], None], timeout_s: float) -> None:
        deadline = self.clock() + timeout_s
        while any(self.running(w) for w in self.active.values()) and self.clock() < deadline:
            wait(min(0.2, max(0.0, deadline - self.clock())))

    # -- reports ----------------------------------------------------------------------

    def usage_line(self, restarts: int) -> str | None:
        return summarize([(w.key, w.usage) for w in self.active.values() if w.usage is not None], restarts)

    def views(self) -> list[link.ShardView]:
        return [link.ShardView(w.key, w.progress.millis_behind_latest, w.usage.cpu_percent if w.usage else None,
                               w.usage.rss_bytes if w.usage else None) for w in self.active.values()]

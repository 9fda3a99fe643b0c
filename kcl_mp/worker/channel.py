"""The control channel between the supervisor and a pool process: typed messages, one module.

One duplex pipe per pool process (``multiprocess`` pickles the messages); every message
but ``Renewed`` and ``Usage`` names one shard. Pure: no boto3, no I/O.

supervisor -> pool process:

    Start(shard, checkpoint, consumer_arn, renewed_at, stream, hash_range)   drive this shard: start
                     its processor once the hold is fresh (``fencing.Hold``), from ``checkpoint``;
                     ``stream``: a multi-stream lease's stream as the supervisor's list has it now (it
                     may have been appended since the pool process was forked); ``hash_range``: the
                     lease's, for KPL de-aggregation
    Renewed(leases)  ((shard, at), ...): each lease was renewed by a request sent at ``at``
                     (the supervisor's ``time.monotonic()``, host-wide); one batch per fence step
    Shutdown(shard)  graceful stop: no more records; the processor gets shutdownRequested and
                     may checkpoint; the pool answers ShutdownReady and keeps the processor
                     until LeaseLost
    LeaseLost(shard) the lease is gone (lost, stolen or released): leaseLost, then the shard ends
    Terminate(shard) it did not end after LeaseLost: its processor's group gets SIGTERM, it ends
    ChildrenCreated(shard)   the children Children named have their leases (or a shard sync is
                     due to find them): only now does the processor hear shardEnded, as Java
                     creates them before it, so a SHARD_END checkpoint never stands without them

pool process -> supervisor:

    ProcessorStarted(shard, pid, started)   the processor child's pid and start time (clock
                     ticks since boot, /proc/<pid>/stat): the supervisor stops that process
                     group if the pool process dies (the start time proves the id is still it)
    Progress(shard, delivered, checkpoint, millis_behind_latest, samples, delivered_bytes)   at most
                     1/s a shard; samples: the metrics recorded since (``catalogue.encode_samples``);
                     delivered_bytes: record data handed to the processor so far (KCL 3.x: the
                     lease's throughputKBps; 0 when not measured)
    ShutdownReady(shard, checkpoint)
    Children(shard, children)   the shard is read to its end: ChildShards (ListShards-like dicts,
                     maybe empty); the processor hears of it once ChildrenCreated comes
    ShardEnd(shard, checkpointed)   shardEnded answered; True if it checkpointed at SHARD_END
    Usage(samples, pool_shares)   ((shard, cpu_percent, rss_bytes), ...): the processors, every
                     SAMPLE_EVERY_S; ((shard, cpu_percent), ...): the pool process's own CPU split
                     among its shards (``leases/cost.py``): together, each lease's cost
    LeaseMoved(shard)   a checkpoint was refused (the lease is another worker's): the processor
                     got the error, then leaseLost, and the shard ends
    Failed(shard, cause)   just before the shard ends with a non-zero code
    ShardExited(shard, code)   the shard's driver ended (its processor is stopped); ``code``
                     one of the worker codes in ``kcl_mp.errors``: EXIT_OK, EXIT_START,
                     EXIT_PROCESSOR, EXIT_DEPENDENCY

A pool process whose pipe closes (the supervisor died) tells every shard LeaseLost: without
renewals it cannot own them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kcl_mp.config.settings import StreamSettings
from kcl_mp.sequence import ExtendedSequenceNumber

# -- supervisor -> pool process ---------------------------------------------------------------

@dataclass(frozen=True)
class Start:
    shard: str
    checkpoint: ExtendedSequenceNumber
    consumer_arn: str | None = None  # enhanced fan-out: SubscribeToShard through this consumer
    renewed_at: float = float("-inf")  # the send time of the renewal that confirmed the lease
    stream: StreamSettings | None = None  # a multi-stream lease's stream; None: the configured one
    hash_range: tuple[int, int] | None = None  # the lease's shard's: KPL user records outside it are dropped


@dataclass(frozen=True)
class Renewed:
    leases: tuple[tuple[str, float], ...]


@dataclass(frozen=True)
class Shutdown:
    shard: str


@dataclass(frozen=True)
class LeaseLost:
    shard: str


@dataclass(frozen=True)
class Terminate:
    shard: str


@dataclass(frozen=True)
class ChildrenCreated:
    shard: str


ToPool = Start | Renewed | Shutdown | LeaseLost | Terminate | ChildrenCreated


# -- pool process -> supervisor ---------------------------------------------------------------

@dataclass(frozen=True)
class ProcessorStarted:
    shard: str
    pid: int
    started: int  # clock ticks since boot (/proc/<pid>/stat field 22)


@dataclass(frozen=True)
class Progress:
    shard: str
    delivered: int
    checkpoint: str
    millis_behind_latest: int | None
    samples: list[Any]
    delivered_bytes: int = 0


@dataclass(frozen=True)
class ShutdownReady:
    shard: str
    checkpoint: str


@dataclass(frozen=True)
class Children:
    shard: str
    children: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class ShardEnd:
    shard: str
    checkpointed: bool


@dataclass(frozen=True)
class Usage:
    samples: tuple[tuple[str, float, int], ...]
    pool_shares: tuple[tuple[str, float], ...] = ()  # each shard's share of the pool process's CPU (%)


@dataclass(frozen=True)
class LeaseMoved:
    shard: str


@dataclass(frozen=True)
class Failed:
    shard: str
    cause: str


@dataclass(frozen=True)
class ShardExited:
    shard: str
    code: int


FromPool = (ProcessorStarted | Progress | ShutdownReady | Children | ShardEnd | Usage | LeaseMoved | Failed
            | ShardExited)

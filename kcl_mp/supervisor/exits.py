"""A shard's end carried out: ``restart_policy.after_exit`` decides what the exit of its
processor means (resume, finished, restart with backoff, release the lease, stop the host);
this module gathers the facts it decides on and does what it says to the leases and the
restarts, with the log lines an operator follows."""

from __future__ import annotations

import logging
import random
from collections import Counter
from dataclasses import dataclass, field

from kcl_mp.config import Config
from kcl_mp.errors import EXIT_PROCESSOR, EXIT_START
from kcl_mp.logs import LeaseEvent, ShardLog, lease_event
from kcl_mp.metrics.catalogue import Recorder
from kcl_mp.supervisor import restart_policy
from kcl_mp.supervisor.coordinator import LeaseCoordinator
from kcl_mp.supervisor.restart_policy import Action
from kcl_mp.supervisor.shard_life import TOLD_LOST, ShardState
from kcl_mp.supervisor.shards import RunningShard
from kcl_mp.supervisor.starts import Restart


@dataclass
class Exits:
    config: Config
    leases: LeaseCoordinator
    restarts: dict[str, Restart]  # key -> Restart: shards waiting to be restarted (``starts``)
    log: ShardLog
    metrics: Recorder
    rng: random.Random
    counters: Counter[str] = field(default_factory=Counter)  # events an operator should see
    ended: set[str] = field(default_factory=set)  # shards this host checkpointed at SHARD_END

    def after_exit(self, shard: RunningShard, code: int | None, now: float, stopping: bool) -> bool:
        """Gather the facts, let ``restart_policy.after_exit`` decide, carry the decision out.
        True: the host must stop (kclmp.processorFailure = EXIT)."""
        key, leases = shard.key, self.leases
        if not shard.shard_end and shard.state is ShardState.HANDING_OFF and key in leases.held:
            leases.finish_handoff(key)  # it died while stopping: the last checkpoint stands
        cannot_start = code == EXIT_START
        if key in leases.held and not (stopping or shard.shard_end or cannot_start):
            leases.refresh(key)  # a restart resumes from the last checkpoint its predecessor wrote
        held = leases.held.get(key)
        gone = restart_policy.Gone(shard.shard_end, code, shard.failure, now - shard.started_at, held is not None,
                                   stopping, held is not None and held.lease.is_shard_end, cannot_start,
                                   code == EXIT_PROCESSOR, shard.state in TOLD_LOST)
        decision = restart_policy.after_exit(gone, self.restarts.get(key, Restart()).attempts, self.config.processor,
                                             self.rng)
        self.counters.update(decision.counters)
        limit = self.config.processor.max_restarts
        match decision.action:
            case Action.RESUME:
                self.restarts.pop(key, None)
                self.log.info("shard %s %s", key, decision.why)
            case Action.FINISHED:
                self.ended.add(key)
                leases.shard_ended(key)
                self.restarts.pop(key, None)
                self.log.info("shard %s %s", key, decision.why)
            case Action.STOP_HOST:
                self.log.error("shard %s: %s", key, decision.why, extra={"shard": key})
                return True
            case Action.RELEASE:
                self.restarts.pop(key, None)
                cooldown = leases.give_up(key)
                self.log.error("shard %s: %s; %d failures in a row (kclmp.processorMaxRestarts = %d): released the "
                               "lease for another host to try; this host leaves it alone for %.0f s", key,
                               decision.why, decision.attempts, limit, cooldown,
                               extra={"shard": key, **lease_event(LeaseEvent.GIVEN_UP, key)})
            case Action.RESTART:
                self.restarts[key] = Restart(decision.attempts, now + decision.delay_s)
                self.metrics.add("processor_restarts", 1, key)
                # One ERROR for the first failure in a row; the restarts after it are warnings, and
                # the release (if it comes to that) sums the loop up in one ERROR more.
                level = logging.ERROR if decision.attempts == 1 else logging.WARNING
                self.log.log(level, "shard %s: %s; restart %d of %d in %.1f s from the last checkpoint", key,
                             decision.why, decision.attempts, limit, decision.delay_s, extra={"shard": key})
        return False

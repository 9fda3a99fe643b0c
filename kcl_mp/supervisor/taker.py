"""Taking and stealing leases in a 2.x role, and a 3.x follower's rescue: ``balance`` decides
which, the coordinator writes (``take``, ``Handoffs.ask``). Here is what those decisions
remember between scans: each lease's counter as last observed, the leases this host leaves
alone after giving them up, when it last stole, and the fleet as the last scan saw it."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from kcl_mp.config import Config
from kcl_mp.leases import balance
from kcl_mp.leases.lease import Lease
from kcl_mp.leases.shard_syncer import TableView
from kcl_mp.logs import LeaseEvent, ShardLog, taker_event
from kcl_mp.metrics.catalogue import Recorder
from kcl_mp.supervisor.handoffs import Handoffs

Take = Callable[[Lease, str, LeaseEvent], bool]  # the coordinator's write: True when the lease is now held here


@dataclass
class Taker:
    config: Config
    log: ShardLog
    clock: Callable[[], float]
    rng: random.Random
    metrics: Recorder
    handoffs: Handoffs
    view: TableView  # shared with the shard syncer: the live workers the last scan saw
    take: Take
    observations: dict[str, balance.Observation] = field(default_factory=dict)
    avoid: dict[str, float] = field(default_factory=dict)  # key -> until when this host does not take it
    last_steal_at: float = float("-inf")
    figures: balance.FleetFigures | None = None  # the fleet as the last scan saw it

    @property
    def me(self) -> str:
        return self.config.worker_id

    def round(self, leases: Mapping[str, Lease], held: Callable[[str], Lease]) -> tuple[str, ...]:
        """A 2.x role's scan: take expired leases; steal at most once per take interval (a
        handoff when graceful handoff is on). ``held``: a lease of this host's as its take left
        it. The keys now held that were not."""
        now = self.clock()
        self.observations = balance.observe(self.observations, leases.values(), now)
        may_steal = now - self.last_steal_at >= self.config.lease.take_interval_s
        plan = balance.plan_leases(self.me, leases, self.observations, now, self.config.lease, self.rng,
                                   may_steal=may_steal)
        self.view.live_workers = plan.live_workers
        if may_steal and not plan.deferred:  # steals put off until leases start: try again next scan
            self.last_steal_at = now
        self.avoid = {key: until for key, until in self.avoid.items() if until > now}
        if self.avoid:  # leases whose processor kept failing here: another host should try them
            plan = replace(plan, take=tuple(k for k in plan.take if k not in self.avoid),
                           steal=tuple(k for k in plan.steal if k not in self.avoid))
        if plan.take or plan.steal:
            unfinished = sum(1 for lease in leases.values() if not lease.is_shard_end)
            self.log.info("taker: %s", plan.reason, extra=taker_event(unfinished, len(plan.live_workers), plan.target,
                                                                      plan.take, plan.steal))
        self.metrics.add("leases_taken", 0)  # a sample every scan, as Java's; each take adds 1
        self.metrics.add("leases_stolen", 0)
        acquired = [key for key in plan.take
                    if self.take(leases[key], f"took lease {key} (from {leases[key].owner or 'nobody'})",
                                 LeaseEvent.TAKEN)]
        for key in plan.steal:
            if self.config.lease.graceful_lease_handoff_enabled:
                seen = self.observations.get(key)
                if self.handoffs.ask(leases[key], seen is not None and seen.checkpointed):
                    self.metrics.add("leases_stolen", 1)
            elif self.take(leases[key], f"stole lease {key} from {leases[key].owner}", LeaseEvent.STOLEN):
                self.metrics.add("leases_stolen", 1)
                acquired.append(key)
        if self.metrics.enabled:
            self._record_fleet({**leases, **{key: held(key) for key in acquired}},
                               sum(1 for key in acquired if key in plan.take), now)
        return tuple(acquired)

    def rescue(self, leases: Mapping[str, Lease], after_s: float, leader: str) -> None:
        """A 3.x follower whose leader cannot be replaced soon takes what lies abandoned
        (fleet/role.py's docstring); ``leader`` says who should have reassigned it."""
        now = self.clock()
        self.observations = balance.observe(self.observations, leases.values(), now)
        plan = balance.plan_rescue(self.me, leases, self.observations, now, self.config.lease, after_s, self.rng)
        for key in plan.take:
            if self.avoid.get(key, now) <= now:
                self.take(leases[key], f"took lease {key} (from {leases[key].owner or 'nobody'}: nobody renewed or "
                          f"assigned it for {after_s:.0f} s and {leader} has not reassigned it)", LeaseEvent.RESCUED)

    def _record_fleet(self, left: Mapping[str, Lease], taken_expired: int, now: float) -> None:
        """The fleet view (``figures``, the Prometheus gauges) is what the scan left, with what
        it took counted as this worker's; CloudWatch gets the unclaimed leases it found (Java's
        TakeLeases ExpiredLeases), those left plus the expired ones it took."""
        observations = balance.observe(self.observations, left.values(), now)
        self.figures = fleet = balance.figures(self.me, left, observations, now, self.config.lease)
        self.metrics.add("unclaimed_leases", fleet.unclaimed + taken_expired)
        self.metrics.add("total_leases", fleet.total_leases)
        self.metrics.add("total_shards", fleet.open_leases)
        self.metrics.add("workers", len(fleet.worker_leases))
        for worker, count in fleet.worker_leases.items():
            self.metrics.add("worker_leases", count, worker)

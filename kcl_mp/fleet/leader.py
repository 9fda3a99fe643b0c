"""Leader election through the lock item, as the Java KCL 3.x workers hold it.

Java's DynamoDBLockBasedLeaderDecider keeps the lock with the DynamoDB lock client 1.4.0
in the coordinator-state table (``key`` "Leader"), or in the lease table once the 3.5 table
migration is complete (``leaseKey`` "Leader", plus ``entityType`` LEADER). The item::

    <key>                "Leader"
    ownerName            S  the holder's worker id
    leaseDuration        S  ms, as a string (120000 by default)
    recordVersionNumber  S  a fresh UUID on every write
    isReleased           S  "1" when released without deleting (the KCL deletes instead)

Writes (``#pk`` the key attribute; the lock client's own conditions):

    acquire (absent)     PutItem     attribute_not_exists(#pk)
    acquire (expired)    PutItem     attribute_exists(#pk) AND #rvn = :rvn    (the version seen)
    acquire (released)   PutItem     attribute_exists(#pk) AND #ir = :ir
    heartbeat            UpdateItem  attribute_exists(#pk) AND #rvn = :rvn AND #on = :on
                                     SET #ld = :ld, #rvn = :newRvn
    release              DeleteItem  attribute_exists(#pk) AND #rvn = :rvn AND #on = :on

Expiry is never read from a clock in the item: a contender remembers the record version it
first saw and when (on its own monotonic clock, after the read); the lock is expired once
that same version has been seen for longer than the item's ``leaseDuration``. The holder
believes it leads until ``leaseDuration`` after the start of its last successful write.
So a holder's belief ends no later than any contender may take over (each heartbeat's
version is seen only after the write that began the holder's period), and a Java host and
a kcl-mp host never both lead; a dead leader is replaced ``leaseDuration`` after a
contender first sees its last version. Java's decider checks at most once per heartbeat
period (30 s) when it does not lead, and heartbeats every 30 s.

A kcl-mp leader writes a lease duration of failoverTimeMillis (``Config.leader_lock_ms``)
and heartbeats every renewal round, so a dead or paused kcl-mp leader is replaced about as
fast as a dead worker's leases expire, not after Java's 120 s. Nothing changes for a Java
host: its lock client reads the duration from the item (whatever the holder wrote) and,
checking every 30 s, sees a new version every time while a kcl-mp leader lives; when it
holds the lock itself it writes its own 120 s, which kcl-mp contenders honour in turn.
The rule above holds for any duration, so there are never two leaders.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from kcl_mp.aws.errors import CONDITION_FAILED, call
from kcl_mp.errors import DependencyError
from kcl_mp.fleet.state_store import StateTables
from kcl_mp.leases.lease import ENTITY_TYPE
from kcl_mp.leases.rows import LEADER, LEADER_KEY, RowError, leader_view

log = logging.getLogger("kcl_mp.leader")

LEASE_DURATION_MS = 120_000  # DynamoDBLockBasedLeaderDecider's defaults
HEARTBEAT_PERIOD_MS = 30_000
OWNER, DURATION, VERSION, RELEASED = "ownerName", "leaseDuration", "recordVersionNumber", "isReleased"


@dataclass(frozen=True)
class Lock:
    """The lock item as read."""

    owner: str
    lease_duration_ms: int
    version: str
    released: bool


# What a contender last read when the lock row cannot be parsed: nobody can take it, so nobody
# leads until it is fixed, and followers rescue leases as under a lock that never ends (fleet/role.py).
UNREADABLE = Lock("(an unreadable lock)", 2**63 - 1, "", False)


@dataclass(frozen=True)
class Sighting:
    """A record version seen, and when (monotonic seconds)."""

    version: str
    at: float


class LockTable:
    """The lock item's reads and conditional writes (Java's leader/LeaderLock.java through the lock
    client); a lost race is False."""

    def __init__(self, client: Any, tables: StateTables, owner: str, lease_duration_ms: int = LEASE_DURATION_MS):
        self.client = client
        self.table = tables.coordinator_table
        self.key_name = tables.coordinator_key
        self.entity_type = tables.java35
        self.owner = owner
        self.lease_duration_ms = lease_duration_ms

    def read(self) -> Lock | None:
        item = call(f"reading the leader lock in {self.table}", partial(
            self.client.get_item, TableName=self.table, Key=self._key(), ConsistentRead=True)).get("Item")
        if not item:
            return None
        try:  # a lock nobody can read holds the election up, as an unreachable table would; never a crash
            view = leader_view(item)
        except RowError as exc:
            raise DependencyError(f"the leader lock ({self.key_name} {LEADER_KEY} in {self.table}) cannot be read: "
                                  f"{exc}", retriable=False) from exc
        return Lock(view.owner, view.lease_duration_ms, view.record_version, RELEASED in item)

    def acquire(self, version: str, seen: Lock | None) -> bool:
        """Write the lock as ours with ``version``: over nothing, over a released lock,
        or over ``seen`` (expired) if its version is still the one stored."""
        item = {**self._key(), OWNER: {"S": self.owner}, DURATION: {"S": str(self.lease_duration_ms)},
                VERSION: {"S": version}}
        if self.entity_type:
            item[ENTITY_TYPE] = {"S": LEADER}
        names = {"#pk": self.key_name}
        values: dict[str, Any] = {}
        if seen is None:
            condition = "attribute_not_exists(#pk)"
        elif seen.released:
            condition = "attribute_exists(#pk) AND #ir = :ir"
            names["#ir"] = RELEASED
            values[":ir"] = {"S": "1"}
        else:
            condition = "attribute_exists(#pk) AND #rvn = :rvn"
            names["#rvn"] = VERSION
            values[":rvn"] = {"S": seen.version}
        kwargs: dict[str, Any] = {"ExpressionAttributeValues": values} if values else {}
        return self._write(self.client.put_item, "acquiring", Item=item, ConditionExpression=condition,
                           ExpressionAttributeNames=names, **kwargs)

    def heartbeat(self, version: str, new_version: str) -> bool:
        return self._write(
            self.client.update_item, "heartbeating", Key=self._key(), UpdateExpression="SET #ld = :ld, #rvn = :newRvn",
            ConditionExpression="attribute_exists(#pk) AND #rvn = :rvn AND #on = :on",
            ExpressionAttributeNames={"#pk": self.key_name, "#ld": DURATION, "#rvn": VERSION, "#on": OWNER},
            ExpressionAttributeValues={":ld": {"S": str(self.lease_duration_ms)}, ":newRvn": {"S": new_version},
                                       ":rvn": {"S": version}, ":on": {"S": self.owner}})

    def release(self, version: str) -> bool:
        return self._write(
            self.client.delete_item, "releasing", Key=self._key(),
            ConditionExpression="attribute_exists(#pk) AND #rvn = :rvn AND #on = :on",
            ExpressionAttributeNames={"#pk": self.key_name, "#rvn": VERSION, "#on": OWNER},
            ExpressionAttributeValues={":rvn": {"S": version}, ":on": {"S": self.owner}})

    def _key(self) -> dict[str, Any]:
        return {self.key_name: {"S": LEADER_KEY}}

    def _write(self, request: Callable[..., Any], what: str, **kwargs: Any) -> bool:
        def write() -> bool:
            request(TableName=self.table, **kwargs)
            return True

        return call(f"{what} the leader lock in {self.table}", write, {CONDITION_FAILED: False})


class LeaderElection:
    """One worker's part in the election; ``check`` once per heartbeat period.

    The clock (monotonic seconds) and the version generator are injected so a test can
    drive both. ``may_take``, asked only when the lock is there for the taking (absent,
    released or expired), may still say no: the table migration has left this lock's table
    (fleet/role.py)."""

    def __init__(self, lock: LockTable, clock: Callable[[], float] = time.monotonic,
                 new_version: Callable[[], str] = lambda: str(uuid.uuid4()),
                 may_take: Callable[[], bool] = lambda: True):
        self.lock = lock
        self.clock = clock
        self.new_version = new_version
        self.may_take = may_take
        self.held: Sighting | None = None  # our version and when its write began
        self.seen: Sighting | None = None  # another holder's version, first seen when
        self.last_read: Lock | None = None  # the lock as a contender last read it (None: absent, or we lead)

    @property
    def worker_id(self) -> str:
        return self.lock.owner

    def is_leader(self) -> bool:
        """Whether this worker leads now (no I/O): it holds a lock it wrote or renewed
        less than the lease duration ago."""
        return self.held is not None and self.clock() - self.held.at <= self.lock.lease_duration_ms / 1000

    def check(self) -> bool:
        """Heartbeat the lock we hold, or try to acquire it; whether we lead afterwards."""
        if self.is_leader():
            assert self.held is not None
            began, version = self.clock(), self.new_version()
            if self.lock.heartbeat(self.held.version, version):
                self.held = Sighting(version, began)
                return True
            log.warning("worker %s: lost the leader lock in %s (another worker took it)",
                        self.worker_id, self.lock.table)
            self.held = None
            return False
        self.held = None
        try:
            current = self.last_read = self.lock.read()
        except DependencyError as exc:
            if not exc.retriable:
                self.last_read = UNREADABLE
            raise
        now = self.clock()
        if current is not None and not current.released:
            if self.seen is None or self.seen.version != current.version:
                self.seen = Sighting(current.version, now)
                return False
            if now - self.seen.at <= current.lease_duration_ms / 1000:
                return False
        if not self.may_take():
            return False
        began, version = self.clock(), self.new_version()
        if not self.lock.acquire(version, current):
            return False
        self.held, self.seen, self.last_read = Sighting(version, began), None, None
        log.info("worker %s: became leader (lock in %s%s)", self.worker_id, self.lock.table,
                 f", replacing {current.owner}" if current is not None else "")
        return True

    def release(self) -> bool:
        """Give the lock up (shutdown): delete it if we still hold it, so the next leader need not wait."""
        held, self.held = self.held, None
        if held is None or self.clock() - held.at > self.lock.lease_duration_ms / 1000:
            return False
        return self.lock.release(held.version)

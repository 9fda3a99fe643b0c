"""KCL 3.5's table migration: the reads and writes (the rules are in ``table_migration``).

``TableMigrator`` is Java's TableMigrationStateMachineImpl with the routing of its
CoordinatorStateDAO and WorkerMetricStatsDAO (docs/kcl3-facts.md section 7):

    start      read TableMigration3.5 from the own CoordinatorState table (DescribeTable
               first: no own table, no status) and settle the local status
    tables     where this worker writes (fixed at start), where the lock is (the own table
               until COMPLETE), and where it reads (the own table first, then the lease
               table, until COMPLETE; the lease table alone after)
    refresh    every scan: read the stored status again; COMPLETE moves every read, the
               lock and the writes to the lease table
    lead       the leader's step after its round (``table_migration.leader_step``)

Writes, as Java sends them (the own table's key attribute is ``key``):

    create status    PutItem own table, attribute_not_exists(key), entityType TABLE_MIGRATION
    update status    UpdateItem own table, key = TableMigration3.5 AND tm = <old>: SET tm, mb, mts, h
    delete status    DeleteItem own table (INIT whose support regressed; unconditional)
    move rows        TransactWriteItems, 25 rows a batch: ConditionCheck own Leader
                     ownerName = <me>; per row Put lease table attribute_not_exists(leaseKey)
                     and Delete own table
    complete         TransactWriteItems: the same ConditionCheck; Put COMPLETE in the lease
                     table (attribute_not_exists(leaseKey)); Put COMPLETE over the own row
                     conditioned tm = PENDING

Java runs the move on its own thread and writes PENDING at the next round; here it runs
inline (a handful of rows) and PENDING is written in the same round, after the same check
that the own table holds nothing but Leader and TableMigration3.5.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from kcl_mp.aws.dynamodb import scan_all, table_status
from kcl_mp.aws.errors import CONDITION_FAILED, NOT_FOUND, call
from kcl_mp.errors import DependencyError
from kcl_mp.fleet import table_migration as tm
from kcl_mp.fleet.fleet_metrics import read_worker_metrics
from kcl_mp.fleet.state_store import StateTables, update_expected
from kcl_mp.leases.lease import ENTITY_TYPE, LEASE_KEY
from kcl_mp.leases.rows import (
    CLIENT_VERSION_MIGRATION,
    LEADER_KEY,
    MIGRATION_KEY,
    TABLE_MIGRATION,
    TABLE_MIGRATION_KEY,
    CoordinatorState,
    RowError,
    WorkerMetrics,
    state_view,
)

_BATCH = 25  # TableMigrationStateMachineImpl.TRANSACTION_BATCH_SIZE
_KEEP_TYPES = ("STREAM", CLIENT_VERSION_MIGRATION)  # entityType values Java deserializes and writes back


@dataclass
class Scan:
    """The worker metrics the last read saw, per table (the leader's summary needs both)."""

    own: list[WorkerMetrics] = field(default_factory=list)
    lease: list[WorkerMetrics] = field(default_factory=list)


class TableMigrator:
    """One worker's part in the table migration (module docstring)."""

    def __init__(self, client: Any, application: str, lease_table: str, worker_id: str, *, migrate_all: bool,
                 complete_bake_s: int = 86400, coordinator_table: str | None = None,
                 metrics_table: str | None = None, clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)):
        self.client, self.me, self.migrate_all, self.clock_ms = client, worker_id, migrate_all, clock_ms
        self.own = StateTables.separate(application, coordinator_table=coordinator_table,
                                        metrics_table=metrics_table, java35=True)
        self.lease = StateTables.in_lease_table(lease_table)
        self.complete_bake_s = tm.complete_bake_s(complete_bake_s)
        self.local = self.at_start = tm.INIT
        self.stored: CoordinatorState | None = None
        self.scan = Scan()

    # -- where things are ----------------------------------------------------------------

    def start(self) -> tm.InitialStatus:
        """Settle the local status (raises DependencyError on Java's phase-order refusal)."""
        exists = table_status(self.client, self.own.coordinator_table) is not None
        self.stored = self._stored() if exists else None
        stored = self.stored.value if self.stored is not None else None
        if stored is None:  # the lease table's copy (written with COMPLETE) or a new 3.5 fleet's state
            copy = self._read(self.lease, TABLE_MIGRATION_KEY)
            if copy is not None and copy.value == tm.COMPLETE:
                stored = tm.COMPLETE
        has_state = not exists and self._get(self.lease, MIGRATION_KEY) is not None
        try:
            begin = tm.start(exists, stored, self.migrate_all, has_state)
        except tm.PhaseError as exc:
            raise DependencyError(f"{exc} ({TABLE_MIGRATION_KEY} in {self.own.coordinator_table})",
                                  retriable=False) from exc
        self.local = self.at_start = begin.status
        return begin

    @property
    def complete(self) -> bool:
        return self.local == tm.COMPLETE

    @property
    def writes(self) -> StateTables:
        """Where this worker writes its state and metrics (fixed at start, as Java's DAOs)."""
        return self.lease if self.complete or tm.writes_to_lease_table(self.at_start) else self.own

    @property
    def lock(self) -> StateTables:
        return self.lease if self.complete else self.own

    @property
    def reads(self) -> tuple[StateTables, ...]:
        return (self.lease,) if self.complete else (self.own, self.lease)

    # -- every scan ----------------------------------------------------------------------

    def refresh(self) -> bool:
        """Read the stored status again; True when the migration has just become COMPLETE."""
        if self.complete:
            return False
        self.stored = self._stored()
        was = self.local
        self.local = tm.refreshed(self.local, self.stored.value if self.stored else None, self.migrate_all)
        return was != tm.COMPLETE and self.complete

    # -- the leader ----------------------------------------------------------------------

    def lead(self, lease_owners: Iterable[str], unexpired_owners: Iterable[str], now_s: float,
             report_period_s: float) -> tm.Step:
        """The leader's step (after its round and ``worker_metrics``); a ``complete`` step
        that succeeded means: release the lock, everything is in the lease table now."""
        if self.complete:
            return tm.NONE
        self.stored = self._stored()
        self.local = tm.refreshed(self.local, self.stored.value if self.stored else None, self.migrate_all)
        if self.complete:
            return tm.Step("complete", why="completed by another leader")
        summary = self._summary(set(lease_owners), set(unexpired_owners), now_s, report_period_s)
        own_rows = self._own_rows() if self.local == tm.PENDING else set()
        step = tm.leader_step(self.local, self.stored, summary, own_rows, self.clock_ms(), self.complete_bake_s)
        done = self._do(step)
        if done and step.kind == "write" and self.local == tm.INIT and step.status == tm.DEPLOYED:
            self.local = tm.DEPLOYED
        if done and step.kind == "complete":
            self.local = tm.COMPLETE
        return step if done else tm.NONE

    def worker_metrics(self) -> list[WorkerMetrics]:
        """Every worker's metrics from each table read (the newest ``lut`` per worker). With
        no stored status no worker can be writing to the lease table (only PENDING and COMPLETE
        do), so that scan of the whole lease table is saved, where Java reads it anyway."""
        self.scan = Scan()
        for tables in self.reads:
            if tables.shared and not self.complete and self.stored is None:
                continue
            found = read_worker_metrics(self.client, tables)
            (self.scan.lease if tables.shared else self.scan.own).extend(found)
        newest: dict[str, WorkerMetrics] = {}
        for metrics in [*self.scan.own, *self.scan.lease]:
            if metrics.worker_id not in newest or metrics.updated_at_s > newest[metrics.worker_id].updated_at_s:
                newest[metrics.worker_id] = metrics
        return list(newest.values())

    def _summary(self, owners: set[str], unexpired: set[str], now_s: float, period_s: float) -> tm.Summary:
        def live(rows: list[WorkerMetrics]) -> set[str]:  # MigrationAwareLAMDataManager: 2 x the period
            return {m.worker_id for m in rows if now_s - m.updated_at_s <= 2 * period_s}
        support: dict[str, tuple[int, int]] = {}  # worker -> (slu, sup), the newest slu wins
        for m in [*self.scan.own, *self.scan.lease]:
            if m.support_code is not None and m.support_updated_s is not None:
                if m.worker_id not in support or m.support_updated_s > support[m.worker_id][0]:
                    support[m.worker_id] = (m.support_updated_s, m.support_code)
        supporting = {w for w, (slu, sup) in support.items()
                      if sup >= tm.SUPPORT_CODE and now_s - slu <= 3 * period_s}
        return tm.Summary(owners, unexpired, live(self.scan.own), live(self.scan.lease), supporting)

    # -- I/O -----------------------------------------------------------------------------

    def _do(self, step: tm.Step) -> bool:
        if step.kind == "none":
            return False
        if step.kind == "delete":
            call(f"deleting {TABLE_MIGRATION_KEY} in {self.own.coordinator_table}", partial(
                self.client.delete_item, TableName=self.own.coordinator_table, Key=_own_key(TABLE_MIGRATION_KEY)))
            return True
        assert step.status is not None
        state = tm.set_status(self.stored, step.status, self.me, self.clock_ms())
        if step.kind == "move":
            self._move()
            if self._own_rows():
                return False  # written meanwhile: the next round moves them
            return self._write_status(state, step.expected)
        if step.kind == "complete":
            return self._complete(state)
        return self._write_status(state, step.expected)

    def _write_status(self, state: CoordinatorState, expected: str | None) -> bool:
        table = self.own.coordinator_table

        def write() -> bool:
            if expected is None:
                self.client.put_item(TableName=table, Item=self._status_item(state, self.own),
                                     ConditionExpression="attribute_not_exists(#k)",
                                     ExpressionAttributeNames={"#k": "key"})
            else:
                update_expected(self.client, table, ("key", TABLE_MIGRATION_KEY), ("tm", expected),
                                state.attributes("tm"))
            return True

        return call(f"writing {TABLE_MIGRATION_KEY} ({state.value}) in {table}", write, {CONDITION_FAILED: False})

    def _move(self) -> None:
        rows = [item for item in _scan(self.client, self.own.coordinator_table)
                if item.get("key", {}).get("S") not in tm.NOT_MOVED]
        for start in range(0, len(rows), _BATCH):
            batch = rows[start:start + _BATCH]
            writes: list[dict[str, Any]] = [self._fence()]
            for item in batch:
                writes.append({"Put": {"TableName": self.lease.coordinator_table, "Item": moved(item),
                                       "ConditionExpression": f"attribute_not_exists({LEASE_KEY})"}})
                writes.append({"Delete": {"TableName": self.own.coordinator_table, "Key": {"key": item["key"]}}})
            self._transact(writes, f"moving {len(batch)} coordinator-state rows to {self.lease.coordinator_table}")

    def _complete(self, state: CoordinatorState) -> bool:
        writes = [self._fence(),
                  {"Put": {"TableName": self.lease.coordinator_table, "Item": self._status_item(state, self.lease),
                           "ConditionExpression": f"attribute_not_exists({LEASE_KEY})"}},
                  {"Put": {"TableName": self.own.coordinator_table, "Item": self._status_item(state, self.own),
                           "ConditionExpression": "tm = :expectedStatus",
                           "ExpressionAttributeValues": {":expectedStatus": {"S": tm.PENDING}}}}]
        return self._transact(writes, f"writing {TABLE_MIGRATION_KEY} COMPLETE")

    def _fence(self) -> dict[str, Any]:
        """The lock in the own table still names this worker (a stale leader writes nothing)."""
        return {"ConditionCheck": {"TableName": self.own.coordinator_table, "Key": _own_key(LEADER_KEY),
                                   "ConditionExpression": "ownerName = :owner",
                                   "ExpressionAttributeValues": {":owner": {"S": self.me}}}}

    def _transact(self, writes: list[dict[str, Any]], what: str) -> bool:
        # cancelled: no longer the lock holder, or a row already there: the next round retries
        def write() -> bool:
            self.client.transact_write_items(TransactItems=writes)
            return True

        return call(what, write, {"TransactionCanceledException": False})

    def _status_item(self, state: CoordinatorState, tables: StateTables) -> dict[str, Any]:
        return {tables.coordinator_key: {"S": TABLE_MIGRATION_KEY}, ENTITY_TYPE: {"S": TABLE_MIGRATION},
                **state.attributes("tm")}

    def _own_rows(self) -> set[str]:
        return {item["key"]["S"] for item in _scan(self.client, self.own.coordinator_table)
                if "key" in item and item["key"].get("S") not in tm.NOT_MOVED}

    def _stored(self) -> CoordinatorState | None:
        return self._read(self.own, TABLE_MIGRATION_KEY)

    def _read(self, tables: StateTables, key: str) -> CoordinatorState | None:
        """The status row ``key`` in ``tables``; None when absent or unreadable."""
        item = self._get(tables, key)
        if item is None or "tm" not in item:
            return None
        try:
            return state_view(item, "tm")
        except RowError:
            return None  # Java: "Unable to deserialize state", read as absent

    def _get(self, tables: StateTables, key: str) -> dict[str, Any] | None:
        answer: dict[str, Any] = call(f"reading {key} in {tables.coordinator_table}", partial(
            self.client.get_item, TableName=tables.coordinator_table, Key={tables.coordinator_key: {"S": key}},
            ConsistentRead=True), {NOT_FOUND: {}})  # the own table is gone: nothing stored there
        return answer.get("Item")


def moved(item: Mapping[str, Any]) -> dict[str, Any]:
    """An own-table row as Java writes it into the lease table (deserialized, then
    serialized with ``leaseKey``: Migration3.0 gains its entityType; an unknown entityType
    is dropped, as Java's generic CoordinatorState drops it).

    >>> moved({"key": {"S": "Migration3.0"}, "cv": {"S": "CLIENT_VERSION_3X"}})["entityType"]
    {'S': 'CLIENT_VERSION_MIGRATION'}
    """
    out = {name: value for name, value in item.items() if name not in ("key", ENTITY_TYPE)}
    key = item["key"]["S"]
    kind = item.get(ENTITY_TYPE, {}).get("S")
    if key == MIGRATION_KEY and kind is None:
        kind = CLIENT_VERSION_MIGRATION
    return {LEASE_KEY: {"S": key}, **({ENTITY_TYPE: {"S": kind}} if kind in _KEEP_TYPES else {}), **out}


def _own_key(key: str) -> dict[str, Any]:
    return {"key": {"S": key}}


def _scan(client: Any, table: str) -> list[dict[str, Any]]:
    return scan_all(client, f"scanning {table}", missing_is_empty=True, TableName=table, ConsistentRead=True)

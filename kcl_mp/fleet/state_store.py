"""The KCL 3.x coordinator state: where it lives, its table, and the fleet's client version.

Java keeps three kinds of state beside the leases (docs/kcl3-facts.md, sections 1 and 7):

    what                 3.1.3 (and 3.5 before its table migration)   3.5 after it
    leader lock          <app>-CoordinatorState, key "Leader"          lease table, leaseKey "Leader"
    client version       <app>-CoordinatorState, key "Migration3.0"    lease table, leaseKey "Migration3.0"
    worker metrics       <app>-WorkerMetricStats, wid <worker id>      lease table, leaseKey <worker id>

``StateTables`` names the place for one application; every 3.x module (leader,
worker_metrics) writes through it, so the same code serves both layouts; which place a
worker reads and writes is KCL 3.5's table migration (``table_migrator.TableMigrator``).
3.5 writes an ``entityType`` on every such row it creates, in either place
(CoordinatorState.serialize; updates leave it alone); 3.1.3 does not, and ignores one it
finds (MigrationState.deserialize keeps unknown attributes).

Writes sent here (Java's CoordinatorStateDAO sends them with the legacy ``Expected``
parameter; these are the same conditions as expressions, ``#k`` the table's key attribute):

    create state     PutItem     attribute_not_exists(#k)
    update version   UpdateItem  #k = :key AND cv = :old
                                 SET cv, mb, mts, h     (the old value goes to the head of h, 10 kept)
    create table     CreateTable #k S HASH, PAY_PER_REQUEST  (what a Java worker does at start)

``initialise_client_version`` is MigrationClientVersionStateInitializer: it reads
``Migration3.0`` and writes what ``client_version.initial`` (the rule, pure) decides.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from kcl_mp.aws.dynamodb import create_table
from kcl_mp.aws.errors import CONDITION_FAILED, NOT_FOUND, call
from kcl_mp.errors import DependencyError
from kcl_mp.fleet import client_version
from kcl_mp.leases.lease import ENTITY_TYPE, LEASE_KEY
from kcl_mp.leases.rows import (
    CLIENT_VERSION_MIGRATION,
    MIGRATION_KEY,
    CoordinatorState,
    RowError,
    state_view,
)

log = logging.getLogger("kcl_mp.coordinator_state")

_INIT_RETRIES = 10  # MigrationClientVersionStateInitializer.MAX_INITIALIZATION_RETRY


@dataclass(frozen=True)
class StateTables:
    """Where one application's coordinator state and worker metrics are kept."""

    coordinator_table: str
    coordinator_key: str  # the table's hash key: "key", or "leaseKey" in the lease table
    metrics_table: str
    metrics_key: str  # "wid", or "leaseKey" in the lease table
    java35: bool  # write 3.5's attributes (entityType; sup/slu on worker metrics)

    @classmethod
    def separate(cls, application: str, *, coordinator_table: str | None = None, metrics_table: str | None = None,
                 java35: bool = False) -> StateTables:
        """The own tables (CoordinatorStateTableConfig / WorkerMetricsTableConfig default names)."""
        return cls(coordinator_table or f"{application}-CoordinatorState", "key",
                   metrics_table or f"{application}-WorkerMetricStats", "wid", java35)

    @classmethod
    def in_lease_table(cls, lease_table: str) -> StateTables:
        """KCL 3.5's single table, once its table migration is complete."""
        return cls(lease_table, LEASE_KEY, lease_table, LEASE_KEY, True)

    @property
    def shared(self) -> bool:
        return self.coordinator_key == LEASE_KEY


def ensure_table(client: Any, name: str, key: str, *, wait_s: float = 120.0) -> bool:
    """Create a state table (``key`` S as its hash key, on demand) unless it exists; wait for ACTIVE.

    Both own tables are made so (CoordinatorStateDAO.getRequest, WorkerMetricStats.getKeySchema).
    Returns True when this call created it."""
    return create_table(client, name, "table", wait_s, KeySchema=[{"AttributeName": key, "KeyType": "HASH"}],
                        AttributeDefinitions=[{"AttributeName": key, "AttributeType": "S"}],
                        BillingMode="PAY_PER_REQUEST")


def update_expected(client: Any, table: str, key: tuple[str, str], expected: tuple[str, str],
                    attributes: dict[str, Any]) -> None:
    """SET ``attributes`` on a state row only while its ``expected`` attribute still holds the
    value read (Java's ``Expected`` on ``cv`` / ``tm``); a lost race raises the conditional failure."""
    names = {f"#a{i}": name for i, name in enumerate(attributes)}
    client.update_item(
        TableName=table, Key={key[0]: {"S": key[1]}},
        UpdateExpression="SET " + ", ".join(f"#a{i} = :a{i}" for i in range(len(attributes))),
        ConditionExpression="#k = :key AND #e = :old",
        ExpressionAttributeNames={"#k": key[0], "#e": expected[0], **names},
        ExpressionAttributeValues={":key": {"S": key[1]}, ":old": {"S": expected[1]},
                                   **{f":a{i}": v for i, v in enumerate(attributes.values())}})


class CoordinatorStateStore:
    """The coordinator-state rows of one application, wherever ``tables`` puts them."""

    def __init__(self, client: Any, tables: StateTables, worker_id: str,
                 clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
                 reads: tuple[StateTables, ...] = ()):
        self.client = client
        self.tables = tables
        self.reads = reads or (tables,)  # in order, the first that has the row (3.5 before COMPLETE: own, lease)
        self.worker_id = worker_id
        self.clock_ms = clock_ms

    @property
    def table(self) -> str:
        return self.tables.coordinator_table

    def ensure_table(self) -> bool:
        """Create the own coordinator-state table as a Java worker does at start (no-op in the lease table)."""
        return False if self.tables.shared else ensure_table(self.client, self.table, self.tables.coordinator_key)

    def get(self, key: str) -> dict[str, Any] | None:
        for tables in self.reads:
            # a table read besides the own one may not exist (Java's disabled delegate)
            missing: Mapping[str, dict[str, Any]] = {NOT_FOUND: {}} if tables != self.tables else {}
            answer = call(f"reading {key} in {tables.coordinator_table}", partial(
                self.client.get_item, TableName=tables.coordinator_table, Key={tables.coordinator_key: {"S": key}},
                ConsistentRead=True), missing)
            if answer.get("Item"):
                return answer["Item"]
        return None

    def client_version(self) -> CoordinatorState | None:
        """The ``Migration3.0`` state, or None when no worker has written it yet."""
        try:
            return self._client_version()
        except RowError as exc:  # the row's fault, named; not the whole item (it may hold 400 KB)
            raise DependencyError(f"{MIGRATION_KEY} in {self.table} is not a MigrationState: {exc}",
                                  retriable=False) from exc

    def _client_version(self) -> CoordinatorState | None:
        item = self.get(MIGRATION_KEY)
        if not item:
            return None
        state = state_view(item, "cv")
        try:
            client_version.parse(state.value)
        except ValueError as exc:  # a cv no Java worker writes
            raise RowError(str(exc)) from exc
        return state

    def initialise_client_version(self, config: str) -> CoordinatorState | None:
        """Read ``Migration3.0`` and settle it as a starting Java worker with ``config`` would
        (``client_version.initial``); None only for the phase-1 config, which writes nothing.

        A ``Migration3.0`` nobody can read (a value Java would not write) is left as it is: this
        worker starts in the version ``config`` alone gives, and follows the row once it can be
        read again (a Java worker retries its start instead; a fleet must not stop for a row)."""
        for _ in range(_INIT_RETRIES):
            try:
                state = self._client_version()
            except RowError as exc:
                start = client_version.initial(None, config, self.worker_id, self.clock_ms())
                log.warning("worker %s: %s in %s is not a MigrationState (%s): left alone; starting as %s from "
                            "clientVersionConfig %s", self.worker_id, MIGRATION_KEY, self.table, exc,
                            start.version.value, config)
                return None if start.write is None else start.write.state
            start = client_version.initial(state, config, self.worker_id, self.clock_ms())
            if start.write is None:
                return state
            if self.write_client_version(start.write.state, start.write.expected_cv):
                return start.write.state
            time.sleep(0.1)  # lost a race with another worker: read again
        raise DependencyError(f"could not settle {MIGRATION_KEY} in {self.table} after {_INIT_RETRIES} tries")

    def set_client_version(self, state: CoordinatorState, version: str) -> CoordinatorState | None:
        """Move the fleet from ``state`` (as read) to ``version``, as Java's leader writes a
        flip or a rollback; None if another worker changed it first."""
        moved = client_version.set_version(state, client_version.parse(version), self.worker_id, self.clock_ms())
        return moved if self.write_client_version(moved, state.value) else None

    def write_client_version(self, state: CoordinatorState, expected: str | None) -> bool:
        """Store ``state`` as the ``Migration3.0`` item: created when ``expected`` is None,
        else updated only if ``cv`` still says ``expected``; False when the race was lost."""
        key = self.tables.coordinator_key
        attributes = state.attributes("cv")  # Java writes h only when it has entries

        def write() -> bool:
            if expected is None:  # 3.5 serializes entityType on create only (MigrationState.getDynamoUpdate has none)
                kind = {ENTITY_TYPE: {"S": CLIENT_VERSION_MIGRATION}} if self.tables.java35 else {}
                self.client.put_item(TableName=self.table, Item={key: {"S": MIGRATION_KEY}, **kind, **attributes},
                                     ConditionExpression="attribute_not_exists(#k)",
                                     ExpressionAttributeNames={"#k": key})
            else:
                update_expected(self.client, self.table, (key, MIGRATION_KEY), ("cv", expected), attributes)
            return True

        return call(f"writing {MIGRATION_KEY} ({state.value}) in {self.table}", write, {CONDITION_FAILED: False})

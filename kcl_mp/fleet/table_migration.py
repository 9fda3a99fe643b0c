"""KCL 3.5's table migration (``TableMigration3.5``): where the state lives and what the leader does. Pure.

A KCL 3.1-3.4 fleet keeps its coordinator state and worker metrics in two own tables; 3.5
moves them into the lease table in two deployments (docs/kcl3-facts.md section 7 has the
Java sources). The stored status (``tm``, read from the own CoordinatorState table only)
and this worker's ``migrateAllEntitiesToLeaseTable`` give its local status::

    stored      config false   config true       writes go to   reads
    (none)      INIT           refused (phase 2  own tables     own table first, then
                               before phase 1)                  the lease table
    INIT        INIT           refused           own tables     both
    DEPLOYED    DEPLOYED       PENDING           own / lease    both
    PENDING     DEPLOYED       PENDING           own / lease    both
    COMPLETE    COMPLETE       COMPLETE          lease table    lease table only

No own CoordinatorState table at all: COMPLETE (Java 3.5 lands a new fleet in the single
table and writes no status). kcl-mp makes one exception, so that it stays joinable by the
3.1-3.4 workers that create the own tables: when neither the own table nor any 3.5 state
in the lease table exists and the config is false, it creates the own tables as 3.1-3.4 do
(``InitialStatus.create_own``).

The leader moves the fleet along (``leader_step``, Java's handleLeaderLockResult), from
what its latest assignment round saw (``Summary``)::

    local     stored    condition                                   step
    INIT      any       a lease owner lacks support code 1          delete a stored state
    INIT      (none)    every unexpired lease owner supports it     create INIT
    INIT      INIT      ... for DEPLOYED_BAKE_S since it was set    DEPLOYED (expects INIT)
    DEPLOYED  PENDING   (a phase-1 worker leads: rollback)          DEPLOYED (expects PENDING)
    PENDING   (none)    (deleted by hand)                           create DEPLOYED
    PENDING   DEPLOYED  no live metrics item in the own table and   move the own table's rows
                        every lease owner reporting                 to the lease table, then
                                                                    PENDING (expects DEPLOYED)
    PENDING   PENDING   live metrics or rows in the own table       DEPLOYED (rollback)
    PENDING   PENDING   none, complete_bake_s since PENDING         COMPLETE in both tables,
                                                                    then release the lock
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass

from kcl_mp.leases.rows import CoordinatorState

INIT = "TABLE_MIGRATION_STATUS_INIT"
DEPLOYED = "TABLE_MIGRATION_STATUS_DEPLOYED"
PENDING = "TABLE_MIGRATION_STATUS_PENDING"
COMPLETE = "TABLE_MIGRATION_STATUS_COMPLETE"
STATUSES = (INIT, DEPLOYED, PENDING, COMPLETE)
DEPLOYED_BAKE_S = 3600  # TableMigrationState.DEFAULT_BAKE_TIME_SECONDS (INIT -> DEPLOYED, no key)
COMPLETE_BAKE_MIN_S, COMPLETE_BAKE_MAX_S = 3600, 7 * 86400  # tableMigrationCompleteBakeTimeSeconds clamp
SUPPORT_CODE = 1  # WorkerMetricStats.Features.SINGLE_TABLE_MIGRATION
NOT_MOVED = ("Leader", "TableMigration3.5")  # the own table's rows the move leaves


class PhaseError(ValueError):
    """``migrateAllEntitiesToLeaseTable = true`` before phase 1 reached DEPLOYED (Java refuses to start)."""


@dataclass(frozen=True)
class InitialStatus:
    status: str  # the local status
    create_own: bool = False  # create the own tables (kcl-mp's 3.1-3.4 compatible start, module docstring)


def start(own_table_exists: bool, stored: str | None, migrate_all: bool, lease_table_has_state: bool) -> InitialStatus:
    """This worker's local status at start (TableMigrationStateMachineImpl.determineStatusForInitialization).

    >>> start(True, "TABLE_MIGRATION_STATUS_DEPLOYED", True, False).status
    'TABLE_MIGRATION_STATUS_PENDING'
    >>> start(False, None, False, False)
    InitialStatus(status='TABLE_MIGRATION_STATUS_INIT', create_own=True)
    """
    if stored == COMPLETE:
        return InitialStatus(COMPLETE)
    if not own_table_exists:
        if migrate_all or lease_table_has_state:
            return InitialStatus(COMPLETE)
        return InitialStatus(INIT, create_own=True)
    if stored is None:
        if migrate_all:
            raise PhaseError("migrateAllEntitiesToLeaseTable = true, but no TableMigration3.5 state exists: "
                             "deploy phase 1 (the key false) first, until the state is DEPLOYED")
        return InitialStatus(INIT)
    return InitialStatus(with_config(stored, migrate_all))


def with_config(stored: str, migrate_all: bool) -> str:
    """The stored status as this worker's config reads it (applyConfigOverride)."""
    if stored == INIT and migrate_all:
        raise PhaseError("migrateAllEntitiesToLeaseTable = true while TableMigration3.5 is still INIT: "
                         "phase 1 must reach DEPLOYED first")
    if stored == DEPLOYED and migrate_all:
        return PENDING
    if stored == PENDING and not migrate_all:
        return DEPLOYED
    return stored


def refreshed(local: str, stored: str | None, migrate_all: bool) -> str:
    """The local status after a periodic read of the stored one (COMPLETE is final; an
    invalid combination keeps the stored value, as Java's applyConfigOverrideSafe)."""
    if local == COMPLETE or stored is None:
        return local
    try:
        return with_config(stored, migrate_all)
    except PhaseError:
        return stored


def writes_to_lease_table(local_at_start: str) -> bool:
    """Where this worker writes its state and metrics, fixed at start (the DAOs' cachedStatus)."""
    return local_at_start in (PENDING, COMPLETE)


def complete_bake_s(configured_s: int) -> int:
    """tableMigrationCompleteBakeTimeSeconds as Java uses it (clamped to 1 hour .. 1 week)."""
    return max(COMPLETE_BAKE_MIN_S, min(COMPLETE_BAKE_MAX_S, configured_s))


@dataclass(frozen=True)
class Summary:
    """What the leader's round saw (Java's TableMigrationSummary, the parts the steps use)."""

    lease_owners: Set[str]  # every lease owner
    unexpired_owners: Set[str]  # owners of leases not expired
    live_in_own: Set[str]  # workers with a live metrics item in the own table
    live_in_lease: Set[str]  # ... in the lease table
    supporting: Set[str]  # workers whose newest item has sup >= 1 and a fresh slu

    @property
    def min_support_met(self) -> bool:
        """Every unexpired lease owner supports the single table (no owners: not met)."""
        return bool(self.unexpired_owners) and self.unexpired_owners <= self.supporting

    @property
    def own_metrics_empty(self) -> bool:
        """Nobody writes metrics to the own table, and the lease owners all report
        (Java compares the count of all owners reporting with the count of unexpired owners)."""
        reporting = len(self.lease_owners & (self.live_in_own | self.live_in_lease))
        return reporting == len(self.unexpired_owners) and not self.live_in_own


@dataclass(frozen=True)
class Step:
    """One leader action: ``write`` a status (``expected`` the stored one, None: create),
    ``delete`` the stored state, ``move`` the own table's rows first, or ``complete``."""

    kind: str  # "none", "write", "delete", "move", "complete"
    status: str | None = None
    expected: str | None = None
    why: str = ""


    def words(self) -> str:
        """The step as the leader's log line says it.

        >>> Step("write", "TABLE_MIGRATION_STATUS_DEPLOYED", "TABLE_MIGRATION_STATUS_INIT", "INIT baked 60 s").words()
        'table migration: status TABLE_MIGRATION_STATUS_DEPLOYED (INIT baked 60 s)'
        """
        what = {"delete": "held back, its stored status deleted, as Java's leader does",
                "move": f"moving the coordinator-state rows into the lease table, then status {self.status}",
                "complete": "COMPLETE: the fleet uses the lease table alone"}.get(self.kind, f"status {self.status}")
        return f"table migration: {what} ({self.why})"


NONE = Step("none")


def leader_step(local: str, stored: CoordinatorState | None, summary: Summary, own_rows: Set[str], now_ms: int,
                complete_bake: int) -> Step:
    """The leader's action this round (module docstring's table); ``own_rows`` are the keys
    of the own CoordinatorState table's rows other than NOT_MOVED."""
    value = stored.value if stored is not None else None
    if local == INIT:
        if not summary.min_support_met:
            if value is None:
                return NONE
            lacking = ", ".join(sorted(summary.unexpired_owners - summary.supporting)) or "nobody holds a lease yet"
            return Step("delete", why=f"not every worker holding leases supports it yet ({lacking}: no support code "
                                      "1 in a fresh worker-metrics item, as Java 3.5 writes)")
        if value is None:
            return Step("write", INIT, None, "every lease owner supports the single table")
        if value == INIT and stored is not None and now_ms // 1000 - stored.modified_at_ms // 1000 >= DEPLOYED_BAKE_S:
            return Step("write", DEPLOYED, INIT, f"INIT baked {DEPLOYED_BAKE_S} s")
        return NONE
    if local == DEPLOYED:
        if value == PENDING:
            return Step("write", DEPLOYED, PENDING, "a phase-1 worker leads while PENDING (rollback)")
        return NONE
    if local != PENDING:
        return NONE
    if value is None:
        return Step("write", DEPLOYED, None, "no stored state (deleted?)")
    if value == DEPLOYED:
        if not summary.own_metrics_empty:
            return NONE
        return Step("move", PENDING, DEPLOYED, "every worker writes to the lease table")
    if value == PENDING:
        if not summary.own_metrics_empty or own_rows:
            return Step("write", DEPLOYED, PENDING, "the own tables are written again (rollback)")
        assert stored is not None
        if now_ms // 1000 - stored.modified_at_ms // 1000 >= complete_bake:
            return Step("complete", COMPLETE, PENDING, f"PENDING baked {complete_bake} s")
    return NONE


def set_status(stored: CoordinatorState | None, status: str, by: str, now_ms: int) -> CoordinatorState:
    """The state after a write (TableMigrationState.update, ``CoordinatorState.moved_to``; a new
    one starts as INIT by ``by`` at ``now_ms``, which goes to its history, as Java's constructor
    then update do).

    >>> set_status(None, "TABLE_MIGRATION_STATUS_INIT", "w1", 5).history
    (StateChange(value='TABLE_MIGRATION_STATUS_INIT', modified_by='w1', modified_at_ms=5),)
    """
    if stored is None:
        stored = CoordinatorState(INIT, by, now_ms, ())
    return stored.moved_to(status, by, now_ms)

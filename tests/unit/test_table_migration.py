"""KCL 3.5's table migration rules (fleet/table_migration.py) as decision tables, from
TableMigrationStateMachineImpl (docs/kcl3-facts.md section 7)."""

from __future__ import annotations

import pytest

from kcl_mp.fleet import table_migration as tm
from kcl_mp.leases.rows import MAX_HISTORY, CoordinatorState, StateChange

IN, D, P, C = tm.INIT, tm.DEPLOYED, tm.PENDING, tm.COMPLETE


@pytest.mark.parametrize("own, stored, migrate_all, lease_state, expected", [
    (True, None, False, False, tm.InitialStatus(IN)),
    (True, IN, False, False, tm.InitialStatus(IN)),
    (True, D, False, False, tm.InitialStatus(D)),
    (True, P, False, False, tm.InitialStatus(D)),
    (True, D, True, False, tm.InitialStatus(P)),
    (True, P, True, False, tm.InitialStatus(P)),
    (True, C, False, False, tm.InitialStatus(C)),
    (True, C, True, False, tm.InitialStatus(C)),
    (False, C, False, False, tm.InitialStatus(C)),  # the own table deleted after COMPLETE
    (False, None, True, False, tm.InitialStatus(C)),  # a new fleet told to use the single table
    (False, None, False, True, tm.InitialStatus(C)),  # a new 3.5 fleet's state already in the lease table
    (False, None, False, False, tm.InitialStatus(IN, create_own=True)),  # kcl-mp stays joinable by 3.1-3.4
])
def test_start(own, stored, migrate_all, lease_state, expected):
    assert tm.start(own, stored, migrate_all, lease_state) == expected


@pytest.mark.parametrize("stored", [None, IN])
def test_phase_two_before_phase_one_is_refused(stored):
    with pytest.raises(tm.PhaseError, match="migrateAllEntitiesToLeaseTable"):
        tm.start(True, stored, True, False)


@pytest.mark.parametrize("local, stored, migrate_all, expected", [
    (IN, None, False, IN), (IN, D, False, D), (D, P, False, D), (P, D, True, P), (P, P, True, P),
    (P, C, True, C), (D, C, False, C), (C, None, False, C), (C, D, True, C),
    (IN, IN, True, IN),  # invalid on a refresh: the stored value, as applyConfigOverrideSafe
])
def test_refreshed(local, stored, migrate_all, expected):
    assert tm.refreshed(local, stored, migrate_all) == expected


def test_write_target_is_fixed_at_start_and_bake_is_clamped():
    assert [tm.writes_to_lease_table(s) for s in (IN, D, P, C)] == [False, False, True, True]
    assert [tm.complete_bake_s(s) for s in (0, 7200, 10**7)] == [3600, 7200, 604800]


NOW = 10_000_000_000  # ms
HOUR = 3600 * 1000


def state(value, age_ms=0):
    return CoordinatorState(value, "w1", NOW - age_ms, ())


def summary(owners=("a", "b"), unexpired=("a", "b"), own=(), lease=("a", "b"), supporting=("a", "b")):
    return tm.Summary(set(owners), set(unexpired), set(own), set(lease), set(supporting))


@pytest.mark.parametrize("local, stored, seen, own_rows, expected", [
    # phase 1: INIT once every unexpired owner supports it, DEPLOYED after an hour of it
    (IN, None, summary(supporting=("a",)), (), tm.NONE),
    (IN, state(IN), summary(supporting=("a",)), (), tm.Step("delete", why="not every worker holding leases supports it yet (b: no support code 1 "
                                                      "in a fresh worker-metrics item, as Java 3.5 writes)")),
    (IN, None, summary(unexpired=()), (), tm.NONE),
    (IN, None, summary(), (), tm.Step("write", IN, None, "every lease owner supports the single table")),
    (IN, state(IN, HOUR - 1000), summary(), (), tm.NONE),
    (IN, state(IN, HOUR), summary(), (), tm.Step("write", D, IN, "INIT baked 3600 s")),
    (D, state(D), summary(), (), tm.NONE),
    (D, state(P), summary(), (), tm.Step("write", D, P, "a phase-1 worker leads while PENDING (rollback)")),
    # phase 2: move once nobody writes to the own tables, COMPLETE after the bake
    (P, None, summary(), (), tm.Step("write", D, None, "no stored state (deleted?)")),
    (P, state(D), summary(own=("a",)), (), tm.NONE),
    (P, state(D), summary(lease=("a",)), (), tm.NONE),  # b owns leases but reports nowhere
    (P, state(D), summary(), ("Migration3.0",), tm.Step("move", P, D, "every worker writes to the lease table")),
    (P, state(P), summary(own=("b",)), (), tm.Step("write", D, P, "the own tables are written again (rollback)")),
    (P, state(P), summary(), ("Migration3.0",),
     tm.Step("write", D, P, "the own tables are written again (rollback)")),
    (P, state(P, 2 * HOUR - 1000), summary(), (), tm.NONE),
    (P, state(P, 2 * HOUR), summary(), (), tm.Step("complete", C, P, "PENDING baked 7200 s")),
    (C, state(C), summary(), (), tm.NONE),
])
def test_leader_step(local, stored, seen, own_rows, expected):
    assert tm.leader_step(local, stored, seen, set(own_rows), NOW, 7200) == expected


def test_set_status_pushes_history_and_keeps_ten():
    first = tm.set_status(None, IN, "w1", 5)
    assert first == CoordinatorState(IN, "w1", 5, (StateChange(IN, "w1", 5),))
    chain = first
    for n in range(12):
        chain = tm.set_status(chain, D if n % 2 else P, "w2", 10 + n)
    assert len(chain.history) == MAX_HISTORY == 10 and chain.history[0] == StateChange(P, "w2", 20)

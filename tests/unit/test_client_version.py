"""The fleet's client version: Java's start-up table (MigrationClientVersionStateInitializer),
the changes its monitors follow, and the items written, checked against the Java 3.1.3 run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kcl_mp.fleet.client_version import (
    CONFIG_3X,
    CONFIG_COMPATIBLE_WITH_2X,
    CONFIG_COMPATIBLE_WITH_2X_PHASE1,
    flip,
    follow,
    initial,
    ready_to_flip,
    role,
    set_version,
)
from kcl_mp.fleet.client_version import ClientVersion as V
from kcl_mp.leases.rows import CoordinatorState, StateChange, read_items

REFERENCE = Path("/work/shared/reference/java_kcl_3.1.3_tables.json")
P1, C2, C3 = CONFIG_COMPATIBLE_WITH_2X_PHASE1, CONFIG_COMPATIBLE_WITH_2X, CONFIG_3X


def _state(cv: str) -> CoordinatorState:
    return CoordinatorState(cv, "java-1", 1000, (StateChange("CLIENT_VERSION_INIT", "java-1", 999),))


# (comment, stored cv or None, config, expected version, expected write: None, "create" or the expected cv)
START = [
    ("new app, default config: create 3X", None, C3, V.V3X, "create"),
    ("new app, 2.x-compatible: create UPGRADE_FROM_2X", None, C2, V.UPGRADE_FROM_2X, "create"),
    ("new app, phase 1: INIT, nothing written", None, P1, V.INIT, None),
    ("flipped fleet, worker redeployed with 3X config: the upgrade becomes final", "CLIENT_VERSION_3X_WITH_ROLLBACK",
     C3, V.V3X, "CLIENT_VERSION_3X_WITH_ROLLBACK"),
    ("flipped fleet, 2.x-compatible config: stays with rollback", "CLIENT_VERSION_3X_WITH_ROLLBACK", C2,
     V.V3X_WITH_ROLLBACK, None),
    ("flipped fleet, phase 1 config: stays with rollback", "CLIENT_VERSION_3X_WITH_ROLLBACK", P1,
     V.V3X_WITH_ROLLBACK, None),
    ("rolled back fleet: 2X whatever the config", "CLIENT_VERSION_2X", C3, V.V2X, None),
    ("upgrading fleet: UPGRADE_FROM_2X whatever the config", "CLIENT_VERSION_UPGRADE_FROM_2X", C3,
     V.UPGRADE_FROM_2X, None),
    ("3.x fleet: 3X even with a 2.x-compatible config", "CLIENT_VERSION_3X", C2, V.V3X, None),
    ("an INIT item (left by hand): set from the config, conditioned on INIT", "CLIENT_VERSION_INIT", C2,
     V.UPGRADE_FROM_2X, "CLIENT_VERSION_INIT"),
]


@pytest.mark.parametrize("comment,stored,config,version,write", START, ids=[c[0] for c in START])
def test_start(comment, stored, config, version, write) -> None:
    start = initial(None if stored is None else _state(stored), config, "kcl-1", 5000)
    assert start.version is version, start.reason
    if write is None:
        assert start.write is None
        return
    assert start.write is not None
    assert start.write.expected_cv == (None if write == "create" else write)
    assert start.write.state.value == version.value
    assert (start.write.state.modified_by, start.write.state.modified_at_ms) == ("kcl-1", 5000)
    assert start.write.state.history[0] == (StateChange("CLIENT_VERSION_INIT", "kcl-1", 5000) if stored is None
                                            else StateChange(stored, "java-1", 1000))


# (comment, current, stored cv or None, expected version)
FOLLOW = [
    ("upgrading: the 2.x leader's flip is followed", V.UPGRADE_FROM_2X, "CLIENT_VERSION_3X_WITH_ROLLBACK",
     V.V3X_WITH_ROLLBACK),
    ("upgrading: a rollback by the migration tool", V.UPGRADE_FROM_2X, "CLIENT_VERSION_2X", V.V2X),
    ("upgrading: a jump to 3X is not a change Java follows", V.UPGRADE_FROM_2X, "CLIENT_VERSION_3X",
     V.UPGRADE_FROM_2X),
    ("flipped: rollback", V.V3X_WITH_ROLLBACK, "CLIENT_VERSION_2X", V.V2X),
    ("flipped: made final by a redeployed 3X worker", V.V3X_WITH_ROLLBACK, "CLIENT_VERSION_3X", V.V3X),
    ("flipped: back to UPGRADE_FROM_2X is ignored", V.V3X_WITH_ROLLBACK, "CLIENT_VERSION_UPGRADE_FROM_2X",
     V.V3X_WITH_ROLLBACK),
    ("rolled back: roll-forward", V.V2X, "CLIENT_VERSION_UPGRADE_FROM_2X", V.UPGRADE_FROM_2X),
    ("rolled back: straight to 3.x is ignored", V.V2X, "CLIENT_VERSION_3X_WITH_ROLLBACK", V.V2X),
    ("3X is final: no monitor", V.V3X, "CLIENT_VERSION_2X", V.V3X),
    ("phase 1 (INIT): no monitor", V.INIT, "CLIENT_VERSION_3X_WITH_ROLLBACK", V.INIT),
    ("item deleted: stay", V.V3X_WITH_ROLLBACK, None, V.V3X_WITH_ROLLBACK),
    ("garbage cv: stay", V.UPGRADE_FROM_2X, "CLIENT_VERSION_4X", V.UPGRADE_FROM_2X),
]


@pytest.mark.parametrize("comment,current,stored,version", FOLLOW, ids=[c[0] for c in FOLLOW])
def test_follow(comment, current, stored, version) -> None:
    move = follow(current, None if stored is None else _state(stored))
    assert move.version is version, move.reason
    assert move.changed == (version is not current)


def test_roles() -> None:
    assert [(r.takes, r.lock_leader, r.publishes_metrics, r.owner_index) for r in map(role, V)] == [
        (True, False, False, "none"),  # INIT
        (True, False, True, "create"),  # UPGRADE_FROM_2X
        (True, False, False, "none"),  # 2X
        (False, True, True, "use"),  # 3X_WITH_ROLLBACK: the index was created while upgrading
        (False, True, True, "wait"),  # 3X
    ]


def test_flip_when_every_owner_reports() -> None:
    assert ready_to_flip(True, {"a", "b"}, {"a", "b", "c"})
    assert not ready_to_flip(True, {"a", "kcl-mp"}, {"a"})
    assert not ready_to_flip(False, {"a"}, {"a"})
    write = flip(_state("CLIENT_VERSION_UPGRADE_FROM_2X"), "java-2", 7000)
    assert write.expected_cv == "CLIENT_VERSION_UPGRADE_FROM_2X"
    assert write.state.value == "CLIENT_VERSION_3X_WITH_ROLLBACK"
    assert [c.value for c in write.state.history] == ["CLIENT_VERSION_UPGRADE_FROM_2X", "CLIENT_VERSION_INIT"]


def test_history_keeps_ten() -> None:
    state = None
    for i in range(15):
        state = set_version(state, V.V2X if i % 2 else V.UPGRADE_FROM_2X, "w", i)
    assert len(state.history) == 10 and state.history[0].modified_at_ms == 13


def test_the_item_java_313_created_is_the_one_we_would_create() -> None:
    """Java 3.1.3, default config, new application: the Migration3.0 item it wrote."""
    tables = json.loads(REFERENCE.read_text())["while_running"]
    item = next(i for i in tables["kclbench-0-CoordinatorState"]["items"] if i["key"]["S"] == "Migration3.0")
    java = read_items([{"leaseKey": item["key"], "entityType": {"S": "CLIENT_VERSION_MIGRATION"}, **item}]).others[0].view
    start = initial(None, C3, java.modified_by, java.history[0].modified_at_ms)
    ours = start.write.state.attributes("cv")
    theirs = {k: v for k, v in item.items() if k != "key"}
    ours["mts"], theirs["mts"] = None, None  # Java took the clock twice (INIT at t, 3X at t + 2 ms)
    assert ours == theirs
    assert follow(V.V3X, java).version is V.V3X

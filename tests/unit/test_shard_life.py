"""A running shard's life as the supervisor sees it (kcl_mp.supervisor.shard_life): its transition table,
transition by transition (tests/decisions/shard_life_cases.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kcl_mp.supervisor.shard_life import CHECKPOINTED, TOLD_LOST, TRANSITIONS, Event, ShardState, next_state

CASES = json.loads((Path(__file__).parents[1] / "decisions" / "shard_life_cases.json").read_text())["cases"]


@pytest.mark.parametrize("case", CASES, ids=[c["comment"] for c in CASES])
def test_transition(case: dict) -> None:
    assert next_state(ShardState(case["state"]), Event(case["event"])) is ShardState(case["next"])


def test_the_table_covers_every_state_and_event() -> None:
    assert {(c["state"], c["event"]) for c in CASES} == {(s.value, e.value) for s in ShardState for e in Event}
    assert set(TRANSITIONS) == set(ShardState)


def test_once_told_lost_or_checkpointed_a_shard_stays_so() -> None:
    """leaseLost cannot be taken back, nor a last checkpoint unmade: what the loop's checks rely on."""
    for state in ShardState:
        for event in Event:
            after = next_state(state, event)
            assert state not in TOLD_LOST or after in TOLD_LOST, (state, event)
            assert state not in CHECKPOINTED or after in CHECKPOINTED, (state, event)

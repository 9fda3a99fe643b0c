"""Streams that change at run time (kcl_mp.leases.stream_changes): the decision table
(tests/decisions/stream_changes_cases.json), one test per case, and the rules every plan keeps."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from kcl_mp.config.settings import FormerStreamsSettings
from kcl_mp.leases.stream_changes import plan_streams

CASES = json.loads((Path(__file__).parents[1] / "decisions" / "stream_changes_cases.json").read_text())["cases"]
STRATEGIES = ("NO_STREAMS_LEASES_DELETION", "FORMER_STREAMS_AUTO_DETECTION_DEFERRED_DELETION",
              "PROVIDED_STREAMS_DEFERRED_DELETION")


@pytest.mark.parametrize("case", CASES, ids=[c["comment"] for c in CASES])
def test_plan(case: dict) -> None:
    former = FormerStreamsSettings(case["strategy"], case["wait_ms"], tuple(case.get("provided", ())))
    plan = plan_streams(case["previous"], case["listed"], set(case["in_table"]), case["pending"], former,
                        case["now_ms"], case["may_delete"])
    got = {"start": list(plan.start), "drain": list(plan.drain), "revived": list(plan.revived),
           "scheduled": list(plan.scheduled), "delete": list(plan.delete), "pending": dict(plan.pending)}
    assert got == case["plan"]


def test_the_table_covers_every_strategy() -> None:
    assert {case["strategy"] for case in CASES} == set(STRATEGIES)


@pytest.mark.parametrize("seed", range(200))
def test_no_listed_stream_is_drained_or_deleted_and_no_unlisted_one_started(seed: int) -> None:
    """Over random lists, tables and clocks: a listed stream is never drained, pending or deleted; a
    stream is started only if listed; only a host that may delete deletes, and only after the wait."""
    rng = random.Random(seed)
    names = "abcdefg"
    previous = rng.sample(names, rng.randint(0, 4))
    listed = rng.sample(names, rng.randint(1, 4))
    in_table = set(rng.sample(names, rng.randint(0, 6)))
    pending = {name: rng.randint(0, 10_000) for name in rng.sample(names, rng.randint(0, 3))}
    former = FormerStreamsSettings(rng.choice(STRATEGIES), rng.randint(0, 5000), tuple(rng.sample(names, 3)))
    now, may_delete = rng.randint(0, 10_000), rng.random() < 0.5
    plan = plan_streams(previous, listed, in_table, pending, former, now, may_delete)
    assert set(plan.start) <= set(listed) and not set(plan.drain) & set(listed), plan
    assert not (set(plan.pending) | set(plan.delete)) & set(listed), plan
    assert set(plan.delete) <= set(plan.pending) and all(plan.pending[name] <= now for name in plan.delete)
    assert may_delete or not plan.delete
    assert all(at == now + former.wait_ms for name, at in plan.pending.items() if name in plan.scheduled)

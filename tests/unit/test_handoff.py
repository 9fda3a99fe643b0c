"""The incoming side of a handoff (kcl_mp.leases.handoff): its decision table."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kcl_mp.leases.handoff import Verdict, judge_incoming
from kcl_mp.leases.lease import Lease
from kcl_mp.sequence import SHARD_END, ExtendedSequenceNumber

CASES = json.loads((Path(__file__).parents[1] / "decisions" / "handoff_cases.json").read_text())["cases"]
LEASE = re.compile(r"(?P<owner>\w+)(?:/(?P<from>\w+))?#(?P<counter>\d+)@(?P<checkpoint>\w+)")


def lease(text: str | None) -> Lease | None:
    if text is None:
        return None
    m = LEASE.fullmatch(text)
    assert m, text
    return Lease("shardId-000000000000", m["owner"], int(m["counter"]),
                 ExtendedSequenceNumber(SHARD_END if m["checkpoint"] == "SHARD_END" else m["checkpoint"]),
                 checkpoint_owner=m["from"])


@pytest.mark.parametrize("case", CASES, ids=[c["comment"] for c in CASES])
def test_judge_incoming(case):
    last = lease(case["last"])
    assert last is not None
    judged = judge_incoming("b", lease(case["current"]), last, lease(case.get("asked")), case.get("asked_at", 0),
                            case.get("changed_at", 0), case.get("seen_checkpointing", True), case.get("now", 0),
                            10.0, 30.0)
    assert judged.verdict is Verdict(case["expect"])
    assert judged.why == case.get("why", "")
    if "changed_at_after" in case:
        assert judged.changed_at == case["changed_at_after"]

"""Shard sync: decision tables (tests/decisions/shard_sync_cases.json) for lease creation, children at shard
end, cleanup and the wait for parents; the audit that spares needless ListShards calls."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kcl_mp.config import InitialPosition
from kcl_mp.leases.lease import Lease
from kcl_mp.leases.shard_sync import (
    MAX_HASH_KEY,
    Shard,
    audit,
    plan_child_leases,
    plan_cleanup,
    plan_initial_leases,
    plan_new_leases,
    unfinished_parents,
)
from kcl_mp.sequence import ExtendedSequenceNumber

CASES = json.loads((Path(__file__).parents[1] / "decisions" / "shard_sync_cases.json").read_text())
_LEASE = re.compile(r"^(\d+)(?:<([\d,]+))?(?:@(\w+))?(?:>([\d,]+))?$")
_SHARD = re.compile(r"^(\d+)(?:<([\d,]+))?( x)?$")


def sid(short: str) -> str:
    return f"shardId-{int(short):012d}"


def ids(text: str | None) -> tuple[str, ...]:
    return tuple(sorted(sid(i) for i in text.split(","))) if text else ()


def short(shard_id: str) -> str:
    return str(int(shard_id.rsplit("-", 1)[1]))


def shard(text: str) -> Shard:
    m = _SHARD.match(text)
    assert m, text
    n = int(m.group(1))
    return Shard(sid(m.group(1)), ids(m.group(2)), (n * 100, n * 100 + 99), "1", "9" if m.group(3) else None)


def lease(text: str) -> Lease:
    m = _LEASE.match(text)
    assert m, text
    return Lease(sid(m.group(1)), checkpoint=ExtendedSequenceNumber(m.group(3) or "TRIM_HORIZON"),
                 parent_shard_ids=ids(m.group(2)), child_shard_ids=ids(m.group(4)))


def leases(texts: list[str]) -> dict[str, Lease]:
    return {x.key: x for x in map(lease, texts)}


def notation(x: Lease) -> str:
    parents = f"<{','.join(short(p) for p in x.parent_shard_ids)}" if x.parent_shard_ids else ""
    return f"{short(x.key)}{parents}@{x.checkpoint.sequence_number}"


def by_id(texts: list[str]) -> list[str]:
    return sorted(texts, key=lambda t: int(re.match(r"\d+", t).group()))


@pytest.mark.parametrize("case", CASES["sync"], ids=[c["comment"][:80] for c in CASES["sync"]])
def test_sync(case):
    shards = [shard(s) for s in CASES["streams"][case["stream"]]]
    plan = plan_new_leases(shards, leases(case["leases"]), InitialPosition(case["initial"], 200.0))
    assert by_id([notation(x) for x in plan.create]) == by_id(case["create"])
    assert [short(s) for s in plan.inconsistent] == case.get("inconsistent", [])
    for created in plan.create:  # hash ranges come from the listing
        n = int(short(created.key))
        assert created.hash_range == (n * 100, n * 100 + 99)


@pytest.mark.parametrize("case", CASES["initial"], ids=[c["comment"][:80] for c in CASES["initial"]])
def test_initial(case):
    plan = plan_initial_leases([shard(s) for s in case["listed"]], InitialPosition(case["initial"], 200.0))
    assert by_id([notation(x) for x in plan.create]) == by_id(case["create"])


@pytest.mark.parametrize("case", CASES["children"], ids=[c["comment"][:80] for c in CASES["children"]])
def test_children_at_shard_end(case):
    plan = plan_child_leases([shard(s) for s in case["children"]], leases(case["leases"]), ended=sid(case["ended"]))
    assert by_id([notation(x) for x in plan]) == by_id(case["create"])


@pytest.mark.parametrize("case", CASES["cleanup"], ids=[c["comment"][:80] for c in CASES["cleanup"]])
def test_cleanup(case):
    listed = [shard(s) for s in case["listed"]] if "listed" in case else None
    assert [short(k) for k in plan_cleanup(leases(case["leases"]), listed)] == case["delete"]


@pytest.mark.parametrize("case", CASES["waiting"], ids=[c["comment"][:80] for c in CASES["waiting"]])
def test_waiting_for_parents(case):
    assert [short(p) for p in unfinished_parents(lease(case["lease"]), leases(case["leases"]))] == case["waits_for"]


def test_the_lifecycle_example_is_the_documents():
    """The three answers of the Java KCL's lease-lifecycle document (its example stream: shards
    0-5, then 6 and 7 from epoch 103, then 8, 9, 10 from epoch 206) are in the table, not just look-alikes."""
    seed = [c for c in CASES["sync"] if c["stream"] == "kcl-lifecycle" and c["leases"] == ["4", "5", "7<2,3"]]
    assert {c["initial"]: c["create"] for c in seed} == {
        "LATEST": ["6<0,1@LATEST"], "TRIM_HORIZON": ["0@TRIM_HORIZON", "1@TRIM_HORIZON"],
        "AT_TIMESTAMP": ["0@AT_TIMESTAMP", "1@AT_TIMESTAMP"]}


def _open(key: str, lo: int, hi: int, **kw) -> Lease:
    return Lease(key, checkpoint=ExtendedSequenceNumber("5"), hash_range=(lo, hi), **kw)


HALF = MAX_HASH_KEY // 2


@pytest.mark.parametrize("table,reason", [
    ([], "the lease table is empty"),
    ([_open("a", 0, HALF), _open("b", HALF + 1, MAX_HASH_KEY)], None),
    ([_open("a", 0, HALF), _open("b", HALF + 2, MAX_HASH_KEY)], f"no lease covers hash keys {HALF + 1}..{HALF + 1}"),
    ([_open("a", 0, HALF)], f"no lease covers hash keys {HALF + 1}..{MAX_HASH_KEY}"),
    ([_open("a", 0, MAX_HASH_KEY), Lease("b", checkpoint=ExtendedSequenceNumber("1"))], "lease b has no hash range"),
    # a finished lease does not cover; its children (childShardIds) must have leases
    ([Lease("p", checkpoint=ExtendedSequenceNumber("SHARD_END"), hash_range=(0, MAX_HASH_KEY), child_shard_ids=("c",)),
      _open("c", 0, MAX_HASH_KEY, parent_shard_ids=("p",))], None),
    ([Lease("p", checkpoint=ExtendedSequenceNumber("SHARD_END"), hash_range=(0, MAX_HASH_KEY),
            child_shard_ids=("c", "d")),
      _open("c", 0, MAX_HASH_KEY, parent_shard_ids=("p",))], "finished shard p has children without leases"),
    ([Lease("p", checkpoint=ExtendedSequenceNumber("SHARD_END"), hash_range=(0, MAX_HASH_KEY)),
      _open("q", 0, MAX_HASH_KEY)], "finished shard p has children without leases"),
    # overlapping ranges (a parent still processing beside its children) are fine
    ([_open("p", 0, MAX_HASH_KEY), _open("c", 0, HALF, parent_shard_ids=("p",)),
      _open("d", HALF + 1, MAX_HASH_KEY, parent_shard_ids=("p",))], None),
])
def test_audit(table, reason):
    assert audit({x.key: x for x in table}) == reason


def test_from_api_and_from_child():
    s = Shard.from_api({"ShardId": "shardId-000000000002", "ParentShardId": "shardId-000000000000",
                        "AdjacentParentShardId": "shardId-000000000001",
                        "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": str(MAX_HASH_KEY)},
                        "SequenceNumberRange": {"StartingSequenceNumber": "1", "EndingSequenceNumber": "9"}})
    assert s.parent_shard_ids == ("shardId-000000000000", "shardId-000000000001") and s.is_closed
    c = Shard.from_child({"ShardId": "shardId-000000000004", "ParentShards": ["shardId-000000000000"],
                          "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": "42"}})
    assert (c.parent_shard_ids, c.hash_range, c.is_closed) == (("shardId-000000000000",), (0, 42), False)


def test_a_deep_lineage_does_not_recurse():
    """Thousands of reshards in retention: the walk is iterative."""
    chain = [Shard(sid("0"), (), (0, 9), "1", "9")]
    for i in range(1, 5000):
        chain.append(Shard(sid(str(i)), (sid(str(i - 1)),), (0, 9), "1", None if i == 4999 else "9"))
    plan = plan_new_leases(chain, {sid("7"): Lease(sid("7"), parent_shard_ids=(sid("6"),))}, InitialPosition("LATEST"))
    assert plan.create == ()  # 4999 descends from the leased 7: it waits for 7's end
    plan = plan_new_leases(chain, {sid("9999"): Lease(sid("9999"))}, InitialPosition("TRIM_HORIZON"))
    assert [x.key for x in plan.create] == [sid("0")]

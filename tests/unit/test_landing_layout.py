"""The landing layout: names, positions, and the chain rule's decision table
(tests/decisions/landing_chain_cases.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kcl_mp.spark.layout import (
    START,
    FileName,
    Landed,
    LayoutError,
    admitted,
    cleanable,
    floor_key,
    format_position,
    landed,
    parse_name,
    parse_position,
    plan_shard,
    shard_prefix,
)

CASES = json.loads((Path(__file__).parents[1] / "decisions" / "landing_chain_cases.json").read_text())["cases"]


def file(spec: str, index: int) -> Landed:
    """``FIRST-LAST<FROM[@CHECKPOINTED][!][*ROWS]`` (the table's notation)."""
    spec, _, rows = spec.partition("*")
    ended = spec.endswith("!")
    span, _, rest = spec.rstrip("!").partition("<")
    after, _, checkpointed = rest.partition("@")
    first, last = span.split("-")
    name = str(FileName(parse_position(first), parse_position(last), "w", index))
    return Landed(name, parse_position(first), parse_position(last), parse_position(after),
                  parse_position(checkpointed or "start"), int(rows or 10), ended)


@pytest.mark.parametrize("case", CASES, ids=[c["comment"][:80] for c in CASES])
def test_chain(case):
    files = [file(spec, i) for i, spec in enumerate(case["files"])]
    span = {f.name: spec.partition("<")[0] for f, spec in zip(files, case["files"])}
    covered = parse_position(case["covered"]) if case["covered"] else None
    plan = plan_shard(covered, files, "", case.get("max_files"), case.get("max_rows"))
    assert [(span[t.name], t.after) for t in plan.takes] == [
        (name, parse_position(after) if after else None) for name, after in case["takes"]]
    assert plan.covered == (parse_position(case["end"]) if case["end"] else None)
    expected_gap = case["gap"] and (parse_position(case["gap"][0]), parse_position(case["gap"][1]))
    assert (plan.gap and (plan.gap.covered, plan.gap.waiting_from)) == (expected_gap or None)
    assert plan.ended == case["ended"]
    expected_key = floor_key(parse_position(case["start_after"])) if case["start_after"] else ""
    assert plan.start_after == expected_key


def test_every_position_once_whatever_order_the_files_were_listed_in():
    """A failover's overlapping copies in every order: each position emitted once, none skipped."""
    specs = ["1-10<start", "11-20<10@10", "21-30<20@10", "11-25<10@10", "26-40<25@10", "31-40<30@30"]
    for rotation in range(len(specs)):
        files = [file(s, i) for i, s in enumerate(specs[rotation:] + specs[:rotation])]
        plan = plan_shard(None, files)
        emitted = []
        for take in plan.takes:
            f = next(f for f in files if f.name == take.name)
            emitted += [p for p in range(f.first[0], f.last[0] + 1) if take.after is None or (p, 0) > take.after]
        assert emitted == list(range(1, 41)), rotation


def test_names_sort_by_first_position_and_round_trip():
    names = [FileName((9, 0), (12, 0), "b", 1), FileName((10, 0), (11, 0), "a", 7),
             FileName((49590338271490256608559692538361571095921575989136588898, 2), (10**55, 0), "c", 2)]
    assert [parse_name(str(n)) for n in names] == names
    assert sorted(str(n) for n in names) == [str(n) for n in names]
    assert str(names[2]) > floor_key((49590338271490256608559692538361571095921575989136588898, 5))


@pytest.mark.parametrize("name", ["x.parquet", "1-2-w.parquet", "1.0-2.0-w-1.json", "a.0-2.0-w-1.parquet"])
def test_a_foreign_name_is_an_error_that_names_it(name):
    with pytest.raises(LayoutError, match="not a"):
        parse_name(name)


def test_positions_and_metadata():
    assert parse_position(format_position((42, 3))) == (42, 3)
    assert parse_position("start") == START and format_position(START) == "start"
    assert parse_position("42") == (42, 0)
    name = str(FileName((1, 0), (5, 0), "w", 1))
    got = landed(name, {b"kclmp.from": b"start", b"kclmp.checkpointed": b"0.0", b"kclmp.ended": b"true"}, 5)
    assert (got.after, got.checkpointed, got.rows, got.ended) == (START, (0, 0), 5, True)
    with pytest.raises(LayoutError, match=f"{name}: no valid kclmp.from"):
        landed(name, {}, 5)
    with pytest.raises(LayoutError, match="shard 'a/b'"):
        shard_prefix("orders", "a/b")


def test_cleanable_is_what_is_wholly_at_or_below_the_committed_position():
    files = [file(s, i) for i, s in enumerate(["1-10<start", "11-20<10", "6-25<5"])]
    assert cleanable((20, 0), files) == sorted([files[0].name, files[1].name])
    assert cleanable(None, files) == []


def test_a_new_shard_waits_for_what_the_others_had_landed():
    hold = {"s/parent": (30, 0), "s/other": (7, 0)}
    assert not admitted(hold, {"s/parent": (20, 0), "s/other": (9, 0)})
    assert not admitted(hold, {"s/other": (9, 0)})
    assert admitted(hold, {"s/parent": (30, 0), "s/other": (7, 0)})

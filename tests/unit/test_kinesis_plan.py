"""The ``kclmp_kinesis`` planning rule (``kcl_mp.spark.kinesis_plan``): its decision tables
(tests/decisions/kinesis_plan_cases.json, probe_order_cases.json), the initial offset and a
checkpoint of another kind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kcl_mp.spark.kinesis_plan import (
    Listed,
    Manifest,
    Probe,
    admit,
    check_offset,
    empty_offset,
    initial_offset,
    next_offset,
    probe_order,
    resolve,
    split_key,
)

DECISIONS = Path(__file__).parents[1] / "decisions"
CASES = json.loads((DECISIONS / "kinesis_plan_cases.json").read_text())["cases"]
ORDER_CASES = json.loads((DECISIONS / "probe_order_cases.json").read_text())["cases"]
FULL = (0, 2**128 - 1)


def probe(finding: str) -> Probe:
    kind, _, at = finding.partition("@")
    return {"record": Probe(record_arrival_ms=int(at or 0)), "end": Probe(at_end=True), "behind": Probe(behind=True),
            "idle": Probe()}[kind]


@pytest.mark.parametrize("case", CASES, ids=[c["comment"][:80] for c in CASES])
def test_plan(case):
    start = {**empty_offset(), **case["start"]}
    manifests = {key: Manifest(end, ended) for key, (end, ended) in case["manifests"].items()}
    shards, ready = admit(resolve(start, manifests), [Listed(k, tuple(p), FULL) for k, p in case["listed"]])
    assert set(ready) == set(case["probes"]), "probed: exactly the shards ready"
    moving = [key for key in ready if probe(case["probes"][key]).moves(case.get("until"))]
    closing = [key for key in ready if probe(case["probes"][key]).at_end]
    end = next_offset(start, shards, moving, case.get("max_rows"), case.get("until"), closing)
    if case["expect"] == "start":
        assert end == start
        return
    expect = case["expect"]
    assert end["epoch"] == expect["epoch"] and end["active"] == expect["active"]
    assert {k: e["pos"] for k, e in end["shards"].items()} == expect["pos"]
    assert sorted(k for k, e in end["shards"].items() if e["ended"]) == expect["ended"]
    assert end["cap"] == expect.get("cap") and end["until"] == expect.get("until")
    assert end["closing"] == expect.get("closing", [])


@pytest.mark.parametrize("case", ORDER_CASES, ids=[c["comment"][:80] for c in ORDER_CASES])
def test_probe_order(case):
    assert probe_order(case["ready"], case["probed_at"], set(case["idle"]), case["now"], case["defer"]) == case["expect"]


def test_initial_offset_by_position_and_by_sequence_number():
    listed = [Listed("arn:aws:kinesis:us-east-1:1:stream/s/shardId-000000000001", (), FULL),
              Listed("arn:aws:kinesis:us-east-1:1:stream/s/shardId-000000000002", (), FULL)]
    first = initial_offset(listed, {"at": "AT_TIMESTAMP", "ts": 7}, 7)
    assert first["since"] == 7 and first["epoch"] == 0 and first["active"] == []
    assert {e["pos"]["ts"] for e in first["shards"].values()} == {7}
    by_seq = initial_offset(listed, {"at": "TRIM_HORIZON"}, None, {"shardId-000000000002": "49"})
    assert [e["pos"] for e in by_seq["shards"].values()] == [
        {"at": "TRIM_HORIZON"}, {"at": "AT_SEQUENCE_NUMBER", "seq": "49"}]
    assert split_key(listed[0].key) == ("arn:aws:kinesis:us-east-1:1:stream/s", "shardId-000000000001")


def test_the_next_offset_carries_the_start_time_of_a_latest_query():
    start = {**empty_offset(), "since": 123, "shards": {"s/a": {"pos": {"at": "AT_TIMESTAMP", "ts": 123},
                                                               "ended": False}}}
    assert next_offset(start, start["shards"], ["s/a"], None, None)["since"] == 123


@pytest.mark.parametrize("offset", [{}, {"seq": "1"}, {"v": 2, "shards": {}}, ["x"]])
def test_another_sources_checkpoint_is_refused_with_what_to_do(offset):
    with pytest.raises(ValueError, match="new checkpoint"):
        check_offset(offset)

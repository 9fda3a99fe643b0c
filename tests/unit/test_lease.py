"""The lease model against the items the Java KCL 3.1.3 daemon wrote (tests/fixtures, copied
from the shared reference run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kcl_mp.leases.lease import Lease
from kcl_mp.sequence import SHARD_END, TRIM_HORIZON, ExtendedSequenceNumber, is_valid_sequence_number

REFERENCE = Path(__file__).resolve().parents[1] / "fixtures" / "java_kcl_3.1.3_tables.json"


def java_items():
    tables = json.loads(REFERENCE.read_text())
    return [item for phase in ("while_running", "after_shutdown")
            for table in tables[phase].values()
            if table["KeySchema"][0]["AttributeName"] == "leaseKey" for item in table["items"]]


def test_reference_file_is_there():
    assert REFERENCE.exists(), f"missing {REFERENCE}: the Java reference tables are part of the repository"
    assert java_items()


@pytest.mark.parametrize("index", range(8))
def test_java_items_round_trip_unchanged(index):
    items = java_items()
    item = items[index % len(items)]
    assert Lease.from_item(item).to_item() == item


def test_unknown_attributes_are_preserved():
    item = {"leaseKey": {"S": "shardId-1"}, "leaseCounter": {"N": "4"}, "throughputKBps": {"N": "1.5"},
            "pendingCheckpointState": {"B": b"xy"}, "someFutureField": {"M": {"a": {"S": "b"}}},
            "ownerSwitchesSinceCheckpoint": {"N": "0"}}
    lease = Lease.from_item(item)
    assert lease.extra == {"throughputKBps": {"N": "1.5"}, "pendingCheckpointState": {"B": b"xy"},
                           "someFutureField": {"M": {"a": {"S": "b"}}}}
    assert lease.to_item() == item


@pytest.mark.parametrize(
    "smaller,larger",
    [
        (("TRIM_HORIZON", 0), ("1", 0)),
        (("AT_TIMESTAMP", 0), ("TRIM_HORIZON", 0)),
        (("LATEST", 0), ("0", 0)),
        (("5", 0), ("5", 1)),
        (("5", 9), ("6", 0)),
        (("49590338271490256608559692538361571095921575989136588898", 0),
         ("49590338271490256608559692538361571095921575989136588899", 0)),
        (("99999999999999999999999999999999999999999999999999999999", 7), (SHARD_END, 0)),
    ],
)
def test_ordering(smaller, larger):
    assert ExtendedSequenceNumber(*smaller) < ExtendedSequenceNumber(*larger)
    assert ExtendedSequenceNumber(*larger) > ExtendedSequenceNumber(*smaller)


@pytest.mark.parametrize("text,valid", [("123", True), (TRIM_HORIZON, True), (SHARD_END, True),
                                        ("", False), ("12a", False), ("-1", False), ("１２", False)])
def test_valid_sequence_numbers(text, valid):
    assert is_valid_sequence_number(text) is valid

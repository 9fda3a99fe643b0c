"""The KCL 3.x fleet harness's timeline readers (tests/support/fleet_findings.py) on a
history written out by hand; the harness's run with the real Java daemon and the snapshot
comparison on its snapshots are in tests/e2e/test_kcl3_acceptance.py."""

from __future__ import annotations

import pytest

from ..support.fleet_findings import moved_back, moves

pytestmark = pytest.mark.integration


def test_moved_back_and_moves_read_the_timeline():
    history = {"s1": [[0.0, None, None], [1.0, "a", "1"], [5.0, "b", "1"], [9.0, "a", "2"], [30.0, "b", "3"]],
               "s2": [[0.0, "a", None], [2.0, None, None], [3.0, "a", "1"]]}
    assert moved_back(history, 0.0, 100.0, within_s=10.0) == ["s1: a -> b -> a (4.0 s apart)"]
    assert moved_back(history, 10.0, 100.0, within_s=30.0) == ["s1: b -> a -> b (21.0 s apart)"]
    assert moved_back(history, 0.0, 100.0, within_s=3.0) == []
    assert moves(history, 0.0, 100.0) == ["s1: a -> b", "s1: b -> a", "s1: a -> b"]  # s2: released, back to a

"""The live view (supervisor/progress.py): a state per shard, totals kept across processor
restarts, a legend on the first view, and a banner when nothing is processing."""

from __future__ import annotations

import pytest

from kcl_mp.supervisor.progress import LEGEND, ShardProgress, render, shard_state


@pytest.mark.parametrize("facts, state", [
    ({"running": True, "restart": (2, 3.0)}, "running"),  # running wins over a count kept from before
    ({"restart": (2, 3.4)}, "restarting 2/5 (in 3 s)"),
    ({"avoid_s": 41.6}, "released (left alone 42 s more)"),
    ({"parents": ("shardId-0", "shardId-1")}, "waiting on parents shardId-0,shardId-1"),
    ({"ended": True}, "ended"),
    ({}, "idle"),
])
def test_each_state(facts: dict, state: str) -> None:
    given = {"running": False, "restart": None, "max_restarts": 5, "avoid_s": None, "parents": (), "ended": False}
    assert shard_state(**{**given, **facts}) == state


def test_records_survive_a_restart_and_the_rate_does_not_jump() -> None:
    p = ShardProgress("shardId-1")
    p.update(300, "49-300", 0)
    assert p.rate(0.0) == 0.0
    p.restarted()
    p.update(100, "49-400", 0)  # the new processor counts from 0
    assert p.delivered == 400 and p.rate(2.0) == 50.0


def test_a_crash_loop_with_nothing_running_shows_the_banner_and_every_shard() -> None:
    shards = [ShardProgress("shardId-0", current=10)]
    view = render(shards, {"shardId-0": "restarting 3/5 (in 4 s)", "shardId-1": "released (left alone 50 s more)"},
                  held=1, now=1.0, legend=True)
    lines = view.splitlines()
    assert lines[0] == LEGEND
    assert lines[2].startswith("shardId-0") and lines[2].endswith("restarting 3/5 (in 4 s)")
    assert lines[3].startswith("shardId-1") and lines[3].endswith("released (left alone 50 s more)")
    assert lines[4].startswith("total (1 leases)") and "10" in lines[4]
    assert lines[5].startswith("!! nothing is processing: 1 leases held, no processor running")


def test_no_banner_while_a_shard_runs_and_none_after_the_stop() -> None:
    shards = [ShardProgress("shardId-0", current=10)]
    assert "!!" not in render(shards, {"shardId-0": "running"}, held=1, now=1.0)
    stopped = render(shards, {"shardId-0": "running"}, held=0, now=2.0, stopped=True)
    assert "!!" not in stopped and stopped.endswith("(the last figures: this host stopped and released its leases)")
    assert LEGEND not in stopped

"""kcl-mp's leader election against the real Java daemon 3.1.3 (default 3.x mode) as the
other contender: the scenario (tests/support/java_leader.py) runs in a loopback-only
network namespace and leaves its evidence; this test judges it:

- Java reads kcl-mp's live lock (twice, 30 s apart) and does not take it;
- kcl-mp stops heartbeating: Java takes the lock, never earlier than the lock's lease
  duration after kcl-mp's last heartbeat began, and kcl-mp no longer believes it leads
  by then (no sample with both);
- kcl-mp, contending again, does not take the lock Java heartbeats; Java stopped deletes
  it and kcl-mp takes it.
"""

from __future__ import annotations

import pytest

from ..support.harness import run_support_module

pytestmark = [pytest.mark.integration, pytest.mark.java]


def test_kcl_mp_and_java_share_the_leader_lock(tmp_path):
    out = tmp_path / "leader"
    result = run_support_module("java_leader", out, timeout=150)
    java_log = (out / result["java_log"]).read_text(errors="replace")
    assert result["failure"] is None, result["failure"] + "\n" + str(result["owners"]) + "\n" + java_log[-4000:]
    owners = [owner for _, owner in result["owners"]]
    assert owners == ["kclmp-a", "java-1", None, "kclmp-a"] or owners == ["kclmp-a", "java-1", "kclmp-a"], owners
    assert result["java_checks_while_alive"] >= 2
    waited = result["java_took"] - result["last_heartbeat"]
    print(f"Java took the lock {waited:.1f} s after kcl-mp's last heartbeat began "
          f"(lease duration {result['lease_duration_s']:.0f} s)")
    assert waited > result["lease_duration_s"]
    assert result["overlaps"] == []
    assert "Worker : java-1 is new leader" in java_log
    assert result["java_exit"] in (0, 143), result["java_exit"]

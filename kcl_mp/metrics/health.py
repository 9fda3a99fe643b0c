"""``/healthz``'s answer, from the supervisor's last report and the time since it. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def health(now: float, received_at: float | None, state: Mapping[str, Any], failover_s: float
           ) -> tuple[bool, dict[str, Any]]:
    """``/healthz``: healthy while no lease of this host can have expired, as far as the
    supervisor's last report and the time since it tell.

    ``state`` is that report (``held``; ``renewed_s_ago``: how long before it the oldest
    held lease was last renewed, by the supervisor's clock; None with no lease). A lease
    expires for other hosts failoverTimeMillis after its last renewal, so the host is
    unhealthy once ``renewed_s_ago`` plus the time since the report passes ``failover_s``,
    whether the renewals failed or the supervisor stopped (a stopped one cannot report). A
    host with no lease is healthy while it reports within ``failover_s``: a spare worker is
    a healthy worker.

    Reports come once a second, and at once after a renewal round that took longer, so a
    running host reads unhealthy only when a round takes more than about two thirds of
    ``failover_s`` (it renews every third): then one slow round loses its leases.

    >>> health(100.0, 98.0, {"held": 3, "renewed_s_ago": 1.5}, 3.0)[0]  # 3.5 s: may be taken
    False
    >>> health(100.0, 99.5, {"held": 3, "renewed_s_ago": 2.0}, 3.0)[0]
    True
    """
    if received_at is None:
        return False, {"status": "starting", "reason": "no report from the supervisor loop yet"}
    silent = now - received_at
    body = {"status": "ok", "supervisor_report_s_ago": round(silent, 3), "failover_s": failover_s, **state}
    renewed = state.get("renewed_s_ago")
    if state.get("held") and renewed is not None and renewed + silent > failover_s:
        body.update(status="unhealthy",
                    reason=f"a held lease was last renewed {renewed + silent:.1f} s ago ({renewed:.1f} s before the "
                           f"supervisor's last report, {silent:.1f} s ago): past failoverTimeMillis "
                           f"({failover_s:.1f} s), other hosts may take it")
        return False, body
    if silent > failover_s:
        body.update(status="unhealthy",
                    reason=f"the supervisor loop has not reported for {silent:.1f} s (failoverTimeMillis "
                           f"{failover_s:.1f} s)")
        return False, body
    return True, body

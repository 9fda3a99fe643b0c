"""The KCL 3.x fleet harness (tests/integration/kcl3_fleet.py, fleet_findings.py), short
scenarios (issue 20's full scenario is tests/integration/pending_kcl3_fleet.py):

- the Java daemon 3.1.3 alone in its default mode: it creates the coordinator-state and
  worker-metrics tables, writes ``Migration3.0`` = CLIENT_VERSION_3X, takes the ``Leader``
  lock, its lease assignment manager assigns all 8 leases to itself; stopped, it deletes the
  lock, and one kcl-mp host (clientVersionConfig 3X) takes the lock and the leases over
  from Java's checkpoints; the observers
  (snapshots, lease timeline, lock owner, delivery, resumes, overlap) say so;
- the snapshot comparison passes the changes a fleet's work makes and names every loss or
  corruption injected into real snapshots.
"""

from __future__ import annotations

import copy

import pytest

from .fleet_findings import (
    compare_snapshots,
    delivered_by,
    holdings,
    java_assigned,
    java_discovered,
    moved_back,
    moves,
    processing_overlap,
    resumes,
)
from .kcl3_fleet import (
    APP,
    COORDINATOR_TABLE,
    JAVA,
    KCLMP,
    METRICS_TABLE,
    SHARDS,
    run_scenario,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def java_first(tmp_path_factory):
    found = run_scenario("java-first", tmp_path_factory.mktemp("kcl3") / "java-first", timeout=240)
    assert found.failure is None, f"{found.failure}\nphases {found.phases}\n{found.tails()}"
    return found


def test_java_default_mode_alone_then_kcl_mp_takes_over(java_first):
    f = java_first
    start, phases = f.phases["start"], f.phases
    shots = f.result["snapshots"]

    # the state Java 3.1.3 writes in default mode, beside the leases
    leading = shots["java_leads"]
    migration = leading[COORDINATOR_TABLE]["Migration3.0"]
    assert migration["cv"] == {"S": "CLIENT_VERSION_3X"} and migration["mb"] == {"S": JAVA}, migration
    assert [entry["M"]["cv"]["S"] for entry in migration["h"]["L"]] == ["CLIENT_VERSION_INIT"], migration
    lock = leading[COORDINATOR_TABLE]["Leader"]
    assert lock["ownerName"] == {"S": JAVA} and lock["leaseDuration"] == {"S": "120000"}, lock
    metrics = leading[METRICS_TABLE][JAVA]
    assert metrics["sts"] == {"M": {}} and metrics["opr"] == {"M": {}} and "lut" in metrics, metrics  # off EC2
    assert f.result["notes"]["lease_indexes"] == ["LeaseOwnerToLeaseKeyIndex"]

    # Java's lease assignment manager gave itself every lease, once each, from nobody
    log = f.log(f"{JAVA}.1.log")
    assigned = java_assigned(log)
    assert sorted(assigned) == sorted((f"shardId-{n:012d}", "null", JAVA) for n in range(SHARDS)), assigned
    assert java_discovered(log) == SHARDS

    # the lease timeline: nobody, then Java, then kclmp-a, for every shard (released by Java
    # or expired in between; kclmp-a releases them as it stops); nothing went back
    spans = holdings(f.history, phases["end"])
    assert sorted(spans) == [f"shardId-{n:012d}" for n in range(SHARDS)]
    for shard, held in spans.items():
        assert [owner for _, _, owner in held if owner] == [JAVA, KCLMP[0]], (shard, held)
    assert len(moves(f.history, phases["java_stopped"], phases["end"])) == SHARDS
    assert moved_back(f.history, start, phases["end"], within_s=600) == []
    assert f.count_at(phases["java_holds_all"], JAVA) == SHARDS
    assert f.count_at(phases["kclmp_holds_all"], KCLMP[0]) == SHARDS

    # the lock: Java's from its start until it stopped (it deletes the item on shutdown), then the
    # kcl-mp host's (a 3.x worker: it takes the released lock and leads), released as it stops
    leaders = f.leaders()
    owners = [owner for _, owner in leaders]
    owners = owners[1:] if owners[:1] == [None] else owners
    assert owners in ([JAVA, None, KCLMP[0]], [JAVA, None, KCLMP[0], None]), leaders
    java_led = next(at for at, owner in leaders if owner == JAVA)
    released = [at for at, owner in leaders if owner is None and at > java_led]
    assert released and phases["delivered"] <= released[0] <= phases["java_stopped"], (leaders, phases)

    # delivery, resumption from Java's checkpoints, no shard processed twice at once
    assert f.undelivered() == 0
    by_host = delivered_by(f.entries)
    assert by_host.get(JAVA, 0) > 0 and by_host.get(KCLMP[0], 0) > 0, by_host
    handed = resumes(f.entries, f.result["puts"])
    assert sorted(r.shard for r in handed) == sorted(spans), handed
    assert all(r.previous == JAVA and r.host == KCLMP[0] and r.ok for r in handed), handed
    overlap, shard = processing_overlap(f.entries)
    assert overlap <= f.result["settings"]["failover_s"], (overlap, shard)

    # no item lost or corrupted across any phase, by either implementation
    assert all(not problems for problems in f.snapshot_problems().values()), f.snapshot_problems()
    assert f.result["backwards"] == []
    assert f.result["exits"] == {f"{JAVA}.1": 143, f"{KCLMP[0]}.1": 0}, f.result["exits"]
    print("phases (s from the start):", {name: round(at - start, 1) for name, at in phases.items()})
    print(f"Java took the lock {java_led - start:.1f} s after the start, held all {SHARDS} leases at "
          f"{phases['java_holds_all'] - start:.1f} s; kclmp-a held all {phases['kclmp_holds_all'] - phases['java_stopped']:.1f}"
          f" s after Java stopped; {len(f.result['puts'])} records, longest overlap {overlap:.1f} s")


def test_snapshot_comparison_names_every_loss(java_first):
    shots = java_first.result["snapshots"]
    before, after = shots["delivered"], shots["kclmp_holds_all"]
    assert compare_snapshots(before, after) == []  # the lock released, leases moved, checkpoints on
    # a lease Java had checkpointed and written a throughput for
    lease = next(key for key, item in sorted(before[APP].items())
                 if item["checkpoint"]["S"].isdigit() and "throughputKBps" in item)

    def changed(edit) -> list[str]:
        broken = copy.deepcopy(after)
        edit(broken)
        return compare_snapshots(before, broken)

    # what a fleet's work does: allowed
    def allowed(shot):
        item = shot[APP][lease]
        item["leaseOwner"] = {"S": "someone-else"}
        item["leaseCounter"] = {"N": str(int(item["leaseCounter"]["N"]) + 7)}
        item["throughputKBps"] = {"N": "12.5"}
        item.pop("checkpointOwner", None)
        shot[COORDINATOR_TABLE]["Leader"] = {"key": {"S": "Leader"}, "ownerName": {"S": "kclmp-b"},
                                             "leaseDuration": {"S": "120000"}, "recordVersionNumber": {"S": "x"}}
        shot[METRICS_TABLE][JAVA]["lut"] = {"N": str(int(before[METRICS_TABLE][JAVA]["lut"]["N"]) + 30)}
        shot[METRICS_TABLE][JAVA]["sts"] = {"M": {"C": {"L": [{"N": "10.5"}]}}}
    assert changed(allowed) == []

    # each corruption named, with the table, the item and the attribute
    cases = {
        "startingHashKey dropped": lambda s: s[APP][lease].pop("startingHashKey"),
        "endingHashKey changed": lambda s: s[APP][lease].update(endingHashKey={"S": "1"}),
        "leaseCounter retyped": lambda s: s[APP][lease].update(leaseCounter={"S": "9"}),
        "leaseCounter went back": lambda s: s[APP][lease].update(leaseCounter={"N": "0"}),
        "checkpoint went back": lambda s: s[APP][lease].update(checkpoint={"S": "TRIM_HORIZON"}),
        "throughputKBps dropped": lambda s: s[APP][lease].pop("throughputKBps"),
        "item is gone": lambda s: s[APP].pop(lease),
        "cv changed": lambda s: s[COORDINATOR_TABLE]["Migration3.0"].update(cv={"S": "CLIENT_VERSION_2X"}),
        "h dropped": lambda s: s[COORDINATOR_TABLE]["Migration3.0"].pop("h"),
        "Migration3.0: the item is gone": lambda s: s[COORDINATOR_TABLE].pop("Migration3.0"),
        "lut went back": lambda s: s[METRICS_TABLE][JAVA].update(lut={"N": "1"}),
        "java-1: the item is gone": lambda s: s[METRICS_TABLE].pop(JAVA),
        "the table is gone": lambda s: s.update({METRICS_TABLE: None}),
    }
    for what, edit in cases.items():
        problems = changed(edit)
        assert len(problems) == 1 and what in problems[0], (what, problems)


def test_moved_back_and_moves_read_the_timeline():
    history = {"s1": [[0.0, None, None], [1.0, "a", "1"], [5.0, "b", "1"], [9.0, "a", "2"], [30.0, "b", "3"]],
               "s2": [[0.0, "a", None], [2.0, None, None], [3.0, "a", "1"]]}
    assert moved_back(history, 0.0, 100.0, within_s=10.0) == ["s1: a -> b -> a (4.0 s apart)"]
    assert moved_back(history, 10.0, 100.0, within_s=30.0) == ["s1: b -> a -> b (21.0 s apart)"]
    assert moved_back(history, 0.0, 100.0, within_s=3.0) == []
    assert moves(history, 0.0, 100.0) == ["s1: a -> b", "s1: b -> a", "s1: a -> b"]  # s2: released, back to a

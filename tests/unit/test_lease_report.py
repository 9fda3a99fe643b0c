"""``kcl-mp leases``: the report from two scans (pure)."""

from kcl_mp.cli.leases import render, summarize
from kcl_mp.leases.lease import Lease
from kcl_mp.sequence import ExtendedSequenceNumber


def test_report_counts_workers_spread_and_states() -> None:
    before = [
        Lease("s0", "A", 5, ExtendedSequenceNumber("100")),
        Lease("s1", "A", 5),
        Lease("s2", "B", 7, parent_shard_ids=("s9",)),
        Lease("s3", "C", 3),  # C stopped renewing
        Lease("s4"),
        Lease("s5", None, 2, ExtendedSequenceNumber("SHARD_END")),
        Lease("s6", "B", 1, checkpoint_owner="A"),
    ]
    after = [lease.with_(counter=lease.counter + 1) if lease.owner in ("A", "B") else lease for lease in before]
    report = summarize("app", before, after, watched_s=10.1, failover_s=10.0)
    assert report.workers == {"A": 2, "B": 2}
    assert report.spread == 0
    assert (report.unowned, report.expired, report.finished, report.handoffs) == (1, 1, 1, 1)
    states = {row.key: row.state for row in report.leases}
    assert states == {"s0": "held", "s1": "held", "s2": "held", "s3": "expired", "s4": "unowned",
                      "s5": "finished", "s6": "handoff A -> B"}
    text = render(report)
    assert "7 leases (6 active, 1 finished) on 2 workers; spread 0" in text
    assert "s9" in text and "100" in text


def test_without_waiting_expiry_is_not_measured() -> None:
    leases = [Lease("s0", "A", 5), Lease("s1", "B", 5), Lease("s2", "B", 5)]
    report = summarize("app", leases, leases, watched_s=0.0, failover_s=10.0)
    assert report.expired == 0 and report.watched_s == 0.0
    assert report.workers == {"B": 2, "A": 1} and report.spread == 1
    assert "not measured" in render(report)


def test_a_child_waiting_for_its_parents_says_so() -> None:
    leases = [Lease("p", "A", 5, ExtendedSequenceNumber("100")),
              Lease("q", "A", 5, ExtendedSequenceNumber("SHARD_END")),
              Lease("c", "B", 3, parent_shard_ids=("p", "q")), Lease("d", "B", 3, parent_shard_ids=("q",))]
    states = {row.key: row.state for row in summarize("app", leases, leases, 0.0, 10.0).leases}
    assert states == {"p": "held", "q": "finished", "c": "held, waits for its parents", "d": "held"}


def test_changes_between_two_views_name_what_moved():
    from kcl_mp.cli.leases import changes, report
    from kcl_mp.sequence import ExtendedSequenceNumber

    before = report("app", [Lease("a", owner="w1", counter=1), Lease("b", owner="w1", counter=1),
                            Lease("c", owner="w2", counter=1, checkpoint=ExtendedSequenceNumber("5")),
                            Lease("d", owner="w2", counter=1)], set(), 0.0)
    after = report("app", [Lease("a", owner="w2", counter=2), Lease("b", owner="w1", counter=2),
                           Lease("c", owner="w2", counter=2, checkpoint=ExtendedSequenceNumber("9")),
                           Lease("e", owner=None)], set(), 0.0)
    moved = changes(before, after)
    assert moved == {"a": "owner was w1", "c": "checkpointed", "e": "new lease", "d": "deleted"}
    assert changes(None, after) == {}
    text = render(after, moved)
    assert "<- owner was w1" in text and "d" in text and "(deleted since the last view)" in text


def test_rows_that_are_not_leases_are_listed_apart_and_never_counted():
    import json
    from dataclasses import asdict
    from pathlib import Path

    from kcl_mp.leases.rows import read_items

    java = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "java_kcl_3.5_rows.json").read_text())
    found = read_items([*java["rows"], java["lease"], Lease("shardId-000000000001", "A", 3).to_item()])
    shown = summarize("app", found.leases, found.leases, 0.0, 10.0, found.others)
    assert [row.key for row in shown.leases] == ["shardId-000000000000", "shardId-000000000001"]
    assert shown.workers == {"A": 1, "java-worker-1": 1} and shown.unowned == 0
    assert [(row.key, row.entity_type) for row in shown.others] == [
        ("Leader", "LEADER"), ("Migration3.0", "CLIENT_VERSION_MIGRATION"),
        ("TableMigration3.5", "TABLE_MIGRATION"), ("java-worker-1", "WORKER_METRIC_STATS")]
    assert asdict(shown)["others"][0] == {"key": "Leader", "entity_type": "LEADER",
                                          "summary": "leader lock held by java-worker-1 (leaseDuration 120000 ms)",
                                          "why": "entityType LEADER"}
    text = render(shown)
    assert "2 leases (2 active, 0 finished) on 2 workers" in text
    head, apart = text.split("4 rows that are not leases (left alone):\n")
    assert "Leader" not in head and "Migration3.0" not in head
    assert "client version CLIENT_VERSION_3X" in apart and "TABLE_MIGRATION_STATUS_COMPLETE" in apart


def test_a_row_kcl_mp_cannot_read_is_listed_apart_with_its_reason_and_escaped() -> None:
    """Security review #1 and #7: the row that used to crash `kcl-mp leases` is shown with its
    fault, and neither a key nor an owner can write a control character to the terminal."""
    from kcl_mp.leases.rows import read_items

    forged = "shardId-000000000777\n2026-11-25T15:00:00.000 ERROR   worker=host shard=- forged\x1b]0;pwned\x07"
    found = read_items([
        {"leaseKey": {"S": "shardId-000000000099"}, "leaseCounter": {"N": "1"},
         "checkpoint": {"S": "TRIM_HORIZON"}, "checkpointSubSequenceNumber": {"N": "1.5"}},
        {"leaseKey": {"S": forged}, "leaseCounter": {"N": "1"}},
        Lease("shardId-000000000001", "owner\x1b[8mhidden", 3).to_item(),
    ])
    shown = summarize("app", found.leases, found.leases, 0.0, 10.0, found.others)
    assert [row.why for row in shown.others] == [
        "checkpointSubSequenceNumber '1.5' is not a whole number",
        f"leaseKey {forged!r} is not a shard id (shardId- and 12 digits)"]
    text = render(shown)
    assert "\x1b" not in text and "\x07" not in text
    # no line forged: header, worker heading and row, counts, the states' legend, lease heading
    # and row, the line announcing the rows apart, their heading and their two rows
    assert len(text.splitlines()) == 11
    assert "owner\\x1b[8mhidden" in text
    assert "not a lease: checkpointSubSequenceNumber '1.5' is not a whole number" in text
    assert "shardId-000000000777\\n2026-11-25T15:00:00.000 ERROR" in text


def test_a_multi_stream_table_gets_a_line_per_stream_and_one_stream_none() -> None:
    orders, payments = "123456789012:orders:1700000000000", "123456789012:payments:1700000000001"
    leases = [Lease(f"{orders}:shardId-000000000000", "A", 5), Lease(f"{orders}:shardId-000000000001", "B", 5),
              Lease(f"{orders}:shardId-000000000002", "B", 5),
              Lease(f"{payments}:shardId-000000000000", None, 2, ExtendedSequenceNumber("SHARD_END")),
              Lease(f"{payments}:shardId-000000000001", "A", 3)]
    report = summarize("app", leases, leases, watched_s=0.0, failover_s=10.0)
    assert [(s.name, s.leases, s.finished, s.workers) for s in report.streams] == [
        ("orders", 3, 0, {"B": 2, "A": 1}), ("payments", 2, 1, {"A": 1})]
    text = render(report)
    assert "orders                                        3        0  B 2, A 1" in text
    assert "payments                                      2        1  A 1" in text
    assert report.as_json()["streams"][1] == {"name": "payments", "leases": 2, "finished": 1, "workers": {"A": 1}}

    one = [Lease("shardId-000000000000", "A", 5)]
    single = summarize("app", one, one, watched_s=0.0, failover_s=10.0)
    assert single.streams == () and "streams" not in single.as_json() and "stream " not in render(single)

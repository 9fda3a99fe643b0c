"""KPL de-aggregation with records built by aws_kinesis_agg's own aggregator."""

from __future__ import annotations

import base64
from datetime import datetime, timezone

from aws_kinesis_agg.aggregator import RecordAggregator

from kcl_mp.multilang.wire import make_batch
from kcl_mp.retrieval.deaggregate import LINE_OVERHEAD, line_slices, page_slices, user_record_runs, user_records
from kcl_mp.sequence import ExtendedSequenceNumber

T = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc)


def aggregate(*pairs):
    agg = RecordAggregator()
    for key, data in pairs:
        agg.add_user_record(key, data)
    return agg.clear_and_get().get_contents()[2]


def record(seq, data, key="pk"):
    return {"SequenceNumber": seq, "Data": data, "PartitionKey": key, "ApproximateArrivalTimestamp": T}


def test_plain_records_pass_through_as_base64():
    out = user_records([record("7", b"hello"), record("8", b"")])
    assert out == [(base64.b64encode(b"hello").decode(), "pk", "7", int(T.timestamp() * 1000), 0),
                   ("", "pk", "8", int(T.timestamp() * 1000), 0)]


def test_aggregate_becomes_user_records_with_sub_sequence_numbers():
    blob = aggregate(("a", b"one"), ("b", b"two"), ("a", b"three"))
    out = user_records([record("9", blob, key="container")])
    assert [(base64.b64decode(d), k, s, sub) for d, k, s, _, sub in out] == [
        (b"one", "a", "9", 0), (b"two", "b", "9", 1), (b"three", "a", "9", 2)]


def test_bad_digest_is_delivered_as_an_ordinary_record():
    blob = bytearray(aggregate(("a", b"one"), ("b", b"two")))
    blob[-1] ^= 0xFF
    out = user_records([record("9", bytes(blob))])
    assert len(out) == 1 and base64.b64decode(out[0][0]) == bytes(blob)


def test_magic_without_body_is_delivered_as_is():
    out = user_records([record("9", b"\xf3\x89\x9a\xc2")])
    assert base64.b64decode(out[0][0]) == b"\xf3\x89\x9a\xc2"


def test_resume_inside_an_aggregate_drops_what_was_checkpointed():
    blob = aggregate(("a", b"0"), ("b", b"1"), ("c", b"2"), ("d", b"3"))
    out = user_records([record("9", blob), record("10", b"x")], after=ExtendedSequenceNumber("9", 1))
    assert [(s, sub) for _, _, s, _, sub in out] == [("9", 2), ("9", 3), ("10", 0)]


def test_resume_after_a_plain_record_drops_it():
    out = user_records([record("9", b"a"), record("10", b"b")], after=ExtendedSequenceNumber("9", 0))
    assert [s for _, _, s, _, _ in out] == ["10"]


def test_sentinel_checkpoint_filters_nothing():
    out = user_records([record("1", b"a")], after=ExtendedSequenceNumber("TRIM_HORIZON", 0))
    assert len(out) == 1


def wire(seq, data, key="pk"):
    """A record as the fast path's client leaves it: base64 text, epoch seconds."""
    return {"SequenceNumber": seq, "Data": base64.b64encode(data).decode(), "PartitionKey": key,
            "ApproximateArrivalTimestamp": T.timestamp()}


def test_the_fast_path_gives_what_the_bytes_path_gives():
    blob = aggregate(("a", b"one"), ("b", b"two"))
    bad = bytearray(blob)
    bad[-1] ^= 0xFF
    payloads = [b"hello", b"", b"\xf3\x89\x9a\xc2", b"\xf3\x89\x9a\xc3 not kpl", bytes(bad), blob, bytes(range(256))]
    slow = user_records([record(str(i), p) for i, p in enumerate(payloads, 1)], after=ExtendedSequenceNumber("1", 0))
    fast = user_records([wire(str(i), p) for i, p in enumerate(payloads, 1)], after=ExtendedSequenceNumber("1", 0))
    assert fast == slow and len(fast) == 7  # the aggregate gave two user records


def test_the_fast_path_passes_the_wire_text_through():
    page = [wire("7", b"x" * 1000)]
    assert user_records(page)[0][0] is page[0]["Data"]  # the same string: no decode, no re-encode


def test_arrival_milliseconds_are_rounded_not_truncated():
    stamp = {"SequenceNumber": "1", "Data": "", "PartitionKey": "k", "ApproximateArrivalTimestamp": 1700000000.123}
    assert user_records([stamp])[0][3] == 1700000000123


def _many(count: int, key: str = "k") -> bytes:
    return aggregate(*[(key, b"") for _ in range(count)])


def test_a_page_of_aggregates_is_made_a_run_at_a_time():
    page = [record(str(9 + n), _many(1000)) for n in range(3)]
    read = []

    def reading():
        for kinesis_record in page:
            read.append(kinesis_record)
            yield kinesis_record

    runs = user_record_runs(reading(), None, 700)
    first = next(runs)
    assert len(read) == 1  # the rest is not made yet: nothing holds 3,000 tuples at once
    sizes = [len(first)] + [len(run) for run in runs]
    assert sizes == [700, 700, 700, 700, 200]
    assert [(s, sub) for _, _, s, _, sub in user_records(page)][698:702] == [("9", 698), ("9", 699), ("9", 700),
                                                                           ("9", 701)]


def test_runs_drop_what_the_checkpoint_covers_and_keep_the_order():
    page = [record("9", _many(10)), record("10", b"plain")]
    users = [u for run in user_record_runs(page, ExtendedSequenceNumber("9", 6), 3) for u in run]
    assert [(s, sub) for _, _, s, _, sub in users] == [("9", 7), ("9", 8), ("9", 9), ("10", 0)]


def test_a_slice_line_is_within_the_bytes_and_records_asked_for():
    users = user_records([record("49590338271490256608559692538361571095921575989136588898", _many(5000, "key-1"))])
    slices = list(page_slices([record("49590338271490256608559692538361571095921575989136588898",
                                      _many(5000, "key-1"))], None, 2000, 64 << 10))
    assert [u for part in slices for u in part] == users  # every record once, in order
    lines = [make_batch(part, 0).line for part in slices]
    assert all(len(part) <= 2000 for part in slices) and all(len(line) <= 64 << 10 for line in lines)
    assert len(lines[0]) > 60 << 10  # the estimate is close: lines are not cut much shorter than asked


def test_the_line_overhead_matches_what_wire_writes():
    # 13 digits of arrival time, a 6-digit sub-sequence number: the estimate's assumptions
    user = ("YWJj", "key", "49590338271490256608559692538361571095921575989136588898", 1700000000123, 123456)
    empty = len(make_batch([], None).line)
    one = len(make_batch([user], None).line) - empty
    assert one == LINE_OVERHEAD + len(user[0]) + len(user[1]) + len(user[2]) - 1  # the last record has no comma


def test_a_record_longer_than_the_bound_is_alone_in_its_slice():
    big, small = ("A" * 1000, "k", "1", 0, 0), ("A", "k", "2", 0, 0)
    assert [len(part) for part in line_slices([small, big, small, small], 600)] == [1, 1, 2]


def test_user_records_outside_the_shards_hash_range_are_dropped_by_key_or_explicit_hash_key():
    """As the Java KCL: the KPL sends a record that landed on the wrong shard again, so the
    misplaced copy goes; a plain record (routed by Kinesis itself) is never filtered."""
    import hashlib

    def hashed(key):
        return int(hashlib.md5(key.encode()).hexdigest(), 16)

    keys = [f"k{i}" for i in range(40)]
    low = [k for k in keys if hashed(k) < 2**127][:2]
    high = [k for k in keys if hashed(k) >= 2**127][:2]
    agg = RecordAggregator()
    for key in (low[0], high[0], low[1], high[1]):
        agg.add_user_record(key, key.encode())
    agg.add_user_record(high[0], b"pinned-low", explicit_hash_key=str(5))  # its explicit hash key rules
    blob = agg.clear_and_get().get_contents()[2]
    lower_half = (0, 2**127 - 1)
    runs = user_record_runs([record("9", blob, key="container"), record("10", b"plain", key=high[0])], None, 100,
                            lower_half)
    out = [(base64.b64decode(d), k, s, sub) for run in runs for d, k, s, _, sub in run]
    assert out == [(low[0].encode(), low[0], "9", 0), (low[1].encode(), low[1], "9", 2),
                   (b"pinned-low", high[0], "9", 4), (b"plain", high[0], "10", 0)]
    everything = [u for run in user_record_runs([record("9", blob)], None, 100) for u in run]
    assert len(everything) == 5

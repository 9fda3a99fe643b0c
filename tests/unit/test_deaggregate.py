"""KPL de-aggregation with records built by aws_kinesis_agg's own aggregator."""

from __future__ import annotations

import base64
from datetime import datetime, timezone

from aws_kinesis_agg.aggregator import RecordAggregator

from kcl_mp.retrieval.deaggregate import user_records
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

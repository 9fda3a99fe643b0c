"""The landing sink's pure parts: the file it builds (name, columns, ``kclmp.*`` metadata), the
shard-end marker, where a processor starts, and the stream's name."""

from __future__ import annotations

from datetime import datetime, timezone

from kcl_mp.spark.layout import START, landed, parse_name
from kcl_mp.spark.sink import initial_position, landing_file, stream_name

WRITTEN = datetime(2026, 11, 25, tzinfo=timezone.utc)


def test_a_file_names_its_range_and_records_where_it_continues_from():
    rows = [("100", 0, "k", 1, b"a"), ("100", 1, "k", 1, b"b"), ("107", 0, "j", 2, b"c")]
    relative, table = landing_file("orders", "shardId-000000000001", rows, (99, 0), (90, 0), False, WRITTEN, "w1", 3)
    stream, shard, name = relative.split("/")
    assert (stream, shard) == ("orders", "shardId-000000000001")
    assert parse_name(name).first == (100, 0) and parse_name(name).last == (107, 0)
    file = landed(name, table.schema.metadata, table.num_rows)
    assert (file.after, file.checkpointed, file.rows, file.ended) == ((99, 0), (90, 0), 3, False)
    assert table.column("stream").to_pylist() == ["orders"] * 3
    assert table.column("ingestTime").to_pylist()[0] == WRITTEN


def test_the_shard_end_with_nothing_left_is_an_empty_file_at_the_last_position():
    relative, table = landing_file("orders", "shardId-000000000001", [], (107, 0), (107, 0), True, WRITTEN, "w1", 4)
    file = landed(relative.rpartition("/")[2], table.schema.metadata, table.num_rows)
    assert (file.first, file.last, file.after, file.rows, file.ended) == ((107, 0), (107, 0), (107, 0), 0, True)


def test_a_processor_starts_at_its_checkpoint_or_the_shard_start():
    assert initial_position("49590338271490256608559692538361571095921575989136588898", 3) == \
        (49590338271490256608559692538361571095921575989136588898, 3)
    assert initial_position("TRIM_HORIZON", None) == START
    assert initial_position("LATEST", 0) == START


def test_the_stream_name_from_the_option_then_what_kcl_mp_sets():
    arn = "arn:aws:kinesis:us-east-1:123456789012:stream/orders"
    assert stream_name("clicks", {"KCL_STREAM_NAME": "orders"}) == "clicks"
    assert stream_name(None, {"KCL_STREAM_NAME": "orders", "KCL_STREAM_ARN": arn}) == "orders"
    assert stream_name(None, {"KCL_STREAM_ARN": arn}) == "orders"
    assert stream_name(None, {}) is None

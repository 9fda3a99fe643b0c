"""``kclmp_kinesis``'s options, parsed once: what each becomes, and errors that name the option."""

from __future__ import annotations

import pytest

from kcl_mp.spark.kinesis_options import Initial, Options


def parse(**options):
    return Options.parse({"streamName": "orders", "region": "eu-west-1", **options})


def test_defaults_and_databricks_names():
    o = parse(endpointUrl="http://127.0.0.1:1", roleArn="arn:aws:iam::1:role/r", maxRecordsPerFetch="500",
              maxFetchDuration="1500ms", shardsPerTask="2", maxRecordsPerTrigger="9000", maxFetchRate="1.5",
              metadataPath="s3://b/meta", initialPosition="earliest")
    assert o.streams == ("orders",) and o.connection.region == "eu-west-1" and o.connection.role_arn.endswith("/r")
    assert (o.read.records_per_fetch, o.read.fetch_duration_s, o.read.fetch_rate_bytes) == (500, 1.5, 1.5 * 2**20)
    assert (o.shards_per_task, o.max_rows, o.metadata, o.initial) == (2, 9000, "s3://b/meta", Initial("TRIM_HORIZON"))
    plain = parse()
    assert (plain.initial, plain.read.records_per_fetch, plain.read.fetch_duration_s, plain.shards_per_task,
            plain.max_rows, plain.available_now) == (Initial("LATEST"), 10_000, 10.0, 5, None, False)


def test_enhanced_fan_out():
    o = parse(consumerMode="EFO", consumerName="analytics")
    assert (o.fan_out, o.consumer_name, o.consumer_arn) == (True, "analytics", None)
    assert parse().fan_out is False


def test_several_streams_by_name_and_arn():
    arn = "arn:aws:kinesis:us-east-1:123456789012:stream/clicks"
    assert parse(streamName="a, b", streamArn=arn).streams == ("a", "b", arn)


@pytest.mark.parametrize("value, expected", [
    ('{"at_timestamp": "2026-11-26T10:00:00Z"}', Initial("AT_TIMESTAMP", ts=1795687200000)),
    ('{"at_timestamp": 1795687200000}', Initial("AT_TIMESTAMP", ts=1795687200000)),
    ('{"at_sequence_number": {"shardId-000000000001": "4962"}}',
     Initial("AT_SEQUENCE_NUMBER", sequence_numbers=(("shardId-000000000001", "4962"),))),
    ("TRIM_HORIZON", Initial("TRIM_HORIZON")), ("Latest", Initial("LATEST")),
])
def test_initial_positions(value, expected):
    assert parse(initialPosition=value).initial == expected


@pytest.mark.parametrize("options, names", [
    ({"streamName": ""}, "streamName"),
    ({"streamArn": "clicks"}, "streamArn"),
    ({"initialPosition": "yesterday"}, "initialPosition"),
    ({"initialPosition": '{"at_timestamp": "06/25/2020 10:23:45 PDT", "format": "MM/dd/yyyy"}'}, "initialPosition"),
    ({"initialPosition": '{"at_timestamp": "last week"}'}, "initialPosition"),
    ({"maxRecordsPerTrigger": "0"}, "maxRecordsPerTrigger"),
    ({"maxRecordsPerFetch": "20000"}, "maxRecordsPerFetch"),
    ({"maxFetchDuration": "soon"}, "maxFetchDuration"),
    ({"maxFetchRate": "-1"}, "maxFetchRate"),
    ({"shardsPerTask": "two"}, "shardsPerTask"),
    ({"consumerMode": "push"}, "consumerMode"),
    ({"consumerArn": "arn:aws:kinesis:us-east-1:1:stream/orders/consumer/c:1"}, "consumerArn"),
    ({"consumerMode": "efo", "streamName": "a,b", "consumerArn": "arn:c"}, "consumerArn"),
    ({"availableNow": "yes"}, "availableNow"),
])
def test_errors_name_the_option(options, names):
    with pytest.raises(ValueError, match=names):
        parse(**options)

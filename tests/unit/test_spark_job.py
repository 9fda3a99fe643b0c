"""``python -m kcl_mp.spark.job``'s arguments: the landing mode as it was, the direct mode
(``--stream``) and its source options, and the errors argparse reports for what does not fit."""

from __future__ import annotations

import pytest

from kcl_mp.spark.job import metadata_path, parse

COMMON = ["--output", "/tmp/t", "--checkpoint", "/tmp/c", "--processing-time", "5 seconds"]
DIRECT = ["--stream", "orders", "--metadata", "/tmp/m", *COMMON]


def fails(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_:
        parse(argv)
    assert exit_.value.code == 2
    return capsys.readouterr().err


def test_the_landing_mode_parses_as_before():
    args = parse(["--landing", "/tmp/l", *COMMON, "--max-files-per-trigger", "20"])
    assert (args.landing, args.stream, args.max_files_per_trigger, args.clean_source) == ("/tmp/l", None, 20, "off")
    assert args.outputs == [("parquet", "/tmp/t")]
    assert not hasattr(args, "source_options")


def test_the_direct_mode_makes_the_source_options():
    args = parse(["--stream", "orders,payments", "--stream", "refunds", "--metadata", "s3://b/meta",
                  "--endpoint-url", "http://127.0.0.1:4567", "--region", "eu-west-1",
                  "--initial-position", "TRIM_HORIZON", "--max-records-per-trigger", "10000",
                  "--source-option", "shardsPerTask=2", "--source-option", "maxFetchDuration=1.5",
                  "--s3-endpoint", "http://127.0.0.1:5000", "--output", "parquet=/t", "--output", "delta=/d",
                  "--checkpoint", "/c", "--available-now"])
    assert args.source_options == {
        "streamName": "orders,payments,refunds", "endpointUrl": "http://127.0.0.1:4567", "region": "eu-west-1",
        "initialPosition": "trim_horizon", "maxRecordsPerTrigger": "10000", "s3Endpoint": "http://127.0.0.1:5000",
        "availableNow": "true", "shardsPerTask": "2", "maxFetchDuration": "1.5"}
    assert [metadata_path(args.metadata, fmt) for fmt, _ in args.outputs] == ["s3://b/meta/parquet", "s3://b/meta/delta"]


def test_only_what_was_given_is_passed():
    assert parse(DIRECT).source_options == {"streamName": "orders"}


def test_a_stream_arn():
    arn = "arn:aws:kinesis:eu-west-1:123456789012:stream/orders"
    assert parse(["--stream", arn, "--metadata", "/m", *COMMON]).source_options == {"streamArn": arn}


@pytest.mark.parametrize("position, passed", [
    ("latest", "latest"), ("Earliest", "earliest"),
    ('{"at_timestamp": "2026-11-02T10:00:00Z"}', '{"at_timestamp":"2026-11-02T10:00:00Z"}'),
    ('{"at_timestamp": 1764000000000}', '{"at_timestamp":1764000000000}'),
    ('{"at_sequence_number": {"shardId-000000000000": "4963"}}',
     '{"at_sequence_number":{"shardId-000000000000":"4963"}}'),
])
def test_initial_positions(position, passed):
    assert parse([*DIRECT, "--initial-position", position]).source_options["initialPosition"] == passed


@pytest.mark.parametrize("argv, said", [
    ([*COMMON], "one of the arguments --landing --stream is required"),
    (["--landing", "/l", "--stream", "s", *COMMON], "not allowed with argument"),
    (["--stream", "orders", *COMMON], "--stream needs --metadata PATH"),
    (["--stream", " , ", "--metadata", "/m", *COMMON], "--stream names no stream"),
    (["--stream", "a,b", "--stream", "a", "--metadata", "/m", *COMMON], "a stream named twice"),
    (["--stream", "a,arn:aws:kinesis:eu-west-1:1:stream/b", "--metadata", "/m", *COMMON], "one stream ARN"),
    ([*DIRECT, "--initial-position", "now"], "--initial-position: latest, trim_horizon, earliest, or JSON"),
    ([*DIRECT, "--initial-position", '{"at_timestamp": true}'], "not '{\"at_timestamp\": true}'"),
    ([*DIRECT, "--initial-position", '{"at_sequence_number": {"shardId-0": "x"}}'], "--initial-position"),
    ([*DIRECT, "--initial-position", '{"latest": 1, "at_timestamp": 2}'], "--initial-position"),
    ([*DIRECT, "--max-records-per-trigger", "0"], "--max-records-per-trigger takes a number >= 1"),
    ([*DIRECT, "--source-option", "shardsPerTask"], "--source-option takes KEY=VALUE, not 'shardsPerTask'"),
    ([*DIRECT, "--source-option", "=5"], "--source-option takes KEY=VALUE"),
    ([*DIRECT, "--source-option", "MetadataPath=/x"], "--source-option MetadataPath: set it with --metadata"),
    ([*DIRECT, "--source-option", "streamName=x"], "set it with --stream"),
    ([*DIRECT, "--source-option", "a=1", "--source-option", "A=2"], "--source-option A given twice"),
    ([*DIRECT, "--max-files-per-trigger", "3", "--clean-source", "off"],
     "--max-files-per-trigger, --clean-source: options of --landing, not of --stream"),
    (["--landing", "/l", *COMMON, "--metadata", "/m", "--source-option", "a=1"],
     "--metadata, --source-option: options of --stream, not of --landing"),
    (["--landing", "/l", *COMMON, "--region", "eu-west-1"], "--region: options of --stream"),
])
def test_what_does_not_fit_is_an_argparse_error(argv, said, capsys):
    err = fails(argv, capsys)
    assert said in err, err
    assert err.startswith("usage: python -m kcl_mp.spark.job")

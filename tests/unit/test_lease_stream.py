"""The stream a lease reads (``retrieval.streams.lease_stream``): its processor, its initial
position, and what the processor is told of it, in the environment and in ``initialize``."""

from __future__ import annotations

import orjson

from kcl_mp.config import InitialPosition, load_config
from kcl_mp.multilang.protocol import Conversation
from kcl_mp.retrieval.streams import LeaseStream, lease_stream
from kcl_mp.sequence import ExtendedSequenceNumber

BASE = ("executableName = python3 app.py\napplicationName = app\nAwsCredentialsProvider = DefaultCredentialsProvider\n"
        "regionName = us-east-1\n")


def test_one_stream_keeps_the_java_daemons_initialize(tmp_path) -> None:
    (tmp_path / "a.properties").write_text(BASE + "streamName = orders\n")
    stream = lease_stream(load_config(tmp_path / "a.properties"), "shardId-000000000001")
    assert stream == LeaseStream("shardId-000000000001", "orders", None, None, ("python3", "app.py"),
                                 InitialPosition("LATEST"))
    assert stream.env == {"KCL_STREAM_NAME": "orders"} and stream.initialize_keys == {}
    line = Conversation(stream.shard_id, stream.initialize_keys).initialize(ExtendedSequenceNumber("LATEST"))
    assert line == b'{"action":"initialize","shardId":"shardId-000000000001","sequenceNumber":"LATEST",' \
                   b'"subSequenceNumber":0}\n'


def test_a_multi_stream_lease_reads_its_own_stream_with_its_own_processor(tmp_path) -> None:
    (tmp_path / "a.properties").write_text(BASE + "streamNames = orders, payments\n"
                                           "stream.payments.executableName = node payments.js\n"
                                           "stream.payments.initialPositionInStream = TRIM_HORIZON\n")
    config = load_config(tmp_path / "a.properties")
    stream = lease_stream(config, "210987654321:payments:1700000000000:shardId-000000000003")
    arn = "arn:aws:kinesis:us-east-1:210987654321:stream/payments"
    assert stream == LeaseStream("shardId-000000000003", "payments", arn, "210987654321:payments:1700000000000",
                                 ("node", "payments.js"), InitialPosition("TRIM_HORIZON"))
    assert stream.env == {"KCL_STREAM_NAME": "payments", "KCL_STREAM_ARN": arn,
                          "KCL_STREAM_IDENTIFIER": "210987654321:payments:1700000000000"}
    line = Conversation(stream.shard_id, stream.initialize_keys).initialize(ExtendedSequenceNumber("TRIM_HORIZON"))
    assert orjson.loads(line) == {"action": "initialize", "shardId": "shardId-000000000003",
                                  "sequenceNumber": "TRIM_HORIZON", "subSequenceNumber": 0, "streamName": "payments",
                                  "streamArn": arn, "streamIdentifier": "210987654321:payments:1700000000000"}
    orders = lease_stream(config, "123456789012:orders:5:shardId-000000000000")
    assert (orders.command, orders.initial_position.kind) == (("python3", "app.py"), "LATEST")


def test_a_stream_listed_by_arn_is_read_through_its_arn(tmp_path) -> None:
    """It may be another account's: Kinesis then needs the ARN in every call."""
    arn = "arn:aws:kinesis:us-east-1:210987654321:stream/payments"
    (tmp_path / "a.properties").write_text(BASE + f"streamArns = {arn}\n")
    stream = lease_stream(load_config(tmp_path / "a.properties"), "210987654321:payments:7:shardId-000000000003")
    assert (stream.arn, stream.by_arn) == (arn, True)

"""Start-up failures end the process: the real CLI, its metrics process enabled (the default
metricsLevel and a Prometheus port), in its own process group.

Each error that can stop a start-up (DynamoDB unreachable or denied, Kinesis unreachable,
no such stream, no such consumer or one of another stream) gives exit status 1 within a
bound, one line naming what failed, and no process left behind; a SIGTERM or SIGINT while a
start-up call is retrying ends it promptly with exit status 0.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from kcl_mp.embedded import ensure_stream, free_port

from ..support.aws_stub import AwsStub
from ..support.harness import RECORDER, Daemon, base_properties, wait_until, write_properties

pytestmark = [pytest.mark.integration, pytest.mark.timing]

EXIT_BOUND_S = 30.0  # from the command to the exit status: Python's start, botocore's 4 attempts, the metrics process
SIGNAL_BOUND_S = 8.0  # from the signal to the exit status (the unanswered call alone would take 20 s)


def _start(tmp_path: Path, moto_url: str, stream: str, metrics: bool = True, **keys: object) -> Daemon:
    props = base_properties(moto_url, stream, stream + "-app", f"{sys.executable} {RECORDER}", **keys)
    if metrics:
        del props["metricsLevel"]  # the default: DETAILED, so the metrics process publishes too
        props.update({"kclmp.metricsPort": free_port(), "kclmp.metricsAddress": "127.0.0.1",
                      "cloudWatchClient.endpointOverride": moto_url})
    return Daemon(write_properties(tmp_path / "app.properties", **props), tmp_path / "run.log")


def _finish(daemon: Daemon, bound_s: float, since: float) -> tuple[int, float]:
    """The exit status within the bound, and how long it took; then nothing of it may remain."""
    try:
        code = daemon.wait(bound_s)
    except Exception as exc:
        daemon.kill()
        raise AssertionError(f"still running after {bound_s:.0f} s:\n{daemon.output()[-3000:]}") from exc
    took = time.monotonic() - since
    text = daemon.output()
    wait_until(lambda: not _group_alive(daemon.process.pid), 10, "every process of the group to end", 0.1)
    assert "Traceback" not in text, text
    return code, took


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _fails(daemon: Daemon, started: float, *needles: str, metrics: bool = True) -> str:
    code, took = _finish(daemon, EXIT_BOUND_S, started)
    text = daemon.output()
    assert code == 1, f"exit status {code}:\n{text[-3000:]}"
    assert ("metrics process started" in text) is metrics, text
    (line,) = [line for line in text.splitlines() if line.startswith("kcl-mp: ")]
    for needle in needles:
        assert needle in line, line
    print(f"exit 1 after {took:.1f} s: {line}")
    return line


@pytest.mark.parametrize("metrics", [True, False], ids=["metrics", "no-metrics"])
def test_dynamodb_unreachable(tmp_path, moto_url, kinesis, unique_name, metrics):
    ensure_stream(kinesis, unique_name, 1)
    port = free_port()  # bound and closed: nothing listens there
    started = time.monotonic()
    daemon = _start(tmp_path, moto_url, unique_name, metrics, dynamoDBEndpoint=f"http://127.0.0.1:{port}")
    _fails(daemon, started, f"lease table {unique_name}-app", f"127.0.0.1:{port}", "EndpointConnectionError",
           metrics=metrics)


def test_dynamodb_access_denied(tmp_path, moto_url, kinesis, unique_name):
    ensure_stream(kinesis, unique_name, 1)
    stub = AwsStub(lambda n, target: "AccessDeniedException")
    try:
        started = time.monotonic()
        daemon = _start(tmp_path, moto_url, unique_name, dynamoDBEndpoint=stub.url)
        _fails(daemon, started, f"lease table {unique_name}-app", "AccessDeniedException", "dynamodb:DescribeTable")
    finally:
        stub.stop()
    assert stub.targets == ["DynamoDB_20120810.DescribeTable"], stub.targets  # a denial is not retried


def test_kinesis_unreachable(tmp_path, moto_url, dynamodb, unique_name):
    port = free_port()
    started = time.monotonic()
    daemon = _start(tmp_path, moto_url, unique_name, kinesisEndpoint=f"http://127.0.0.1:{port}")
    _fails(daemon, started, f"describing stream {unique_name}", f"127.0.0.1:{port}", "EndpointConnectionError")
    assert f"{unique_name}-app" not in dynamodb.list_tables()["TableNames"]  # checked before anything is written


def test_missing_stream(tmp_path, moto_url, dynamodb, unique_name):
    started = time.monotonic()
    daemon = _start(tmp_path, moto_url, unique_name)
    _fails(daemon, started, f"configuration error: streamName {unique_name}: no such stream", moto_url)
    assert f"{unique_name}-app" not in dynamodb.list_tables()["TableNames"]


def test_fanout_consumer_arn_of_no_consumer(tmp_path, moto_url, kinesis, unique_name):
    ensure_stream(kinesis, unique_name, 1)
    arn = f"arn:aws:kinesis:us-east-1:123456789012:stream/{unique_name}/consumer/nobody:1700000000"
    started = time.monotonic()
    daemon = _start(tmp_path, moto_url, unique_name, retrievalMode="FANOUT", **{"fanoutConfig.consumerArn": arn})
    _fails(daemon, started, f"consumerArn {arn}: no such stream consumer")


@pytest.mark.parametrize("signum, metrics", [(signal.SIGTERM, True), (signal.SIGINT, True), (signal.SIGTERM, False)],
                         ids=["SIGTERM", "SIGINT", "SIGTERM-no-metrics"])
def test_a_signal_ends_a_retrying_start_up(tmp_path, moto_url, kinesis, unique_name, signum, metrics):
    """DynamoDB throttles the first DescribeTable and never answers the retry (botocore would
    wait 20 s for it, three more times): the signal ends the start-up at once."""
    ensure_stream(kinesis, unique_name, 1)
    stub = AwsStub(lambda n, target: "ThrottlingException" if n == 0 else None)
    try:
        daemon = _start(tmp_path, moto_url, unique_name, metrics, dynamoDBEndpoint=stub.url)
        wait_until(lambda: len(stub.targets) >= 2, 60, "the retry of DescribeTable", 0.1)
        time.sleep(0.5)  # well inside the unanswered request
        signalled = time.monotonic()
        daemon.signal(signum)
        code, took = _finish(daemon, SIGNAL_BOUND_S + 10, signalled)
    finally:
        stub.stop()
    text = daemon.output()
    assert code == 0, f"exit status {code}:\n{text[-3000:]}"
    assert ("metrics process started" in text) is metrics, text
    assert f"{signal.Signals(signum).name} received during start-up: stopped before processing any lease" in text
    assert took < SIGNAL_BOUND_S, f"{took:.1f} s from the signal to the exit"
    print(f"{signal.Signals(signum).name} during a retrying start-up: exit 0 after {took:.2f} s")


def test_fanout_consumer_arn_of_another_stream(tmp_path, moto_url, kinesis, unique_name):
    """Its shards have the same ids (shardId-000000000000...): it would read the other stream."""
    ensure_stream(kinesis, unique_name, 1)
    other = unique_name + "-other"
    ensure_stream(kinesis, other, 1)
    other_arn = kinesis.describe_stream_summary(StreamName=other)["StreamDescriptionSummary"]["StreamARN"]
    arn = kinesis.register_stream_consumer(StreamARN=other_arn, ConsumerName="elsewhere")["Consumer"]["ConsumerARN"]
    started = time.monotonic()
    daemon = _start(tmp_path, moto_url, unique_name, retrievalMode="FANOUT", **{"fanoutConfig.consumerArn": arn})
    _fails(daemon, started, f"consumerArn {arn}: a consumer of {other_arn}, not of the stream")

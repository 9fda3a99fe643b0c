"""``kcl-mp check-config`` (cli/check_config.py), the real command against a moto server: a
good file passes; a missing processor, a processor that fails the protocol, an unreachable
DynamoDB, a stream that does not exist and an IAM policy missing one action (a loopback stub
answering AccessDenied for it, proxying the rest to moto) each fail, named with the key,
the call and the fix, exit 1, and nothing is written to the lease table."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kcl_mp.aws.clients import client as aws_client
from kcl_mp.config import load_config
from kcl_mp.embedded import ensure_stream, free_port
from kcl_mp.leases.table import LeaseTable

from ..support.aws_stub import PASS, AwsStub
from ..support.harness import RECORDER, ROOT, base_properties, write_properties

pytestmark = pytest.mark.integration


def check_config(props) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kcl_mp", "check-config", "-p", str(props)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


@pytest.fixture
def app(tmp_path, moto_url, kinesis, dynamodb, unique_name):
    """A stream and an empty lease table, and ``write(**keys)``: a properties file for them."""
    ensure_stream(kinesis, unique_name, 2)

    def write(**keys: object):
        base = base_properties(moto_url, unique_name, unique_name, f"{sys.executable} {RECORDER}",
                               metricsLevel="SUMMARY", **{"cloudWatchClient.endpointOverride": moto_url})
        return write_properties(tmp_path / "app.properties", **{**base, **keys})

    config = load_config(str(write()))
    LeaseTable(aws_client("dynamodb", config.dynamodb), config.lease.table_name).ensure_table()
    yield write
    assert dynamodb.scan(TableName=unique_name, ConsistentRead=True)["Items"] == []  # nothing written


def test_a_good_file_passes(app):
    run = check_config(app())
    assert run.returncode == 0, run.stdout + run.stderr
    for call in ("read the properties", "conformance: lease lost at once", "kinesis:DescribeStreamSummary",
                 "kinesis:ListShards", "kinesis:GetShardIterator", "dynamodb:DescribeTable", "dynamodb:Scan",
                 "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "cloudwatch:PutMetricData"):
        assert any(line.strip().startswith("ok") and call in line for line in run.stdout.splitlines()), (
            call, run.stdout)
    assert "0 failed: this host may join the fleet" in run.stdout


def failure(run: subprocess.CompletedProcess, call: str) -> tuple[str, str]:
    """The FAIL line of ``call`` and its fix line."""
    lines = run.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("FAIL") and call in line)
    return lines[at], lines[at + 1] if at + 1 < len(lines) else ""


@pytest.mark.parametrize("keys, call, named, fix", [
    ({"executableName": "./no-such-processor.py --flag"}, "start the processor",
     ("executableName", "no-such-processor.py"), "install it, or name it by its absolute path"),
    ({"streamName": "no-such-stream"}, "kinesis:DescribeStreamSummary",
     ("streamName", "ResourceNotFoundException"), "create the stream, or correct streamName"),
], ids=["a missing processor", "a stream that does not exist"])
def test_a_named_failure(app, keys, call, named, fix):
    run = check_config(app(**keys))
    assert run.returncode == 1, run.stdout
    line, fix_line = failure(run, call)
    assert all(word in line for word in named) and fix in fix_line, run.stdout


def test_a_processor_failing_the_protocol(app, tmp_path):
    broken = tmp_path / "garbage.py"
    broken.write_text("import sys\nsys.stdout.write('this is not a multilang message\\n')\nsys.exit(3)\n")
    run = check_config(app(executableName=f"{sys.executable} {broken}"))
    assert run.returncode == 1, run.stdout
    line, fix = failure(run, "conformance: lease lost at once")
    assert "executableName" in line and f"kcl-mp check-processor -- {sys.executable} {broken}" in fix, run.stdout


def test_unreachable_dynamodb(app):
    closed = f"http://127.0.0.1:{free_port()}"
    run = check_config(app(dynamoDBEndpoint=closed))
    assert run.returncode == 1, run.stdout
    line, fix = failure(run, "dynamodb:DescribeTable")
    assert f"check that {closed} is reachable" in fix, run.stdout
    assert "kinesis:ListShards" in run.stdout  # Kinesis was checked all the same


def test_an_iam_policy_missing_one_action(app, moto_url):
    stub = AwsStub(lambda n, target: "AccessDeniedException" if target.endswith(".UpdateItem") else PASS, moto_url)
    try:
        run = check_config(app(dynamoDBEndpoint=stub.url))
    finally:
        stub.stop()
    assert run.returncode == 1, run.stdout
    line, fix = failure(run, "dynamodb:UpdateItem")
    assert "AccessDenied" in line and "allow dynamodb:UpdateItem" in fix, run.stdout
    failed = [line for line in run.stdout.splitlines() if line.strip().startswith("FAIL")]
    assert failed and all("dynamodb:UpdateItem" in line for line in failed), run.stdout  # that action, and only it


@pytest.mark.parametrize("listed_in", ["streamNames", "streamListFile"])
def test_each_stream_of_a_multi_stream_file_is_checked(app, unique_name, listed_in):
    props = app()
    if listed_in == "streamNames":
        streams = f"streamNames = {unique_name}, no-such-stream\n"
    else:  # named after the file, which a check names as the place to fix
        (props.parent / "streams.txt").write_text(f"# the application's streams\n{unique_name}\nno-such-stream\n")
        listed_in = f"streamListFile {props.parent / 'streams.txt'}"
        streams = "streamListFile = streams.txt\n"
    props.write_text(props.read_text().replace(f"streamName = {unique_name}\n", streams))
    run = check_config(props)
    assert run.returncode == 1, run.stdout
    line, fix = failure(run, "kinesis:DescribeStreamSummary")
    assert f"{listed_in} (no-such-stream)" in line and "create the stream" in fix, run.stdout
    assert any(line.strip().startswith("ok") and f"{listed_in} ({unique_name})" in line and "kinesis:ListShards" in line
               for line in run.stdout.splitlines()), run.stdout

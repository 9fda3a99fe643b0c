"""``kcl-mp check-config``: the pre-flight of a host before it joins a live fleet.

    kcl-mp check-config --properties app.properties [--set KEY=VALUE] [--endpoint URL]

Reads the properties file as the daemon does (``load_config``: every error and warning it
would give), starts the processor once through the conformance kit's quickest scenario
(``check_processor``: initialize, a lease lost, exit), then makes every AWS call the
configuration needs, writing nothing:

    kinesis   DescribeStreamSummary, ListShards, GetShardIterator (no record read);
              FANOUT: DescribeStreamConsumer (the consumer registration is not tried)
    dynamodb  on the lease table, then the KCL 3.x coordinator-state and worker-metrics tables:
              DescribeTable (a missing table is created at start: CreateTable is then needed),
              Scan (one item); PutItem, UpdateItem, DeleteItem on a key no row has, each
              conditioned on that item existing: DynamoDB checks the permission first, then
              refuses the write (ConditionalCheckFailed is the good answer), so nothing is written
    cloudwatch PutMetricData with no datum, when metricsLevel is not NONE: the permission is
              checked before the empty request is refused, so no metric is written

Each finding names the properties key it concerns, the call, and the fix. Exit status: 0
when nothing failed (warnings included), 1 when something did (``EXIT_CONFIG``), 2 for a
command-line error. ``run_checks`` does the I/O; ``verdict`` and ``render`` are pure.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kcl_mp.aws.clients import ClientLimits
from kcl_mp.aws.clients import client as aws_client
from kcl_mp.aws.errors import AWS_ERRORS, error_code
from kcl_mp.cli import check_processor
from kcl_mp.config import Config, load_config
from kcl_mp.config.load import parse_overrides
from kcl_mp.config.settings import StreamKind, StreamSettings
from kcl_mp.errors import EXIT_CONFIG, EXIT_OK, ConfigError, KclMpError, ProcessorStartError
from kcl_mp.multilang.command import resolve_command

# A pre-flight answers in seconds: one retry, short timeouts (an unreachable endpoint fails fast).
LIMITS = ClientLimits(connect_timeout_s=3, read_timeout_s=10, total_attempts=2, max_pool_connections=2)
QUICKEST = "lease lost at once"  # the conformance kit's shortest scenario: initialize, leaseLost, exit
PROBE_KEY = "kcl-mp-check-config-probe"  # a lease key no shard has: the conditional writes find no item
DENIED = ("AccessDeniedException", "AccessDenied", "UnauthorizedOperation", "UnrecognizedClientException",
          "InvalidSignatureException", "ExpiredTokenException", "MissingAuthenticationTokenException")


@dataclass(frozen=True)
class Finding:
    """One check: ``ok`` or not (``warn`` for what will work differently than expected)."""

    status: str  # "ok", "warn", "FAIL"
    key: str  # the properties key it concerns
    call: str  # the call or step, e.g. "dynamodb:UpdateItem"
    detail: str
    fix: str = ""


def verdict(findings: Sequence[Finding]) -> int:
    """The exit status: 1 when a check failed.

    >>> verdict([Finding("ok", "streamName", "kinesis:ListShards", "4 shards"), Finding("warn", "k", "c", "d")])
    0
    """
    return EXIT_CONFIG if any(f.status == "FAIL" for f in findings) else EXIT_OK


def render(source: str, findings: Sequence[Finding]) -> str:
    lines = [f"check-config {source}"]
    for f in findings:
        lines.append(f"  {f.status:<4}  {f.call:<34} {f.key}: {f.detail}")
        if f.fix:
            lines.append(f"        fix: {f.fix}")
    failed = sum(f.status == "FAIL" for f in findings)
    warned = sum(f.status == "warn" for f in findings)
    lines.append(f"{len(findings) - failed - warned} ok, {warned} warned, {failed} failed"
                 + ("" if failed else ": this host may join the fleet"))
    return "\n".join(lines)


def check_processor_runs(config: Config) -> Finding:
    """The processor starts from this directory and answers the protocol (the kit's quickest scenario)."""
    key = "executableName"
    try:
        resolve_command(config.processor.command, os.getcwd(), os.environ)
    except ProcessorStartError as exc:
        return Finding("FAIL", key, "start the processor", str(exc),
                       "install it, or name it by its absolute path (the daemon runs it from its working "
                       f"directory, {os.getcwd()}, with its PATH)")
    outcome = check_processor.check_processor(config.processor.command, only=QUICKEST,
                                              timeout_s=config.processor.timeout_s or 10.0)[0]
    command = " ".join(config.processor.command)
    if outcome.verdict == "FAIL":
        return Finding("FAIL", key, f"conformance: {QUICKEST}", outcome.detail.splitlines()[0],
                       f"kcl-mp check-processor -- {command}  shows every scenario and the lines at fault")
    return Finding("ok" if outcome.verdict == "PASS" else "warn", key, f"conformance: {QUICKEST}",
                   f"{command} answered the protocol ({outcome.seconds:.2f} s)")


def failed(key: str, call: str, endpoint: str, exc: BaseException, fix_missing: str = "") -> Finding:
    """The finding for a call that failed: what AWS said, and the fix its error code points to."""
    code = error_code(exc) or ""
    if code.startswith("AccessDenied") or code == "UnauthorizedOperation":
        fix = f"allow {call} in this host's IAM policy (deploy/iam/ has the policies per mode)"
    elif code in DENIED:
        fix = "check the credentials (AwsCredentialsProvider, the environment, the instance role)"
    elif code == "ResourceNotFoundException":
        fix = fix_missing
    elif not code:
        fix = f"check that {endpoint} is reachable from this host (its address, a proxy, a security group)"
    else:
        fix = ""
    return Finding("FAIL", key, call, str(exc).splitlines()[0][:300], fix)


def _aws(findings: list[Finding], key: str, call: str, endpoint: str, ok: Callable[[Any], str],
         action: Callable[[], Any], expected: str | None = None, fix_missing: str = "", on: str = "") -> Any:
    """Make one call; add its finding. ``expected``: the error code that means the call is
    allowed (a conditional write that found no item) on ``on``. The answer, or None when it failed."""
    try:
        answer = action()
    except AWS_ERRORS as exc:
        if expected is not None and error_code(exc) == expected:
            findings.append(Finding("ok", key, call, f"allowed on {on} (checked without writing)"))
            return True
        findings.append(failed(key, call, endpoint, exc, fix_missing))
        return None
    findings.append(Finding("ok", key, call, ok(answer)))
    return answer


def check_stream(config: Config, findings: list[Finding]) -> None:
    """The configured stream, Kinesis or DynamoDB Streams (``Config.stream_kind``)."""
    if config.stream_kind is StreamKind.DYNAMODB:
        check_dynamodb_stream(config, findings)
    else:
        check_kinesis(config, findings)


def check_dynamodb_stream(config: Config, findings: list[Finding]) -> None:
    """The stream (each stream of a multi-stream application) described and an iterator got."""
    dynamodbstreams = aws_client("dynamodbstreams", config.kinesis, limits=LIMITS)
    if not config.streams:
        assert config.stream_arn is not None  # load_config: a DynamoDB stream is named by its ARN
        check_dynamodb_arn(dynamodbstreams, findings, "streamArn", config.stream_arn)
    listed = f"streamListFile {config.stream_list.file}" if config.stream_list.file else "streamArns"
    for each in config.streams:
        assert each.arn is not None
        check_dynamodb_arn(dynamodbstreams, findings, f"{listed} ({each.key_name})", each.arn)


def check_dynamodb_arn(dynamodbstreams: Any, findings: list[Finding], key: str, arn: str) -> None:
    endpoint = dynamodbstreams.meta.endpoint_url
    found = _aws(findings, key, "dynamodb:DescribeStream", endpoint,
                 lambda d: f"the stream of table {d['StreamDescription']['TableName']} is "
                           f"{d['StreamDescription']['StreamStatus']}",
                 lambda: dynamodbstreams.describe_stream(StreamArn=arn, Limit=1),
                 fix_missing=f"enable the table's stream and use its LatestStreamArn (region "
                             f"{dynamodbstreams.meta.region_name}, endpoint {endpoint})")
    if found and found["StreamDescription"]["Shards"]:
        _aws(findings, key, "dynamodb:GetShardIterator", endpoint, lambda _: "allowed (no record read)",
             lambda: dynamodbstreams.get_shard_iterator(
                 StreamArn=arn, ShardId=found["StreamDescription"]["Shards"][0]["ShardId"], ShardIteratorType="LATEST"))


def check_kinesis(config: Config, findings: list[Finding]) -> None:
    kinesis = aws_client("kinesis", config.kinesis, limits=LIMITS)
    if config.streams:  # a multi-stream application: each stream (and with fan-out its consumer)
        listed = (f"streamListFile {config.stream_list.file}" if config.stream_list.file else
                  "streamArns" if any(stream.arn for stream in config.streams) else "streamNames")
        for each in config.streams:
            found = check_kinesis_stream(kinesis, findings, f"{listed} ({each.name})",
                                         {"StreamARN": each.arn} if each.arn else {"StreamName": each.name})
            if found is not None and config.retrieval.mode == "FANOUT":
                check_consumer(config, kinesis, findings, found["StreamDescriptionSummary"]["StreamARN"], each)
        return
    key = "streamArn" if config.stream_arn else "streamName"
    stream = {"StreamARN": config.stream_arn} if config.stream_arn else {"StreamName": config.stream_name}
    summary = check_kinesis_stream(kinesis, findings, key, stream)
    if summary is not None and config.retrieval.mode == "FANOUT":
        check_consumer(config, kinesis, findings, summary["StreamDescriptionSummary"]["StreamARN"])


def check_kinesis_stream(kinesis: Any, findings: list[Finding], key: str, stream: dict[str, str]
                         ) -> dict[str, Any] | None:
    """One Kinesis stream: described, listed, readable; its summary (None if it cannot be described)."""
    endpoint = kinesis.meta.endpoint_url
    summary = _aws(findings, key, "kinesis:DescribeStreamSummary", endpoint,
                   lambda s: f"stream {s['StreamDescriptionSummary']['StreamName']} is "
                             f"{s['StreamDescriptionSummary']['StreamStatus']}, "
                             f"{s['StreamDescriptionSummary']['OpenShardCount']} open shards",
                   lambda: kinesis.describe_stream_summary(**stream),
                   fix_missing=f"create the stream, or correct {key} (region {kinesis.meta.region_name}, "
                               f"endpoint {endpoint})")
    if summary is None:
        return None  # the calls below would only repeat it
    page = _aws(findings, key, "kinesis:ListShards", endpoint, lambda page: f"{len(page['Shards'])} shards listed",
                lambda: kinesis.list_shards(**stream, MaxResults=100))
    if page and page["Shards"]:
        _aws(findings, key, "kinesis:GetShardIterator", endpoint, lambda _: "allowed (no record read)",
             lambda: kinesis.get_shard_iterator(**stream, ShardId=page["Shards"][0]["ShardId"],
                                                ShardIteratorType="LATEST"))
    return summary


def check_consumer(config: Config, kinesis: Any, findings: list[Finding], stream_arn: str,
                   stream: StreamSettings | None = None) -> None:
    """Enhanced fan-out's consumer: the configured one (``stream``'s, of a multi-stream
    application), or the one the daemon registers at start."""
    endpoint = kinesis.meta.endpoint_url
    name = config.retrieval.consumer_name or config.application_name
    configured = stream.consumer_arn if stream is not None else config.retrieval.consumer_arn
    consumer = {"ConsumerARN": configured} if configured else {"StreamARN": stream_arn, "ConsumerName": name}
    key = "consumerArn" if configured else "consumerName"
    if stream is not None:  # the stream's own key, or the name registered on it
        key = f"stream.{stream.name}.consumerArn" if configured else f"consumerName ({stream.name})"
    if _aws(findings, key,
                "kinesis:DescribeStreamConsumer", endpoint,
                lambda c: f"consumer {c['ConsumerDescription']['ConsumerName']} is "
                          f"{c['ConsumerDescription']['ConsumerStatus']}",
                lambda: kinesis.describe_stream_consumer(**consumer),
                fix_missing="none yet: the daemon registers it at start (kinesis:RegisterStreamConsumer "
                            "needed), or set consumerArn") is None and not configured:
        last = findings[-1]
        if "ResourceNotFound" in last.detail:  # registered at start: a warning, not a failure
            findings[-1] = Finding("warn", last.key, last.call, last.detail, last.fix)


def check_dynamodb(config: Config, findings: list[Finding]) -> None:
    """The lease table, then the KCL 3.x coordinator-state and worker-metrics tables (every
    host reads the fleet's client version there, whatever its clientVersionConfig)."""
    dynamodb = aws_client("dynamodb", config.dynamodb, limits=LIMITS)
    app = config.application_name
    for key, table, hash_key in (
            ("tableName" if config.lease.table_name != app else "applicationName", config.lease.table_name,
             "leaseKey"),
            ("coordinatorStateTableName", config.kcl3.coordinator_state_table_name or f"{app}-CoordinatorState",
             "key"),
            ("workerMetricsTableName", config.kcl3.worker_metrics_table_name or f"{app}-WorkerMetricStats", "wid")):
        if not check_table(dynamodb, findings, key, table, hash_key):
            return  # the next tables would only repeat it


def check_table(dynamodb: Any, findings: list[Finding], key: str, table: str, hash_key: str) -> bool:
    """DescribeTable, Scan, and the three writes conditioned on an item that does not exist.
    False when DynamoDB cannot be reached or the table is not what the key says."""
    endpoint = dynamodb.meta.endpoint_url
    try:
        described = dynamodb.describe_table(TableName=table)["Table"]
    except AWS_ERRORS as exc:
        if error_code(exc) == "ResourceNotFoundException":
            findings.append(Finding("warn", key, "dynamodb:DescribeTable", f"no table {table} yet: the first host "
                                    "creates it", f"allow dynamodb:CreateTable for the first host (or create {table} "
                                    f"with {hash_key} as its string hash key)"))
            return True
        findings.append(failed(key, "dynamodb:DescribeTable", endpoint, exc))
        return False
    found = next((k["AttributeName"] for k in described.get("KeySchema", []) if k["KeyType"] == "HASH"), None)
    if found != hash_key:
        findings.append(Finding("FAIL", key, "dynamodb:DescribeTable",
                                f"table {table} has hash key {found}, not {hash_key}: not the table kcl-mp expects",
                                f"name another table in {key}"))
        return False
    findings.append(Finding("ok", key, "dynamodb:DescribeTable", f"table {table} is {described['TableStatus']}"))
    probe = {hash_key: {"S": PROBE_KEY}}
    exists = {"ConditionExpression": "attribute_exists(#k)", "ExpressionAttributeNames": {"#k": hash_key}}
    _aws(findings, key, "dynamodb:Scan", endpoint, lambda _: f"allowed on {table}",
         lambda: dynamodb.scan(TableName=table, Limit=1, ConsistentRead=True))
    for call, action in (
            ("dynamodb:PutItem", lambda: dynamodb.put_item(TableName=table, Item=probe, **exists)),
            ("dynamodb:UpdateItem", lambda: dynamodb.update_item(
                TableName=table, Key=probe, UpdateExpression="SET #p = :p",
                ExpressionAttributeValues={":p": {"S": "probe"}},
                **{**exists, "ExpressionAttributeNames": {"#k": hash_key, "#p": "kclmpProbe"}})),
            ("dynamodb:DeleteItem", lambda: dynamodb.delete_item(TableName=table, Key=probe, **exists))):
        _aws(findings, key, call, endpoint, lambda _: "allowed", action, expected="ConditionalCheckFailedException",
             on=table)
    return True


def check_cloudwatch(config: Config, findings: list[Finding]) -> None:
    if config.metrics.level == "NONE":
        findings.append(Finding("ok", "metricsLevel", "cloudwatch:PutMetricData", "NONE: CloudWatch is not used"))
        return
    cloudwatch = aws_client("cloudwatch", config.cloudwatch, limits=LIMITS)
    try:
        cloudwatch.put_metric_data(Namespace=config.application_name, MetricData=[])
    except AWS_ERRORS as exc:
        if error_code(exc) not in ("MissingParameter", "InvalidParameterValue", "ValidationError",
                                   "InvalidParameterCombination"):
            findings.append(failed("metricsLevel", "cloudwatch:PutMetricData", cloudwatch.meta.endpoint_url, exc))
            return
    findings.append(Finding("ok", "metricsLevel", "cloudwatch:PutMetricData", "allowed (checked without a metric)"))


def run_checks(path: str, overrides: dict[str, str]) -> tuple[str, list[Finding]]:
    """Every check, in the daemon's order; a configuration error ends them (nothing else can be known)."""
    try:
        config = load_config(path, overrides=overrides)
    except ConfigError as exc:
        return path, [Finding("FAIL", "(properties)", "read the properties", str(exc), "correct that key")]
    findings = [Finding("warn", "(properties)", "read the properties", warning) for warning in config.warnings]
    findings.append(Finding("ok", "(properties)", "read the properties",
                            f"application {config.application_name}, stream {config.stream_arn or config.stream_name}, "
                            f"worker {config.worker_id}"))
    findings.append(check_processor_runs(config))
    for check in (check_stream, check_dynamodb, check_cloudwatch):
        try:
            check(config, findings)
        except KclMpError as exc:  # no region, credentials that cannot be resolved
            findings.append(Finding("FAIL", "regionName / AwsCredentialsProvider", check.__name__, str(exc)))
    return config.source, findings


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(
        prog="kcl-mp check-config", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Check a host before it joins a fleet: the properties file, the processor, and AWS access "
                    "for every call the configuration needs (nothing is written). Exit 0: ready; 1: a check failed.",
        epilog="examples:\n  kcl-mp check-config -p app.properties\n"
               "  kcl-mp check-config -p app.properties --set workerId=$HOSTNAME\n"
               "  kcl-mp check-config -p examples/demo/app.properties --endpoint http://127.0.0.1:4566")
    p.add_argument("--properties", "--properties-file", "-p", dest="properties", metavar="FILE", required=True)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a key (repeatable)")
    p.add_argument("--endpoint", metavar="URL",
                   help="check against an emulator (Kinesis, DynamoDB and CloudWatch at URL, throwaway credentials)")
    args = p.parse_args(argv)
    overrides = parse_overrides(args.set)
    if args.endpoint:
        from kcl_mp.embedded import embedded_overrides

        overrides = {**embedded_overrides(args.endpoint), **overrides}
    source, findings = run_checks(args.properties, overrides)
    print(render(source, findings), flush=True)
    sys.stdout.flush()
    return verdict(findings)

"""load_config: required keys, value errors, warnings, and the Java rules of CONFIG.md."""

from __future__ import annotations

import dataclasses
import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kcl_mp.config import (
    Config,
    CredentialProvider,
    Kcl3Settings,
    LeaseSettings,
    MetricsSettings,
    ProcessorSettings,
    RetrievalSettings,
    load_config,
)
from kcl_mp.config import keys as config_keys
from kcl_mp.config.settings import DynamoDBStreamsSettings, FormerStreamsSettings, StreamKind, StreamListSettings
from kcl_mp.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
CONFIG_MD = ROOT / "multilang" / "CONFIG.md"
BASE = {
    "executableName": "python3 app.py",
    "streamName": "s",
    "applicationName": "app",
    "AwsCredentialsProvider": "DefaultCredentialsProvider",
    "maxRecords": "100",
}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "app.properties"
    path.write_text(text, encoding="latin-1")
    return path


def load(tmp_path: Path, drop: tuple[str, ...] = (), overrides: dict[str, str] | None = None, **keys: str) -> Config:
    """BASE without ``drop``, plus ``keys``, written as a file in that order."""
    merged = {**{k: v for k, v in BASE.items() if k not in drop}, **keys}
    return load_config(write(tmp_path, "".join(f"{k} = {v}\n" for k, v in merged.items())), overrides=overrides)


# --- files and required keys -------------------------------------------------------------


def test_minimal_file_gives_the_documented_defaults(tmp_path) -> None:
    config = load(tmp_path, drop=("maxRecords",), retrievalMode="POLLING")
    assert config.application_name == "app" and config.stream_name == "s" and config.stream_arn is None
    assert config.lease == LeaseSettings(table_name="app")
    assert config.retrieval == RetrievalSettings(mode="POLLING", consumer_name="app")
    assert config.processor == ProcessorSettings(command=("python3", "app.py"))
    assert config.metrics == MetricsSettings()
    assert config.initial_position.kind == "LATEST"
    assert config.kinesis.region is None and config.kinesis.endpoint is None
    assert config.warnings == () and config.ignored == ()


def test_key_table_defaults_match_the_dataclasses() -> None:
    sections = {"retrieval": RetrievalSettings, "lease": LeaseSettings, "processor": ProcessorSettings,
                "metrics": MetricsSettings, "top": Config, "kcl3": Kcl3Settings,
                "dynamodb_streams": DynamoDBStreamsSettings, "former_streams": FormerStreamsSettings,
                "stream_list": StreamListSettings}
    for key in config_keys.KEYS:
        assert key.doc, key.name
        if key.field:
            section, attr = key.field.split(".")
            fields = {f.name: f for f in dataclasses.fields(sections[section])}
            assert attr in fields, key.field
            if fields[attr].default is not dataclasses.MISSING:
                assert fields[attr].default == key.default, key.name


def test_missing_file(tmp_path) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"{tmp_path / 'nope.properties'}: properties file not found")):
        load_config(tmp_path / "nope.properties")


@pytest.mark.parametrize("key", ["executableName", "applicationName", "streamName"])
def test_missing_required_key_names_key_and_file(tmp_path, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, drop=(key,))
    assert str(info.value).startswith(f"{tmp_path / 'app.properties'}: missing required key {key}")


def test_empty_required_value_is_an_error_with_its_line(tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"app.properties line 1: executableName = '': expected a non-empty"):
        load(tmp_path, executableName="")


def test_stream_arn_gives_the_stream_name(tmp_path) -> None:
    arn = "arn:aws:kinesis:us-east-1:123456789012:stream/orders"
    config = load(tmp_path, drop=("streamName",), streamArn=arn)
    assert (config.stream_name, config.stream_arn) == ("orders", arn)
    config = load(tmp_path, streamArn=arn)  # streamName = s differs: the ARN wins, with a warning
    assert config.stream_name == "orders" and any("streamName = s is not used" in w for w in config.warnings)


# --- values --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key,value,expected",
    [
        ("maxRecords", "abc", "expected an integer between 1 and 10000"),
        ("maxRecords", "10001", "expected an integer between 1 and 10000"),
        ("maxRecords", "100nf", "expected an integer between 1 and 10000"),
        ("failoverTimeMillis", "-5", "expected an integer >= 1000"),
        ("cleanupLeasesUponShardCompletion", "maybe", "expected true or false"),
        ("metricsLevel", "LOUD", "expected one of NONE, SUMMARY, DETAILED"),
        ("kinesisEndpoint", "localhost:4566", "expected a URL with its scheme"),
        ("streamArn", "arn:aws:kinesis:us-east-1:1:stream/x", "expected arn:aws:kinesis"),
        ("retrievalMode", "STREAMING", "expected one of DEFAULT, POLLING, FANOUT"),
        ("timeoutInSeconds", "0", "expected an integer between 1 and 2147483647"),
        ("metricsEnabledDimensions", "Operation,Shard", "unknown dimension Shard; expected some of ALL, Operation"),
        ("kclmp.metricsPort", "70000", "expected an integer between 0 and 65535"),
        ("clientVersionConfig", "CLIENT_VERSION_CONFIG_2X", "expected one of CLIENT_VERSION_CONFIG_3X, "
         "CLIENT_VERSION_CONFIG_COMPATIBLE_WITH_2X, CLIENT_VERSION_CONFIG_COMPATIBLE_WITH_2X_PHASE1"),
    ],
)
def test_invalid_value_names_key_value_file_and_line(tmp_path, key: str, value: str, expected: str) -> None:
    path = write(tmp_path, "".join(f"{k} = {v}\n" for k, v in BASE.items() if k != key) + f"# c\n{key} = {value}\n")
    line = len(BASE) + 2 - (key in BASE)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{path} line {line}: {key} = '{value}': {expected}")


def test_invalid_override_names_the_set_option(tmp_path) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, overrides={"maxRecords": "abc"})
    assert str(info.value) == "--set maxRecords = 'abc': expected an integer between 1 and 10000"


@pytest.mark.parametrize(
    "key,value,field,expected",
    [
        ("cleanupLeasesUponShardCompletion", "false", "lease.cleanup_leases_upon_shard_completion", False),
        ("cleanupLeasesUponShardCompletion", "NO", "lease.cleanup_leases_upon_shard_completion", False),
        ("isGracefulLeaseHandoffEnabled", "off", "lease.graceful_lease_handoff_enabled", False),
        ("ignoreUnexpectedChildShards", "Y", "lease.ignore_unexpected_child_shards", True),
        ("callProcessRecordsEvenForEmptyRecordList", "1", "retrieval.call_process_records_even_for_empty_record_list",
         True),
        ("shutdownGraceMillis", "0", "processor.shutdown_grace_ms", 0),
        ("timeoutInSeconds", "30", "processor.timeout_s", 30.0),
        ("metricsLevel", "summary", "metrics.level", "SUMMARY"),
        ("metricsEnabledDimensions", "Operation, ShardId", "metrics.enabled_dimensions", ("Operation", "ShardId")),
        ("maxLeasesForWorker", "  7  ", "lease.max_leases_for_worker", 7),
        ("workerIdentifier", "w-1", "worker_id", "w-1"),
        ("tableName", "leases", "lease.table_name", "leases"),
        ("fanoutConfig.consumerName", "c", "retrieval.consumer_name", "c"),
        ("pollingConfig.maxRecords", "5", "retrieval.max_records", 5),
        ("kclmp.metricsPort", "9464", "metrics.port", 9464),
        ("kclmp.metricsAddress", "127.0.0.1", "metrics.address", "127.0.0.1"),
    ],
)
def test_values_are_honoured(tmp_path, key: str, value: str, field: str, expected: Any) -> None:
    config = load(tmp_path, drop=("maxRecords",) if "maxRecords" in key else (), **{key: value})
    target: Any = config
    for part in field.split("."):
        target = getattr(target, part)
    assert target == expected
    assert config.warnings == ()


def test_shutdown_grace_default_is_kcl_mp_s_not_java_s(tmp_path) -> None:
    assert load(tmp_path).processor.shutdown_grace_ms == 20000
    assert load(tmp_path, shutdownGraceMillis="15000").processor.shutdown_grace_ms == 15000


def test_worker_id_defaults_to_a_fresh_uuid(tmp_path) -> None:
    first, second = load(tmp_path).worker_id, load(tmp_path).worker_id
    assert first != second and re.fullmatch(r"[0-9a-f-]{36}", first)


@pytest.mark.parametrize(
    "value,command",
    [
        ("python3 app.py", ("python3", "app.py")),
        ("python3   app.py  --fast  ", ("python3", "app.py", "--fast")),
        ("./app.py", ("./app.py",)),
        ("run\tme now", ("run\tme", "now")),  # tabs are not separators (Java ProcessBuilder)
    ],
)
def test_executable_name_split_on_runs_of_spaces(tmp_path, value: str, command: tuple[str, ...]) -> None:
    assert load(tmp_path, executableName=value).processor.command == command


def test_idle_time_below_200_is_raised_as_java_does(tmp_path) -> None:
    config = load(tmp_path, idleTimeBetweenReadsInMillis="50")
    assert config.retrieval.idle_time_between_reads_ms == 200
    assert any("below 200" in w for w in config.warnings)


def test_regions_and_endpoints_per_client(tmp_path) -> None:
    config = load(tmp_path, regionName="eu-west-1", **{
        "kinesisEndpoint": "http://127.0.0.1:1", "dynamoDbClient.endpointOverride": "http://127.0.0.1:2",
        "cloudWatchClient.endpointOverride": "http://127.0.0.1:3", "dynamoDbClient.region": "us-west-2"})
    assert (config.kinesis.region, config.kinesis.endpoint) == ("eu-west-1", "http://127.0.0.1:1")
    assert (config.dynamodb.region, config.dynamodb.endpoint) == ("us-west-2", "http://127.0.0.1:2")
    assert (config.cloudwatch.region, config.cloudwatch.endpoint) == ("eu-west-1", "http://127.0.0.1:3")


def test_override_wins_over_any_spelling_in_the_file(tmp_path) -> None:
    config = load(tmp_path, overrides={"kinesisEndpoint": "http://127.0.0.1:9", "AwsCredentialsProvider":
                                       "EnvironmentVariableCredentialsProvider"},
                  **{"kinesisClient.endpointOverride": "https://kinesis.example", "AWSCredentialsProvider":
                     "DefaultCredentialsProvider"}, drop=("AwsCredentialsProvider",))
    assert config.kinesis.endpoint == "http://127.0.0.1:9"
    assert [p.name for p in config.kinesis.credentials] == ["EnvironmentVariableCredentialsProvider"]
    assert config.warnings == ()


# --- warnings ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key,suggestion",
    [
        ("maxRecord", "maxRecords"),
        ("maxLeaseForWorker", "maxLeasesForWorker"),
        ("maxrecords", "maxRecords"),  # keys are case-sensitive in Java
        ("consumerName", "fanoutConfig.consumerName"),  # the bare name is ignored by Java
        ("dynamoDBClient.region", "dynamoDbClient.region"),
        ("leaseTableName", "tableName"),
        ("shutdownGraceMs", "shutdownGraceMillis"),
    ],
)
def test_unknown_key_warns_with_closest_match(tmp_path, caplog, key: str, suggestion: str) -> None:
    with caplog.at_level(logging.WARNING, logger="kcl_mp.config"):
        config = load(tmp_path, **{key: "5"})
    expected = f"{tmp_path / 'app.properties'} line 6: unknown key '{key}' ignored; did you mean '{suggestion}'?"
    assert config.warnings == (expected,)
    assert expected in caplog.messages


def test_unknown_key_without_a_close_match(tmp_path) -> None:
    assert load(tmp_path, zzz="1").warnings == (f"{tmp_path / 'app.properties'} line 6: unknown key 'zzz' ignored",)


def test_duplicate_key_last_wins_with_warning(tmp_path) -> None:
    path = write(tmp_path, "".join(f"{k} = {v}\n" for k, v in BASE.items()) + "maxRecords = 200\n")
    config = load_config(path)
    assert config.retrieval.max_records == 200
    assert config.warnings == (f"{path} line 6: maxRecords is set again (also at line 5); the last value wins",)


def test_two_spellings_of_one_setting_warn(tmp_path) -> None:
    config = load(tmp_path, **{"pollingConfig.maxRecords": "300"})
    assert config.retrieval.max_records == 300
    assert len(config.warnings) == 1 and "same setting as maxRecords" in config.warnings[0]


def test_ignored_keys_are_recorded(tmp_path) -> None:
    config = load(tmp_path, maxActiveThreads="10", workerMetricsEMAAlpha="0.5",
                  **{"kinesisClient.maxConcurrency": "5", "validateSequenceNumberBeforeCheckpointing": "true"})
    assert {name for name, _ in config.ignored} == {
        "maxActiveThreads", "workerMetricsEMAAlpha", "kinesisClient.maxConcurrency",
        "validateSequenceNumberBeforeCheckpointing"}
    # Only what changes behaviour a user may count on is a warning.
    assert len(config.warnings) == 1
    assert {w.split(": ")[1].split(" ")[0] for w in config.warnings} == {"kinesisClient.maxConcurrency"}


def test_max_lease_renewal_threads_is_used(tmp_path) -> None:
    """Java's renewal pool size: how many held leases a round renews at once (default 20)."""
    assert load(tmp_path).lease.max_lease_renewal_threads == 20
    config = load(tmp_path, maxLeaseRenewalThreads="64")
    assert config.lease.max_lease_renewal_threads == 64 and config.ignored == ()
    with pytest.raises(ConfigError, match="maxLeaseRenewalThreads = '0'"):
        load(tmp_path, maxLeaseRenewalThreads="0")


def test_keys_nothing_reads_are_accepted_and_ignored(tmp_path) -> None:
    """Java keys kcl-mp has no use for: recorded with their reason, an info line, no warning."""
    config = load(tmp_path, enablePriorityLeaseAssignment="false", taskBackoffTimeMillis="0",
                  processingLanguage="python/3.8")
    assert {name for name, _ in config.ignored} == {
        "enablePriorityLeaseAssignment", "taskBackoffTimeMillis", "processingLanguage"}
    assert config.warnings == ()


def test_kcl3_keys_are_settings(tmp_path) -> None:
    """The 3.x keys feed Kcl3Settings with Java's defaults: clientVersionConfig unset is
    CLIENT_VERSION_CONFIG_3X, as in Java; where it was set is kept for the start-up log."""
    assert load(tmp_path).kcl3 == Kcl3Settings()
    assert Kcl3Settings().client_version_config == "CLIENT_VERSION_CONFIG_3X"
    assert Kcl3Settings().client_version_config_from is None
    config = load(tmp_path, clientVersionConfig="client_version_config_compatible_with_2x",
                  leaseAssignmentIntervalMillis="4000", dampeningPercentage="80", workerMetricsTableName="wm",
                  **{"kclmp.leaderLockLeaseDurationMillis": "8000"})
    assert config.kcl3.client_version_config == "CLIENT_VERSION_CONFIG_COMPATIBLE_WITH_2X"
    assert config.kcl3.client_version_config_from == f"{tmp_path / 'app.properties'} line {len(BASE) + 1}"
    assert load(tmp_path, overrides={"clientVersionConfig": "CLIENT_VERSION_CONFIG_3X"}).kcl3.client_version_config_from \
        == "--set"
    assert (config.kcl3.lease_assignment_interval_ms, config.kcl3.dampening_percentage) == (4000, 80)
    assert (config.kcl3.worker_metrics_table_name, config.leader_lock_ms, config.leader_heartbeat_s) == ("wm", 8000, 2.0)
    unset = load(tmp_path, failoverTimeMillis="6000")  # the lock sized to failover, so a dead leader costs seconds
    assert (unset.leader_lock_ms, unset.leader_heartbeat_s, unset.assignment_interval_s) == (6000, 1.5, 12.0)
    assert config.ignored == ()


def test_lease_assignment_strategy_keys(tmp_path) -> None:
    """kcl-mp's leader strategy and COST_BASED's knobs; a wrong value names the key and the line."""
    config = load(tmp_path, **{"kclmp.leaseAssignmentStrategy": "COST_BASED", "kclmp.costBandPercent": "5",
                               "kclmp.costMinGainPercent": "0.5", "kclmp.costMovesPerRound": "4"})
    assert (config.kcl3.lease_assignment_strategy, config.kcl3.cost_band_percent, config.kcl3.cost_min_gain_percent,
            config.kcl3.cost_moves_per_round) == ("COST_BASED", 5.0, 0.5, 4)
    assert load(tmp_path).kcl3.lease_assignment_strategy == "WORKER_UTILIZATION_AWARE"
    with pytest.raises(ConfigError, match=f"line {len(BASE) + 1}: kclmp.leaseAssignmentStrategy = 'CPU': expected one of"):
        load(tmp_path, **{"kclmp.leaseAssignmentStrategy": "CPU"})


def test_ignored_keys_are_still_validated(tmp_path) -> None:
    with pytest.raises(ConfigError, match="maxActiveThreads = 'many'"):
        load(tmp_path, maxActiveThreads="many")


def test_non_ascii_utf8_file_warns(tmp_path) -> None:
    path = tmp_path / "app.properties"
    path.write_bytes("".join(f"{k} = {v}\n" for k, v in BASE.items()).encode() + "workerId = wörker\n".encode())
    config = load_config(path)
    assert config.worker_id == "wÃ¶rker"
    assert len(config.warnings) == 1 and "line 6" in config.warnings[0]


# --- credentials ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value,providers,renamed",
    [
        ("DefaultCredentialsProvider", [("DefaultCredentialsProvider", (), ())], False),
        ("DefaultAWSCredentialsProviderChain", [("DefaultCredentialsProvider", (), ())], True),
        ("com.amazonaws.auth.DefaultAWSCredentialsProviderChain", [("DefaultCredentialsProvider", (), ())], True),
        ("software.amazon.awssdk.auth.credentials.ProfileCredentialsProvider|dev",
         [("ProfileCredentialsProvider", ("dev",), ())], False),
        ("EnvironmentVariableCredentialsProvider, InstanceProfileCredentialsProvider",
         [("EnvironmentVariableCredentialsProvider", (), ()), ("InstanceProfileCredentialsProvider", (), ())], False),
        ("SystemPropertiesCredentialsProvider", [("SystemPropertyCredentialsProvider", (), ())], True),
        ("EC2ContainerCredentialsProviderWrapper", [("ContainerCredentialsProvider", (), ())], True),
        ("STSAssumeRoleSessionCredentialsProvider|arn:aws:iam::123456789012:role/r|s",
         [("StsAssumeRoleCredentialsProvider", ("arn:aws:iam::123456789012:role/r", "s"), ())], True),
        ("KclStsAssumeRoleCredentialsProvider|arn:aws:iam::123456789012:role/r|s|externalId=x|endpointRegion=us-west-2",
         [("StsAssumeRoleCredentialsProvider", ("arn:aws:iam::123456789012:role/r", "s"),
           (("externalId", "x"), ("endpointRegion", "us-west-2")))], False),
        ("AnonymousCredentialsProvider", [("AnonymousCredentialsProvider", (), ())], False),
    ],
)
def test_credential_chains(tmp_path, value: str, providers: list, renamed: bool) -> None:
    config = load(tmp_path, AwsCredentialsProvider=value)
    assert config.kinesis.credentials == tuple(CredentialProvider(*p) for p in providers)
    assert config.dynamodb.credentials == config.kinesis.credentials == config.cloudwatch.credentials
    assert bool(config.warnings) == renamed
    assert all("SDK v1 name" in w for w in config.warnings)


def test_credential_key_prefix_is_case_insensitive_and_per_service_keys(tmp_path) -> None:
    config = load(tmp_path, drop=("AwsCredentialsProvider",), **{
        "AWSCredentialsProvider": "EnvironmentVariableCredentialsProvider",
        "awscredentialsproviderDynamoDB": "ProfileCredentialsProvider|ddb",
        "AWSCredentialsProviderCloudWatch": "AnonymousCredentialsProvider"})
    assert [p.name for p in config.kinesis.credentials] == ["EnvironmentVariableCredentialsProvider"]
    assert config.dynamodb.credentials == (CredentialProvider("ProfileCredentialsProvider", ("ddb",)),)
    assert [p.name for p in config.cloudwatch.credentials] == ["AnonymousCredentialsProvider"]


def test_credential_suffix_must_be_exact(tmp_path) -> None:
    config = load(tmp_path, AwsCredentialsProviderDynamodb="DefaultCredentialsProvider")
    assert "did you mean 'AwsCredentialsProviderDynamoDB'?" in config.warnings[0]


@pytest.mark.parametrize(
    "value,expected",
    [
        ("com.example.MyProvider", "custom Java class"),
        ("DefaultCredentialProvider", "did you mean 'DefaultCredentialsProvider'?"),
        ("StsAssumeRoleCredentialsProvider|arn:aws:iam::123456789012:role/r", "|<roleArn>|<sessionName>"),
        (" , ", "at least one credential provider"),
    ],
)
def test_bad_credential_chains(tmp_path, value: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(expected)):
        load(tmp_path, AwsCredentialsProvider=value)


def test_missing_credentials_key_uses_default_chain_with_warning(tmp_path) -> None:
    config = load(tmp_path, drop=("AwsCredentialsProvider",))
    assert [p.name for p in config.kinesis.credentials] == ["DefaultCredentialsProvider"]
    assert "AwsCredentialsProvider is not set" in config.warnings[0]


def test_secrets_never_appear_in_messages(tmp_path, caplog) -> None:
    secret, key_id = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEYab", "AKIAIOSFODNN7EXAMPLE"
    with caplog.at_level(logging.DEBUG):
        with pytest.raises(ConfigError) as info:
            load(tmp_path, AwsCredentialsProvider=f"NoSuchProvider|{key_id}|{secret}")
        config = load(tmp_path, awsSecretKey=secret,
                      AwsCredentialsProvider=f"StsAssumeRoleCredentialsProvider|arn:aws:iam::1:role/r|s|externalId={secret}")
        with pytest.raises(ConfigError) as info2:
            load(tmp_path, maxRecords=key_id)
    text = " ".join([str(info.value), str(info2.value), *config.warnings, caplog.text])
    assert secret not in text and key_id not in text
    assert "<redacted>" in str(info2.value)


# --- initial position and retrieval mode ----------------------------------------------------


@pytest.mark.parametrize(
    "keys,overrides,kind,timestamp,warned",
    [
        ({}, {}, "LATEST", None, False),
        ({"initialPositionInStream": "trim_horizon"}, {}, "TRIM_HORIZON", None, False),
        ({"initialPositionInStreamExtended": "1636609142"}, {}, "AT_TIMESTAMP", 1636609142.0, False),
        ({"initialPositionInStream": "AT_TIMESTAMP", "initialPositionInStreamExtended": "1636609142"}, {},
         "AT_TIMESTAMP", 1636609142.0, False),
        ({"initialPositionInStream": "TRIM_HORIZON", "initialPositionInStreamExtended": "1636609142"}, {},
         "AT_TIMESTAMP", 1636609142.0, True),
        ({"initialPositionInStreamExtended": "1636609142"}, {"initialPositionInStream": "LATEST"},
         "LATEST", None, False),
    ],
)
def test_initial_position(tmp_path, keys, overrides, kind, timestamp, warned) -> None:
    config = load(tmp_path, overrides=overrides, **keys)
    assert (config.initial_position.kind, config.initial_position.timestamp) == (kind, timestamp)
    assert bool(config.warnings) == warned


def test_at_timestamp_needs_the_timestamp(tmp_path) -> None:
    with pytest.raises(ConfigError, match="also set initialPositionInStreamExtended"):
        load(tmp_path, initialPositionInStream="AT_TIMESTAMP")


@pytest.mark.parametrize(
    "keys,mode",
    [
        ({}, "FANOUT"),  # no polling key: Java uses enhanced fan-out
        ({"maxRecords": "100"}, "POLLING"),
        ({"pollingConfig.maxRecords": "100"}, "POLLING"),
        ({"idleTimeBetweenReadsInMillis": "1000"}, "POLLING"),
        ({"retryGetRecordsInSeconds": "5"}, "POLLING"),
        ({"maxGetRecordsThreadPool": "2"}, "POLLING"),
        ({"millisBehindLatestThresholdForReducedTps": "0"}, "FANOUT"),  # zero does not count
        ({"millisBehindLatestThresholdForReducedTps": "500"}, "POLLING"),
        ({"retrievalMode": "polling"}, "POLLING"),
        ({"retrievalMode": "DEFAULT", "maxRecords": "100"}, "POLLING"),
        ({"retrievalMode": "FANOUT", "maxRecords": "100"}, "FANOUT"),  # explicit mode wins
        ({"fanoutConfig.consumerName": "c"}, "FANOUT"),
    ],
)
def test_retrieval_mode_resolution(tmp_path, keys: dict[str, str], mode: str) -> None:
    assert load(tmp_path, drop=("maxRecords",), **keys).retrieval.mode == mode


# --- real files -----------------------------------------------------------------------------


def _config_md_samples() -> list[str]:
    text = CONFIG_MD.read_text()
    section = text[text.index("## 16."):]
    return re.findall(r"```\n(.*?)```", section, re.S)


def test_config_md_has_samples() -> None:
    assert len(_config_md_samples()) == 2


@pytest.mark.parametrize("index", [0, 1])
def test_config_md_sample_files_load_cleanly(tmp_path, index: int) -> None:
    config = load_config(write(tmp_path, _config_md_samples()[index]))
    # processingLanguage is informational: ignored with an info line, not a warning
    assert config.warnings == () and {name for name, _ in config.ignored} <= {"processingLanguage"}


def test_demo_properties_load_cleanly() -> None:
    config = load_config(ROOT / "examples" / "demo" / "app.properties")
    assert config.warnings == () and config.retrieval.mode == "POLLING"


def test_cli_missing_file_exits_1_with_a_clear_error(tmp_path) -> None:
    missing = tmp_path / "nonexistent.properties"
    done = subprocess.run([sys.executable, "-m", "kcl_mp", "--properties", str(missing)],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 1
    assert f"{missing}: properties file not found" in done.stderr


# --- DynamoDB Streams ----------------------------------------------------------------------

DDB_ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/Orders/stream/2026-01-02T03:04:05.678"


def test_a_dynamodb_stream_arn_selects_dynamodb_streams_with_the_adapters_reading_defaults(tmp_path) -> None:
    config = load(tmp_path, drop=("maxRecords", "streamName"), streamArn=DDB_ARN)
    assert config.stream_kind is StreamKind.DYNAMODB and config.stream_name == "Orders"
    assert config.retrieval.mode == "POLLING"  # DEFAULT: GetRecords is the only way
    assert config.retrieval.max_records == 1000 and config.retrieval.idle_time_between_reads_ms == 1000
    assert config.dynamodb_streams == DynamoDBStreamsSettings("SKIP_RECORDS_TO_TRIM_HORIZON", "ADAPTER_V2")
    kinesis = load(tmp_path, streamArn="arn:aws:kinesis:us-east-1:123456789012:stream/s")
    assert kinesis.stream_kind is StreamKind.KINESIS


def test_dynamodb_streams_keys_and_the_getrecords_cap(tmp_path, caplog) -> None:
    config = load(tmp_path, drop=("streamName",), streamArn=DDB_ARN, maxRecords="5000",
                  **{"kclmp.skipRecordsBehavior": "kcl_retry", "kclmp.dynamodbRecordFormat": "ADAPTER_V1"})
    assert config.retrieval.max_records == 1000
    assert any("maxRecords = 5000: DynamoDB Streams' GetRecords takes at most 1000" in w for w in config.warnings)
    assert config.dynamodb_streams == DynamoDBStreamsSettings("KCL_RETRY", "ADAPTER_V1")


@pytest.mark.parametrize(("keys", "message"), [
    ({"streamArn": "arn:aws:dynamodb:us-east-1:123456789012:table/Orders"},
     "streamArn = 'arn:aws:dynamodb:us-east-1:123456789012:table/Orders': a DynamoDB table's ARN, not its stream's"),
    ({"streamArn": "arn:aws:sqs:us-east-1:123456789012:queue"},
     "expected arn:aws:kinesis:<region>:<12-digit account>:stream/<name> or arn:aws:dynamodb:"),
    ({"streamArn": DDB_ARN, "initialPositionInStream": "AT_TIMESTAMP", "initialPositionInStreamExtended": "1700000000"},
     "initialPositionInStreamExtended: DynamoDB Streams have no AT_TIMESTAMP position (streamArn names the stream "
     "of table Orders); use LATEST or TRIM_HORIZON"),
    ({"streamArn": DDB_ARN, "retrievalMode": "FANOUT"},
     "retrievalMode = 'FANOUT': DynamoDB Streams have no enhanced fan-out"),
], ids=["table-arn", "other-kind", "at-timestamp", "fanout"])
def test_what_dynamodb_streams_cannot_do_is_a_configuration_error_naming_the_key(tmp_path, keys, message) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load(tmp_path, drop=("streamName",), **keys)


def test_a_1x_streams_daemon_file_names_the_dynamodb_stream_by_its_arn_in_stream_name(tmp_path) -> None:
    config = load(tmp_path, drop=("maxRecords",), streamName=DDB_ARN)
    assert config.stream_kind is StreamKind.DYNAMODB and config.stream_arn == DDB_ARN
    assert config.stream_name == "Orders" and config.warnings == ()


def test_variance_balancing_frequency_is_used(tmp_path) -> None:
    """Java's leader rebalances on every third assignment round by default; kcl-mp's follows it."""
    assert load(tmp_path).kcl3.variance_balancing_frequency == 3
    assert load(tmp_path, varianceBalancingFrequency="1").kcl3.variance_balancing_frequency == 1

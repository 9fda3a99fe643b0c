"""Many streams in one application: properties -> the streams of Config, or the error naming the keys.

Each row of the tables is one case: its id says what it checks, then the keys added to a
minimal file (BASE, without streamName) and what load_config must give.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kcl_mp.cli import check_startable
from kcl_mp.config import InitialPosition, load_config
from kcl_mp.config.settings import FormerStreamsSettings, StreamKind, StreamSettings
from kcl_mp.config.stream_list import file_streams
from kcl_mp.errors import ConfigError

BASE = {
    "executableName": "python3 app.py",
    "applicationName": "app",
    "AwsCredentialsProvider": "DefaultCredentialsProvider",
    "regionName": "us-east-1",
}
ACCOUNT = "123456789012"


def arn(name: str, region: str = "us-east-1", account: str = ACCOUNT) -> str:
    return f"arn:aws:kinesis:{region}:{account}:stream/{name}"


def ddb(table: str, label: str = "2026-01-02T03:04:05.678", region: str = "us-east-1") -> str:
    return f"arn:aws:dynamodb:{region}:{ACCOUNT}:table/{table}/stream/{label}"


def load(tmp_path: Path, drop: tuple[str, ...] = (), **keys: str) -> Any:
    path = tmp_path / "app.properties"
    merged = {**{k: v for k, v in BASE.items() if k not in drop}, **keys}
    path.write_text("".join(f"{k} = {v}\n" for k, v in merged.items()), encoding="latin-1")
    return load_config(path)


APP = ("python3", "app.py")
LATEST = InitialPosition("LATEST")

# id, keys, the streams expected: (name, arn, initial position kind, command, consumer ARN, creation epoch)
STREAMS: list[tuple[str, dict[str, str], list[tuple[Any, ...]]]] = [
    ("by ARN, in the listed order, the application's settings", {"streamArns": f"{arn('b')}, {arn('a')}"},
     [("b", arn("b"), "LATEST", APP, None, None), ("a", arn("a"), "LATEST", APP, None, None)]),
    ("by name in regionName: the ARN is learnt at start", {"streamNames": "a,b.v2"},
     [("a", None, "LATEST", APP, None, None), ("b.v2", None, "LATEST", APP, None, None)]),
    ("kinesisClient.region is the region too", {"streamNames": "a", "kinesisClient.region": "eu-west-1"},
     [("a", None, "LATEST", APP, None, None)]),
    ("another account is allowed", {"streamArns": f"{arn('a')},{arn('b', account='210987654321')}"},
     [("a", arn("a"), "LATEST", APP, None, None), ("b", arn("b", account="210987654321"), "LATEST", APP, None, None)]),
    ("the application's initial position for every stream without its own",
     {"streamNames": "a,b", "initialPositionInStream": "TRIM_HORIZON", "stream.b.initialPositionInStream": "latest"},
     [("a", None, "TRIM_HORIZON", APP, None, None), ("b", None, "LATEST", APP, None, None)]),
    ("a processor per stream, split as executableName is; a stream name with a dot",
     {"streamNames": "a,b.v2", "stream.b.v2.executableName": "node  b.js --fast"},
     [("a", None, "LATEST", APP, None, None), ("b.v2", None, "LATEST", ("node", "b.js", "--fast"), None, None)]),
    ("a creation epoch per stream", {"streamArns": arn("a"), "stream.a.creationEpoch": "1700000000000"},
     [("a", arn("a"), "LATEST", APP, None, 1700000000000)]),
]


@pytest.mark.parametrize("keys,expected", [case[1:] for case in STREAMS], ids=[case[0] for case in STREAMS])
def test_streams_and_their_settings(tmp_path, keys: dict[str, str], expected: list[tuple[Any, ...]]) -> None:
    config = load(tmp_path, **keys)
    assert config.streams == tuple(
        StreamSettings(name, stream_arn, InitialPosition(kind), command, consumer, epoch)
        for name, stream_arn, kind, command, consumer, epoch in expected)
    assert config.stream_name == ", ".join(s[0] for s in expected) and config.stream_arn is None
    assert config.warnings == ()


def test_dynamodb_streams_by_arn_named_as_the_adapter_names_them(tmp_path) -> None:
    """streamArns of DynamoDB streams: each named region$account$table$label (its lease keys' name),
    its stream.<table>.* keys applied, the application a DynamoDB Streams one (polling)."""
    config = load(tmp_path, streamArns=f"{ddb('Orders')}, {ddb('Payments', '2026-01-05T10:00:00.000')}",
                  **{"stream.Payments.executableName": "node p.js", "initialPositionInStream": "TRIM_HORIZON",
                     "stream.Orders.initialPositionInStream": "LATEST"})
    assert config.streams == (
        StreamSettings(f"us-east-1${ACCOUNT}$Orders$2026-01-02T03_04_05.678", ddb("Orders"), LATEST, APP,
                       kind=StreamKind.DYNAMODB),
        StreamSettings(f"us-east-1${ACCOUNT}$Payments$2026-01-05T10_00_00.000", ddb("Payments", "2026-01-05T10:00:00.000"),
                       InitialPosition("TRIM_HORIZON"), ("node", "p.js"), kind=StreamKind.DYNAMODB))
    assert [stream.key_name for stream in config.streams] == ["Orders", "Payments"]
    assert config.stream_kind is StreamKind.DYNAMODB and config.retrieval.mode == "POLLING"
    assert config.stream_name == "Orders, Payments" and config.warnings == ()


def test_a_former_dynamodb_stream_is_named_by_its_arn(tmp_path) -> None:
    config = load(tmp_path, streamArns=ddb("Orders"), formerStreamsLeasesDeletionStrategy="PROVIDED_STREAMS_DEFERRED_DELETION",
                  formerStreamsToDelete=ddb("Old"))
    assert config.former_streams.provided == (f"us-east-1${ACCOUNT}$Old$2026-01-02T03_04_05.678",)


@pytest.mark.parametrize("keys,mode", [
    ({}, "FANOUT"), ({"retrievalMode": "DEFAULT"}, "FANOUT"), ({"retrievalMode": "FANOUT", "maxRecords": "100"}, "FANOUT"),
    ({"maxRecords": "100"}, "POLLING"), ({"retrievalMode": "POLLING"}, "POLLING")])
def test_the_retrieval_mode_is_chosen_as_for_one_stream(tmp_path, keys: dict[str, str], mode: str) -> None:
    """Java's choice: FANOUT, or DEFAULT with no polling key set, reads each stream through its own consumer."""
    assert load(tmp_path, streamNames="a,b", **keys).retrieval.mode == mode


def test_a_consumer_per_stream_is_kept(tmp_path) -> None:
    consumer = arn("a") + "/consumer/app:1700000000"
    config = load(tmp_path, streamArns=f"{arn('a')},{arn('b')}", retrievalMode="FANOUT",
                  **{"stream.a.consumerArn": consumer})
    assert [stream.consumer_arn for stream in config.streams] == [consumer, None]  # b's is registered at start
    assert config.warnings == () and config.ignored == ()


# id, keys (BASE's regionName dropped when "regionName" is None), the error's start or part
ERRORS: list[tuple[str, dict[str, Any], str]] = [
    ("streamName beside the list: both keys named",
     {"streamName": "a", "streamNames": "a"},
     "app.properties line 5: streamName and {path} line 6: streamNames both name the streams: keep one"),
    ("streamArn beside the list", {"streamArns": arn("a"), "streamArn": arn("a")},
     "app.properties line 6: streamArn and {path} line 5: streamArns both name the streams"),
    ("both lists", {"streamArns": arn("a"), "streamNames": "b"},
     "app.properties line 5: streamArns and {path} line 6: streamNames: name the streams one way, not both"),
    ("an ARN of another region than regionName",
     {"streamArns": f"{arn('a')},{arn('b', 'eu-west-1')}"},
     f"app.properties line 5: streamArns: {arn('b', 'eu-west-1')} is in region eu-west-1, not in the Kinesis "
     "client's us-east-1 ({path} line 4: regionName): an application reads one region"),
    ("kinesisClient.region decides over regionName",
     {"streamArns": arn("a"), "kinesisClient.region": "eu-west-1"}, "is in region us-east-1, not in the Kinesis "
     "client's eu-west-1 ({path} line 6: kinesisClient.region)"),
    ("no region key: the ARNs still share one",
     {"regionName": None, "streamArns": f"{arn('a')},{arn('b', 'eu-west-1')}"},
     f"streamArns: {arn('a')} and {arn('b', 'eu-west-1')} are in different regions"),
    ("names need a region", {"regionName": None, "streamNames": "a"},
     "app.properties line 4: streamNames: set regionName (or kinesisClient.region)"),
    ("a stream listed twice", {"streamArns": f"{arn('a')},{arn('a', account='210987654321')}"},
     "streamArns: stream a is listed twice"),
    ("DynamoDB and Kinesis streams in one list", {"streamArns": f"{ddb('Orders')},{arn('a')}"},
     f"{ddb('Orders')!r} is a DynamoDB stream's and {arn('a')!r} a Kinesis stream's: an application reads streams "
     "of one kind"),
    ("a DynamoDB table's ARN, not its stream's", {"streamArns": ddb("Orders").partition("/stream/")[0]},
     "a DynamoDB table's ARN, not its stream's: use the table's LatestStreamArn"),
    ("no enhanced fan-out for a DynamoDB stream",
     {"streamArns": ddb("Orders"), "stream.Orders.consumerArn": "c"},
     "app.properties line 6: stream.Orders.consumerArn: DynamoDB streams have no enhanced fan-out (the stream of "
     "table Orders)"),
    ("a DynamoDB stream's epoch is the adapter's",
     {"streamArns": ddb("Orders"), "stream.Orders.creationEpoch": "5"},
     "stream.Orders.creationEpoch: a DynamoDB stream's lease keys carry the adapter's epoch, 1"),
    ("DynamoDB streams: FANOUT", {"streamArns": ddb("Orders"), "retrievalMode": "FANOUT"},
     "retrievalMode = 'FANOUT': DynamoDB Streams have no enhanced fan-out; use POLLING"),
    ("DynamoDB streams: AT_TIMESTAMP", {"streamArns": ddb("Orders"), "initialPositionInStream": "AT_TIMESTAMP",
                                        "initialPositionInStreamExtended": "1700000000"},
     "DynamoDB Streams have no AT_TIMESTAMP position (the list names the streams of tables Orders)"),
    ("two streams of one table", {"streamArns": f"{ddb('Orders')},{ddb('Orders', '2026-02-01T00:00:00.000')}"},
     "streamArns: stream Orders is listed twice"),
    ("a bad stream name", {"streamNames": "a,b c"}, "streamNames = 'a,b c': 'b c' is not a stream name"),
    ("a per-stream key of a stream not listed", {"streamNames": "a", "stream.b.executableName": "x"},
     "app.properties line 6: stream.b.executableName: stream b is not one of streamNames (a)"),
    ("a per-stream key in a single-stream file", {"streamName": "a", "stream.a.executableName": "x"},
     "app.properties line 6: stream.a.executableName: per-stream keys need the list of streams"),
    ("a per-stream value is parsed", {"streamNames": "a", "stream.a.creationEpoch": "0"},
     "app.properties line 6: stream.a.creationEpoch = '0': expected an integer >= 1"),
    ("AT_TIMESTAMP is not a per-stream position", {"streamNames": "a", "stream.a.initialPositionInStream": "x"},
     "stream.a.initialPositionInStream = 'x': expected one of LATEST, TRIM_HORIZON"),
    ("one consumer for many streams", {"streamNames": "a", "fanoutConfig.consumerArn": "c"},
     "fanoutConfig.consumerArn: an enhanced fan-out consumer belongs to one stream"),
    ("a consumer of another stream", {"streamNames": "a,b", "stream.a.consumerArn": arn("b") + "/consumer/c:1"},
     "stream.a.consumerArn = '" + arn("b") + "/consumer/c:1': not a consumer of stream a"),
    ("the strategy's names are Java's", {"streamNames": "a", "formerStreamsLeasesDeletionStrategy": "AUTO"},
     "expected one of NO_STREAMS_LEASES_DELETION, FORMER_STREAMS_AUTO_DETECTION_DEFERRED_DELETION"),
]


@pytest.mark.parametrize("keys,message", [case[1:] for case in ERRORS], ids=[case[0] for case in ERRORS])
def test_what_is_refused_names_the_keys_at_fault(tmp_path, keys: dict[str, Any], message: str) -> None:
    drop = tuple(k for k, v in keys.items() if v is None)
    with pytest.raises(ConfigError) as info:
        load(tmp_path, drop=drop, **{k: v for k, v in keys.items() if v is not None})
    assert message.format(path=tmp_path / "app.properties") in str(info.value)


def test_former_streams_strategy_and_wait(tmp_path) -> None:
    config = load(tmp_path, streamNames="a", formerStreamsLeasesDeletionStrategy=(
        "former_streams_auto_detection_deferred_deletion"), waitPeriodToDeleteFormerStreamsMillis="60000")
    assert config.former_streams == FormerStreamsSettings("FORMER_STREAMS_AUTO_DETECTION_DEFERRED_DELETION", 60000)
    assert load(tmp_path, streamNames="a").former_streams == FormerStreamsSettings("NO_STREAMS_LEASES_DELETION",
                                                                                  3600000)


def test_a_single_stream_file_has_no_streams_and_is_warned_about_multi_stream_keys(tmp_path) -> None:
    config = load(tmp_path, streamName="a")
    assert config.streams == () and config.stream_name == "a" and config.warnings == ()
    config = load(tmp_path, streamName="a", waitPeriodToDeleteFormerStreamsMillis="5")
    assert config.warnings == (f"{tmp_path / 'app.properties'} line 6: waitPeriodToDeleteFormerStreamsMillis is "
                               "used only by a multi-stream application (streamArns or streamNames)",)


def test_a_stream_list_file_names_the_streams_and_keeps_the_overrides_of_streams_it_may_list_later(tmp_path) -> None:
    (tmp_path / "streams.txt").write_text(f"# the orders first\n{arn('orders')}\n\n  payments   # by name\n")
    config = load(tmp_path, streamListFile="streams.txt", streamListReadIntervalMillis="5000",
                  **{"stream.payments.executableName": "node p.js", "stream.later.initialPositionInStream": "latest"})
    assert [(s.name, s.arn, s.command) for s in config.streams] == [
        ("orders", arn("orders"), APP), ("payments", None, ("node", "p.js"))]
    assert config.stream_name == "orders, payments"
    assert config.stream_list.file == str(tmp_path / "streams.txt") and config.stream_list.read_interval_ms == 5000
    assert {s.name: s.initial_position.kind for s in config.stream_list.templates} == {"payments": "LATEST",
                                                                                     "later": "LATEST"}
    assert load(tmp_path, streamNames="a").stream_list.file is None


def test_a_stream_list_file_of_dynamodb_streams_and_a_reread_that_switches_kind(tmp_path) -> None:
    """Tables' streams by ARN, their stream.<table>.* keys applied (also to one the file lists later);
    a file read again while running may not bring a stream of the other kind."""
    (tmp_path / "streams.txt").write_text(f"{ddb('Orders')}\n")
    config = load(tmp_path, streamListFile="streams.txt", **{"stream.Later.executableName": "node l.js"})
    assert [(s.key_name, s.kind) for s in config.streams] == [("Orders", StreamKind.DYNAMODB)]
    assert config.stream_kind is StreamKind.DYNAMODB and config.stream_name == "Orders"
    later = file_streams(f"{ddb('Orders')}\n{ddb('Later')}\n", "streams.txt", "us-east-1", config.stream_list.templates,
                         APP, LATEST, config.stream_kind)
    assert [(s.name, s.command) for s in later] == [(f"us-east-1${ACCOUNT}$Orders$2026-01-02T03_04_05.678", APP),
                                                    (f"us-east-1${ACCOUNT}$Later$2026-01-02T03_04_05.678", ("node", "l.js"))]
    with pytest.raises(ConfigError, match="streams.txt line 1: .* is a kinesis stream: a DynamoDB stream is listed"):
        file_streams(f"{arn('a')}\n", "streams.txt", "us-east-1", (), APP, LATEST, StreamKind.DYNAMODB)
    with pytest.raises(ConfigError, match="streams.txt line 1: .* is a dynamodb stream: a DynamoDB stream is listed"):
        file_streams(f"{ddb('Orders')}\n", "streams.txt", "us-east-1", (), APP, LATEST, StreamKind.KINESIS)


# id, the file's text (None: no file), keys, the error's part ({path}: the properties, {file}: the list)
FILE_ERRORS: list[tuple[str, str | None, dict[str, str], str]] = [
    ("beside streamNames, naming both keys", "a\n", {"streamNames": "a"},
     "app.properties line 6: streamNames and {path} line 5: streamListFile: name the streams one way, not both"),
    ("beside streamName", "a\n", {"streamName": "a"},
     "app.properties line 6: streamName and {path} line 5: streamListFile both name the streams: keep one"),
    ("a bad line, by file and line", "a\n# fine\nb c\n", {}, "{file} line 3: 'b c' is not a stream name"),
    ("an ARN of another region, by file and line", f"{arn('a', 'eu-west-1')}\n", {},
     "{file} line 1: " + arn("a", "eu-west-1") + " is in region eu-west-1, not in the Kinesis client's us-east-1"),
    ("a stream twice", "a\nb\na\n", {}, "{file} line 3: stream a is listed twice"),
    ("a DynamoDB stream beside a Kinesis one", f"{arn('a')}\n{ddb('Orders')}\n", {},
     "{file} line 2: " + f"{ddb('Orders')!r} is a DynamoDB stream's and {arn('a')!r} a Kinesis stream's"),
    ("a name beside a DynamoDB stream", f"{ddb('Orders')}\npayments\n", {},
     "{file} line 2: stream payments is named, not by its ARN: a DynamoDB stream is listed by its ARN"),
    ("a DynamoDB stream after a name", f"payments\n{ddb('Orders')}\n", {},
     "{file} line 2: " + f"{ddb('Orders')} is a dynamodb stream: a DynamoDB stream is listed by its ARN, and an "
     "application reads streams of one kind"),
    ("a DynamoDB stream's refused key, once the file lists it", f"{ddb('Orders')}\n", {"stream.Orders.creationEpoch": "3"},
     "stream.Orders.creationEpoch: a DynamoDB stream's lease keys carry the adapter's epoch, 1"),
    ("no stream at all", "# nothing yet\n", {}, "{file}: names no stream"),
    ("a file that cannot be read", None, {}, "{path} line 5: streamListFile: cannot read {file}: No such file"),
    ("PROVIDED needs its list", "a\n", {"formerStreamsLeasesDeletionStrategy": "PROVIDED_STREAMS_DEFERRED_DELETION"},
     "formerStreamsLeasesDeletionStrategy = PROVIDED_STREAMS_DEFERRED_DELETION deletes the leases of the streams "
     "formerStreamsToDelete names: set it"),
]


@pytest.mark.parametrize("text,keys,message", [case[1:] for case in FILE_ERRORS], ids=[case[0] for case in FILE_ERRORS])
def test_what_is_refused_of_a_stream_list_file(tmp_path, text: str | None, keys: dict[str, str], message: str) -> None:
    listing = tmp_path / "streams.txt"
    if text is not None:
        listing.write_text(text)
    with pytest.raises(ConfigError) as info:
        load(tmp_path, streamListFile="streams.txt", **keys)
    assert message.format(path=tmp_path / "app.properties", file=listing) in str(info.value)


def test_the_provided_strategy_and_its_list(tmp_path) -> None:
    config = load(tmp_path, streamNames="a", formerStreamsLeasesDeletionStrategy="PROVIDED_STREAMS_DEFERRED_DELETION",
                  formerStreamsToDelete="old, older")
    assert config.former_streams == FormerStreamsSettings("PROVIDED_STREAMS_DEFERRED_DELETION", 3600000,
                                                          ("old", "older"))
    assert load(tmp_path, streamNames="a", formerStreamsToDelete="old").warnings == (
        f"{tmp_path / 'app.properties'} line 6: formerStreamsToDelete is used only with "
        "formerStreamsLeasesDeletionStrategy = PROVIDED_STREAMS_DEFERRED_DELETION",)


def test_the_processor_of_a_stream_the_file_lists_later_is_checked_at_start(tmp_path) -> None:
    (tmp_path / "streams.txt").write_text("a\n")
    config = load(tmp_path, streamListFile="streams.txt", executableName="true",
                  **{"stream.later.executableName": "no-such-processor-kclmp"})
    with pytest.raises(ConfigError, match="stream.later.executableName: "):
        check_startable(config)

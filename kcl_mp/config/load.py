"""Loading: properties text -> a frozen ``Config``. Nothing else in kcl-mp reads properties text.

``load_config`` is strict where Java is silently lenient (docs/configuration.md): an
unparsable value is an error naming key, value, file and line; an unknown key is a
warning with the closest known key; ``false`` and ``0`` are honoured where Java keeps the
default. Values of credential keys (and anything that looks like a secret key) are never
repeated in messages.
"""

from __future__ import annotations

import logging
import os
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kcl_mp.config import keys as K
from kcl_mp.config import values
from kcl_mp.config.properties import last_wins, read_properties
from kcl_mp.config.settings import (
    ClientSettings,
    Config,
    CredentialProvider,
    DynamoDBStreamsSettings,
    FormerStreamsSettings,
    InitialPosition,
    Kcl3Settings,
    LeaseSettings,
    MetricsSettings,
    ProcessorSettings,
    RetrievalSettings,
    StreamKind,
    StreamListSettings,
)
from kcl_mp.config.stream_list import stream_list, templates
from kcl_mp.errors import ConfigError

# AWS access key ids, and 40-character base64 runs (secret keys): never echoed.
_SECRET = re.compile(r"(?:AKIA|ASIA)[A-Z0-9]{16}|(?<![\w/+=])[A-Za-z0-9/+=]{40}(?![\w/+=])")
_MIN_IDLE_MS = 200  # Java raises idleTimeBetweenReadsInMillis below this, with a warning
# DynamoDB Streams: GetRecords takes at most 1,000 records; the adapter reads every second by default.
DYNAMODB_MAX_RECORDS = 1000
DYNAMODB_IDLE_MS = 1000


@dataclass(frozen=True)
class _Setting:
    """One key's effective text and where it came from."""

    name: str  # the spelling used in the file or on the command line
    raw: str
    where: str  # "app.properties line 12" or "--set"
    from_override: bool

    @property
    def label(self) -> str:
        return f"--set {self.name}" if self.from_override else f"{self.where}: {self.name}"


def _shown(name: str, raw: str) -> str:
    """A value fit for a message: credential arguments and secret-looking runs removed."""
    if values.canonical_credential_key(name):
        return re.sub(r"\|[^,]*", "|...", raw)
    return _SECRET.sub("<redacted>", raw)


def parse_overrides(pairs: Sequence[str]) -> dict[str, str]:
    """The command line's ``--set KEY=VALUE`` pairs, as ``load_config``'s overrides."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {pair!r}: expected KEY=VALUE")
        out[key.strip()] = value
    return out


def load_config(
    path: str | os.PathLike[str],
    overrides: Mapping[str, str] | None = None,
    log: logging.Logger | None = None,
) -> Config:
    """Read a MultiLangDaemon properties file (plus ``--set`` overrides, which win) into a Config.

    Raises ConfigError for a missing/unreadable file, a missing required key or an invalid
    value; warns (``log.warning`` and ``Config.warnings``) about unknown keys, duplicates
    and Java behaviours kcl-mp does not copy.
    """
    log = log or logging.getLogger("kcl_mp.config")
    props = read_properties(path)
    source = props.path
    warnings: list[str] = []
    ignored: list[tuple[str, str]] = []

    def warn(message: str) -> None:
        warnings.append(message)
        log.warning("%s", message)

    for message in props.warnings:
        warn(message)
    final, replaced = last_wins(props.entries)
    for old, new in replaced:
        warn(f"{source} line {new.line}: {new.key} is set again (also at line {old.line}); the last value wins")

    layers = [_Setting(e.key, e.value.strip(), f"{source} line {e.line}", False)
              for e in sorted(final.values(), key=lambda e: e.line)]
    layers += [_Setting(k, v.strip(), "--set", True) for k, v in (overrides or {}).items()]
    settings: dict[str, _Setting] = {}  # declared key name -> effective setting
    per_stream: dict[tuple[str, str], _Setting] = {}  # (stream, key suffix) -> its stream.<name>.<suffix>
    for s in layers:
        stream_key = K.stream_key(s.name)
        if stream_key is not None:
            per_stream[stream_key[0], stream_key[1].name] = s
            continue
        key = K.lookup(s.name)
        if key is None:
            if K.client_builder_key(s.name):
                reason = "only region and endpointOverride of the SDK client builders are applied"
                ignored.append((s.name, reason))
                warn(f"{s.label} is not used by kcl-mp: {reason}")
                continue
            hint = K.suggest(s.name)
            warn(f"{s.where}: unknown key '{s.name}' ignored" + (f"; did you mean '{hint}'?" if hint else ""))
            continue
        previous = settings.get(key.name)
        if previous is not None and not (s.from_override or previous.from_override):
            warn(f"{s.label}: same setting as {previous.name} ({previous.where}); using the later line")
        settings[key.name] = s

    parsed: dict[str, Any] = {}
    for name, s in settings.items():
        key = K.lookup(name)
        assert key is not None
        log.debug("Processing (key=%s, value=%s)", s.name, _shown(s.name, s.raw))
        value = _parse(key, s)
        if name in values.CREDENTIAL_KEYS:
            value, notes = value
            for note in notes:
                warn(f"{s.label}: {note}")
        parsed[name] = value  # ignored keys too: a polling key still selects polling
        if key.ignored:
            ignored.append((s.name, key.ignored))
            if key.notice:
                warn(f"{s.label} is not used by kcl-mp: {key.ignored}")
            else:
                log.info("%s is accepted and not used: %s", s.label, key.ignored)

    def required(name: str, example: str) -> Any:
        if name not in parsed:
            raise ConfigError(f"{source}: missing required key {name} (e.g. {example})")
        return parsed[name]

    command = values.command_words(required("executableName", "executableName = python3 app.py"))
    application = required("applicationName", "applicationName = my-app")

    sections: dict[str, dict[str, Any]] = {s: {} for s in ("top", "retrieval", "lease", "processor", "metrics", "kcl3",
                                                                 "dynamodb_streams", "former_streams",
                                                                 "stream_list")}
    for key in K.KEYS:
        if key.field:
            section, attr = key.field.split(".")
            sections[section][attr] = parsed.get(key.name, key.default)

    stream_name = parsed.get("streamName")
    arn = parsed.get("streamArn")
    file_text = None
    if "streamListFile" in parsed:  # from the properties file's directory, read now and again while running
        parsed["streamListFile"] = sections["stream_list"]["file"] = os.path.join(
            os.path.dirname(source), parsed["streamListFile"])
        file_text = read_stream_list(parsed["streamListFile"], settings["streamListFile"].label)
    listed = parsed.get("streamNames") or tuple(values.stream_of(a)[1] for a in parsed.get("streamArns", ()))
    if file_text is not None:
        listed = ("the streams of streamListFile",)  # named once the file is parsed, below
    if stream_name is None and arn is None:  # a multi-stream application: its names, for messages
        stream_name = ", ".join(listed)
    arn_as_name = arn is None and stream_name is not None and values.is_dynamodb_stream_arn(stream_name)
    if arn_as_name:  # the 1.x StreamsMultiLangDaemon's files: the adapter took the stream's ARN as its name
        log.info("%s is a DynamoDB stream's ARN: read as streamArn", settings["streamName"].label)
        arn = stream_name
    kind = StreamKind.KINESIS
    if arn is not None:
        kind, arn_name = values.stream_of(arn)
        if stream_name is not None and stream_name != arn_name and not arn_as_name:
            warn(f"{settings['streamArn'].label} names stream {arn_name}; streamName = {stream_name} is not used")
        stream_name = arn_name
    if not stream_name:
        raise ConfigError(f"{source}: missing required key streamName (or streamArn), e.g. streamName = my-stream")
    initial = _initial_position(parsed, settings, warn, source)
    stream_keys = _per_stream_values(per_stream)
    streams = stream_list(parsed, {name: s.label for name, s in settings.items()}, stream_keys, command, initial,
                          source, file_text)
    if streams:  # one kind, stream_list checked
        kind = streams[0].kind
    if file_text is not None:
        stream_name = ", ".join(stream.key_name for stream in streams)

    if "clientVersionConfig" in settings:  # said at start-up: the mode, and where it came from
        sections["kcl3"]["client_version_config_from"] = settings["clientVersionConfig"].where
    retrieval = sections["retrieval"]
    mode = parsed.get("retrievalMode", "DEFAULT")
    if kind is StreamKind.DYNAMODB and mode != "POLLING":
        if mode == "FANOUT":
            raise ConfigError(f"{settings['retrievalMode'].label} = 'FANOUT': DynamoDB Streams have no enhanced "
                              "fan-out; use POLLING (or leave it DEFAULT)")
        mode = "POLLING"  # GetRecords is the only way to read a DynamoDB stream
    if mode == "DEFAULT":
        polling = [name for name in K.POLLING_KEYS if parsed.get(name)]
        mode = "POLLING" if polling else "FANOUT"
        log.info("retrievalMode DEFAULT resolves to %s (polling keys set: %s)", mode, ", ".join(polling) or "none")
    retrieval["mode"] = mode
    if kind is StreamKind.DYNAMODB:
        _dynamodb_retrieval(retrieval, settings, warn)
    if retrieval["idle_time_between_reads_ms"] < _MIN_IDLE_MS:
        warn(f"{settings['idleTimeBetweenReadsInMillis'].label} = {retrieval['idle_time_between_reads_ms']} "
             f"is below {_MIN_IDLE_MS}; using {_MIN_IDLE_MS}, as the Java daemon does")
        retrieval["idle_time_between_reads_ms"] = _MIN_IDLE_MS
    retrieval["consumer_name"] = retrieval["consumer_name"] or application

    processor = sections["processor"]
    if processor["timeout_s"] is not None:
        processor["timeout_s"] = float(processor["timeout_s"])

    chain = parsed.get("AwsCredentialsProvider")
    if chain is None:
        chain = (CredentialProvider("DefaultCredentialsProvider"),)
        warn(f"{source}: AwsCredentialsProvider is not set (the Java daemon requires it); "
             "using DefaultCredentialsProvider")
    region = parsed.get("regionName")
    if kind is StreamKind.DYNAMODB and initial.kind == "AT_TIMESTAMP":
        where = settings.get("initialPositionInStreamExtended") or settings["initialPositionInStream"]
        named = "the list names the streams of tables" if streams else "streamArn names the stream of table"
        raise ConfigError(f"{where.label}: DynamoDB Streams have no AT_TIMESTAMP position ({named} {stream_name}); "
                          "use LATEST or TRIM_HORIZON")
    if file_text is not None:
        sections["stream_list"]["templates"] = templates(stream_keys, command, initial)
    _former_streams(sections["former_streams"], settings, warn)
    if not streams:
        for name in ("formerStreamsLeasesDeletionStrategy", "waitPeriodToDeleteFormerStreamsMillis",
                     "formerStreamsToDelete", "streamListReadIntervalMillis"):
            if name in settings:
                warn(f"{settings[name].label} is used only by a multi-stream application (streamArns or streamNames)")
    return Config(
        source=source,
        application_name=application,
        stream_name=stream_name,
        stream_arn=arn,
        worker_id=parsed.get("workerId") or str(uuid.uuid4()),
        kinesis=ClientSettings(parsed.get("kinesisClient.region", region), parsed.get("kinesisEndpoint"), chain),
        dynamodb=ClientSettings(parsed.get("dynamoDbClient.region", region), parsed.get("dynamoDBEndpoint"),
                                parsed.get("AwsCredentialsProviderDynamoDB", chain)),
        cloudwatch=ClientSettings(parsed.get("cloudWatchClient.region", region),
                                  parsed.get("cloudWatchClient.endpointOverride"),
                                  parsed.get("AwsCredentialsProviderCloudWatch", chain)),
        initial_position=initial,
        retrieval=RetrievalSettings(**retrieval),
        lease=LeaseSettings(table_name=parsed.get("tableName", application), **sections["lease"]),
        processor=ProcessorSettings(command=command, **processor),
        metrics=MetricsSettings(**sections["metrics"]),
        kcl3=Kcl3Settings(**sections["kcl3"]),
        stream_kind=kind,
        dynamodb_streams=DynamoDBStreamsSettings(**sections["dynamodb_streams"]),
        streams=streams,
        former_streams=FormerStreamsSettings(**sections["former_streams"]),
        stream_list=StreamListSettings(**sections["stream_list"]),
        ignored=tuple(ignored),
        warnings=tuple(warnings),
    )


def read_stream_list(path: str, label: str) -> str:
    """streamListFile's text; a ConfigError names the key and the file when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as file:
            return file.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{label}: cannot read {path}: {exc.strerror if isinstance(exc, OSError) else exc}") from None


def _former_streams(former: dict[str, Any], settings: Mapping[str, _Setting], warn: Any) -> None:
    """PROVIDED_STREAMS_DEFERRED_DELETION needs its list; the list means nothing to the other strategies."""
    provided = former["strategy"] == "PROVIDED_STREAMS_DEFERRED_DELETION"
    if provided and not former["provided"]:
        raise ConfigError(f"{settings['formerStreamsLeasesDeletionStrategy'].label} = "
                          "PROVIDED_STREAMS_DEFERRED_DELETION deletes the leases of the streams formerStreamsToDelete "
                          "names: set it")
    if former["provided"] and not provided:
        warn(f"{settings['formerStreamsToDelete'].label} is used only with formerStreamsLeasesDeletionStrategy = "
             "PROVIDED_STREAMS_DEFERRED_DELETION")


def _per_stream_values(per_stream: Mapping[tuple[str, str], _Setting]) -> dict[str, dict[str, tuple[Any, str]]]:
    """Each ``stream.<name>.<suffix>`` parsed, by stream and suffix, with where it was set."""
    out: dict[str, dict[str, tuple[Any, str]]] = {}
    for (stream, suffix), s in per_stream.items():
        key = K.stream_key(s.name)
        assert key is not None
        out.setdefault(stream, {})[suffix] = (_parse(key[1], s), s.label)
    return out


def _parse(key: K.Key, s: _Setting) -> Any:
    """``key``'s value of ``s``; a ConfigError naming key, value and where it was set."""
    try:
        return key.parse(s.raw)
    except ValueError as exc:
        raise ConfigError(f"{s.label} = {_shown(s.name, s.raw)!r}: {exc}") from None


def _dynamodb_retrieval(retrieval: dict[str, Any], settings: Mapping[str, _Setting], warn: Any) -> None:
    """DynamoDB Streams' GetRecords takes at most 1,000 records a call; the adapter reads every
    second by default (its defaults where the file says nothing)."""
    if "maxRecords" not in settings:
        retrieval["max_records"] = DYNAMODB_MAX_RECORDS
    elif retrieval["max_records"] > DYNAMODB_MAX_RECORDS:
        warn(f"{settings['maxRecords'].label} = {retrieval['max_records']}: DynamoDB Streams' GetRecords takes at "
             f"most {DYNAMODB_MAX_RECORDS}; using {DYNAMODB_MAX_RECORDS}")
        retrieval["max_records"] = DYNAMODB_MAX_RECORDS
    if "idleTimeBetweenReadsInMillis" not in settings:
        retrieval["idle_time_between_reads_ms"] = DYNAMODB_IDLE_MS


def _initial_position(parsed: Mapping[str, Any], settings: Mapping[str, _Setting], warn: Any, source: str
                      ) -> InitialPosition:
    """initialPositionInStream, or AT_TIMESTAMP from initialPositionInStreamExtended (CONFIG.md section 8).

    With both keys Java's outcome depends on hash order; kcl-mp takes the timestamp and
    warns, unless the plain key came from ``--set`` (the command line wins over the file).
    ``initialPositionInStream = AT_TIMESTAMP`` is accepted when the timestamp is given.
    """
    kind = parsed.get("initialPositionInStream")
    seconds = parsed.get("initialPositionInStreamExtended")
    if seconds is None:
        if kind == "AT_TIMESTAMP":
            raise ConfigError(f"{settings['initialPositionInStream'].label} = 'AT_TIMESTAMP': also set "
                              f"initialPositionInStreamExtended = <seconds since the epoch> in {source}")
        return InitialPosition(kind or "LATEST")
    if kind in ("LATEST", "TRIM_HORIZON"):
        plain, extended = settings["initialPositionInStream"], settings["initialPositionInStreamExtended"]
        if plain.from_override and not extended.from_override:
            return InitialPosition(kind)
        warn(f"{extended.label} and {plain.name} ({plain.where}) both set the initial position; "
             f"using AT_TIMESTAMP {seconds}")
    return InitialPosition("AT_TIMESTAMP", float(seconds))

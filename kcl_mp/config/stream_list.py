"""A multi-stream application's streams: ``streamArns`` or ``streamNames`` with their
``stream.<name>.*`` overrides, checked together into ``StreamSettings`` (docs/configuration.md,
"Many streams"). Pure: ``load_config`` hands in the parsed values and where each was set.

What is refused, each naming the keys at fault (the Java daemon knows none of these keys and
would run such a file as one stream, silently):

- ``streamName``/``streamArn`` beside a list, and both lists at once;
- an ARN outside the Kinesis client's region (Java's ``StreamConfigMap`` refuses it too: one
  region per application), or ARNs of several regions; names without a region to build them in;
- a stream listed twice (by name: the overrides are keyed by it);
- ``fanoutConfig.consumerArn`` (a consumer belongs to one stream: ``stream.<name>.consumerArn``),
  a per-stream key naming a stream not in the list, a consumer ARN of another stream.

DynamoDB streams are listed by ARN (in ``streamArns`` or the file; no names: a table's stream
changes ARN when it is enabled again), never beside Kinesis streams; each takes the name the
DynamoDB Streams Kinesis Adapter gives it (``values.adapter_stream_name``), which its lease keys
carry with the adapter's epoch 1, and its ``stream.<table>.*`` keys are its table's
(``consumerArn`` and ``creationEpoch`` are refused for it: no fan-out, an epoch fixed at 1).

``streamListFile`` names the streams in a file instead, one ARN or name a line (``file_streams``
parses its text, every error naming the file and line): a per-stream key may then name a stream
the file does not list yet (it applies once the stream is appended), and an empty list is an
error (a typo must not stop every stream: while running, the last good list is kept).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from kcl_mp.config.settings import InitialPosition, StreamKind, StreamSettings
from kcl_mp.config.values import (
    adapter_stream_name,
    arn_region,
    command_words,
    same_kind,
    stream_arn_list,
    stream_name_list,
    stream_of,
)
from kcl_mp.errors import ConfigError

Overrides = Mapping[str, Mapping[str, tuple[Any, str]]]  # stream -> key suffix -> (value, where it was set)


def stream_list(parsed: Mapping[str, Any], labels: Mapping[str, str], overrides: Overrides,
                command: tuple[str, ...], initial: InitialPosition, source: str,
                file_text: str | None = None) -> tuple[StreamSettings, ...]:
    """The streams of ``parsed`` (values by key name; ``labels``: where each key was set), or () for a
    single-stream file, which then may hold no per-stream key.

    ``command`` and ``initial`` are the application's executableName and initial position, which a
    stream without its own override uses; ``file_text``: streamListFile's text, when it is set.
    """
    listed = [name for name in ("streamArns", "streamNames", "streamListFile") if name in parsed]
    if not listed:
        if overrides:
            stream, keys = next(iter(overrides.items()))
            raise ConfigError(f"{next(iter(keys.values()))[1]}: per-stream keys need the list of streams "
                              f"(streamArns, streamNames or streamListFile); this file names one stream")
        return ()
    if len(listed) > 1:
        raise ConfigError(f"{labels[listed[0]]} and {labels[listed[1]]}: name the streams one way, not both")
    for single in ("streamName", "streamArn"):
        if single in parsed:
            raise ConfigError(f"{labels[single]} and {labels[listed[0]]} both name the streams: keep one (a Java "
                              f"daemon reading this file would consume {single} alone)")
    if "fanoutConfig.consumerArn" in parsed:
        raise ConfigError(f"{labels['fanoutConfig.consumerArn']}: an enhanced fan-out consumer belongs to one stream; "
                          "with a list of streams set stream.<name>.consumerArn per stream")
    region_key = next((key for key in ("kinesisClient.region", "regionName") if key in parsed), None)
    region = parsed[region_key] if region_key else None
    region_label = labels[region_key] if region_key else ""
    if listed[0] == "streamListFile":
        assert file_text is not None  # load_config reads the file it names
        return file_streams(file_text, parsed["streamListFile"], region, templates(overrides, command, initial),
                            command, initial)
    if listed[0] == "streamArns":
        entries = [(_key_name(arn), arn, labels["streamArns"]) for arn in parsed["streamArns"]]
    else:
        if region is None:
            raise ConfigError(f"{labels['streamNames']}: set regionName (or kinesisClient.region) in {source}: the "
                              "streams are found by name in that region")
        entries = [(name, None, labels["streamNames"]) for name in parsed["streamNames"]]
    arns = _checked(entries, region, region_label)
    for stream, keys in overrides.items():
        if stream not in arns:
            raise ConfigError(f"{next(iter(keys.values()))[1]}: stream {stream} is not one of {listed[0]} "
                              f"({', '.join(arns)})")
    return tuple(_of_kind(_stream(name, arn, overrides.get(name, {}), command, initial), arn)
                 for name, arn in arns.items())


def templates(overrides: Overrides, command: tuple[str, ...], initial: InitialPosition) -> tuple[StreamSettings, ...]:
    """The settings of each stream a ``stream.<name>.*`` key names (its ARN unset): what the stream
    gets whenever the list file names it."""
    return tuple(_stream(name, None, keys, command, initial) for name, keys in overrides.items())


def file_streams(text: str, path: str, region: str | None, known: Sequence[StreamSettings],
                 command: tuple[str, ...], initial: InitialPosition,
                 kind: StreamKind | None = None) -> tuple[StreamSettings, ...]:
    r"""The streams a list file names, in its order: one ARN or name a line, blank lines and what
    follows a ``#`` left out; a ConfigError names the file and line of the first bad one.

    ``known``: the streams with ``stream.<name>.*`` keys (``templates``); the others get
    ``command`` and ``initial``. ``kind``: the application's, when it runs (a re-read file may
    not switch it).

    >>> text = "# orders first\narn:aws:kinesis:us-east-1:123456789012:stream/orders\n\npayments  # by name\n"
    >>> [(s.name, s.arn) for s in file_streams(text, "streams.txt", "us-east-1", (), ("app",), InitialPosition())]
    [('orders', 'arn:aws:kinesis:us-east-1:123456789012:stream/orders'), ('payments', None)]
    >>> file_streams("orders\nor ders\n", "streams.txt", "us-east-1", (), ("app",), InitialPosition())
    Traceback (most recent call last):
    kcl_mp.errors.ConfigError: streams.txt line 2: 'or ders' is not a stream name (1-128 of A-Z a-z 0-9 _ . -)
    >>> ddb = "arn:aws:dynamodb:us-east-1:123456789012:table/Orders/stream/2026-01-02T03:04:05.678"
    >>> [(s.name, s.kind.value) for s in file_streams(ddb, "streams.txt", None, (), ("app",), InitialPosition())]
    [('us-east-1$123456789012$Orders$2026-01-02T03_04_05.678', 'dynamodb')]
    >>> file_streams(f"{ddb}\npayments\n", "streams.txt", "us-east-1", (), ("app",), InitialPosition())
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    kcl_mp.errors.ConfigError: streams.txt line 2: stream payments is named, not by its ARN: ... of one kind
    """
    entries: list[tuple[str, str | None, str]] = []
    for number, line in enumerate(text.splitlines(), 1):
        value = line.partition("#")[0].strip()
        if not value:
            continue
        where = f"{path} line {number}"
        try:
            arn = stream_arn_list(value)[0] if value.startswith("arn:") else None
            name = _key_name(arn) if arn else stream_name_list(value)[0]
            same_kind([entry[1] for entry in entries if entry[1]] + [arn] if arn else [])
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        this_kind = _kind_of(arn)  # a name is a Kinesis stream's
        file_kind = kind or (_kind_of(entries[0][1]) if entries else this_kind)  # the first line's, unless running
        if this_kind is not file_kind:
            what = f"stream {name} is named, not by its ARN" if arn is None else f"{arn} is a {this_kind.value} stream"
            raise ConfigError(f"{where}: {what}: a DynamoDB stream is listed by its ARN, and an application reads "
                              "streams of one kind")
        if arn is None and region is None:
            raise ConfigError(f"{where}: stream {name} is named without a region: set regionName (or "
                              "kinesisClient.region), where the streams are found by name")
        entries.append((name, arn, where))
    if not entries:
        raise ConfigError(f"{path}: names no stream (an application needs one at least)")
    arns = _checked(entries, region, "regionName or kinesisClient.region")
    own = {stream.name: stream for stream in known}
    return tuple(_of_kind(replace(own.get(name) or StreamSettings(name, None, initial, command), arn=arn), arn)
                 for name, arn in arns.items())


def _checked(entries: Sequence[tuple[str, str | None, str]], region: str | None, region_label: str
             ) -> dict[str, str | None]:
    """Each stream's ARN (None: named), by name; a ConfigError names the entry (where it was set) in
    another region than ``region`` or the first ARN's, or listed twice."""
    arns: dict[str, str | None] = {}
    for name, arn, where in entries:
        if arn is not None:
            if region is not None and arn_region(arn) != region:
                raise ConfigError(f"{where}: {arn} is in region {arn_region(arn)}, not in the Kinesis client's "
                                  f"{region} ({region_label}): an application reads one region")
            first = next((a for a in arns.values() if a is not None), None)
            if first is not None and arn_region(arn) != arn_region(first):
                raise ConfigError(f"{where}: {first} and {arn} are in different regions: an application reads one")
        _add(arns, name, arn, where)
    return arns


def _add(arns: dict[str, str | None], name: str, arn: str | None, where: str) -> None:
    if name in arns:
        raise ConfigError(f"{where}: stream {name} is listed twice (its stream.{name}.* keys must name one stream)")
    arns[name] = arn


def _kind_of(arn: str | None) -> StreamKind:
    return stream_of(arn)[0] if arn else StreamKind.KINESIS


def _key_name(arn: str) -> str:
    """The name a listed ARN's ``stream.<name>.*`` keys use: a Kinesis stream's, a DynamoDB stream's table."""
    return stream_of(arn)[1]


# The per-stream keys a DynamoDB stream refuses, and why.
_NOT_FOR_DYNAMODB = (("consumerArn", "DynamoDB streams have no enhanced fan-out"),
                     ("creationEpoch", "a DynamoDB stream's lease keys carry the adapter's epoch, 1"))


def _of_kind(stream: StreamSettings, arn: str | None) -> StreamSettings:
    """``stream`` (its ``stream.<name>.*`` keys applied) as a DynamoDB stream when ``arn`` is one's:
    named as the adapter names it, its refused keys named."""
    if arn is None or stream_of(arn)[0] is not StreamKind.DYNAMODB:
        return stream
    for (suffix, why), value in zip(_NOT_FOR_DYNAMODB, (stream.consumer_arn, stream.creation_epoch)):
        if value is not None:
            raise ConfigError(f"stream.{stream.name}.{suffix}: {why} (the stream of table {stream.name})")
    return replace(stream, name=adapter_stream_name(arn), kind=StreamKind.DYNAMODB)


def _stream(name: str, arn: str | None, keys: Mapping[str, tuple[Any, str]], command: tuple[str, ...],
            initial: InitialPosition) -> StreamSettings:
    if arn is not None and stream_of(arn)[0] is StreamKind.DYNAMODB:
        for suffix, why in _NOT_FOR_DYNAMODB:
            if suffix in keys:
                raise ConfigError(f"{keys[suffix][1]}: {why} (the stream of table {name})")
    consumer = keys.get("consumerArn")
    if consumer is not None and f":stream/{name}/consumer/" not in consumer[0]:
        raise ConfigError(f"{consumer[1]} = {consumer[0]!r}: not a consumer of stream {name} "
                          f"(arn:aws:kinesis:<region>:<account>:stream/{name}/consumer/<name>:<epoch>)")
    own_command = keys.get("executableName")
    own_position = keys.get("initialPositionInStream")
    epoch = keys.get("creationEpoch")
    return StreamSettings(
        name=name,
        arn=arn,
        initial_position=InitialPosition(own_position[0]) if own_position else initial,
        command=command_words(own_command[0]) if own_command else command,
        consumer_arn=consumer[0] if consumer else None,
        creation_epoch=epoch[0] if epoch else None,
    )

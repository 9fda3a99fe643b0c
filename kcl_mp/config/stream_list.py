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
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kcl_mp.config.settings import InitialPosition, StreamSettings
from kcl_mp.config.values import arn_region, command_words
from kcl_mp.errors import ConfigError

Overrides = Mapping[str, Mapping[str, tuple[Any, str]]]  # stream -> key suffix -> (value, where it was set)


def stream_list(parsed: Mapping[str, Any], labels: Mapping[str, str], overrides: Overrides,
                command: tuple[str, ...], initial: InitialPosition, source: str) -> tuple[StreamSettings, ...]:
    """The streams of ``parsed`` (values by key name; ``labels``: where each key was set), or () for a
    single-stream file, which then may hold no per-stream key.

    ``command`` and ``initial`` are the application's executableName and initial position, which a
    stream without its own override uses.
    """
    listed = [name for name in ("streamArns", "streamNames") if name in parsed]
    if not listed:
        if overrides:
            stream, keys = next(iter(overrides.items()))
            raise ConfigError(f"{next(iter(keys.values()))[1]}: per-stream keys need the list of streams "
                              f"(streamArns or streamNames); this file names one stream")
        return ()
    if len(listed) == 2:
        raise ConfigError(f"{labels['streamArns']} and {labels['streamNames']}: name the streams one way, not both")
    for single in ("streamName", "streamArn"):
        if single in parsed:
            raise ConfigError(f"{labels[single]} and {labels[listed[0]]} both name the streams: keep one (a Java "
                              f"daemon reading this file would consume {single} alone)")
    if "fanoutConfig.consumerArn" in parsed:
        raise ConfigError(f"{labels['fanoutConfig.consumerArn']}: an enhanced fan-out consumer belongs to one stream; "
                          "with streamArns/streamNames set stream.<name>.consumerArn per stream")
    region_key = next((key for key in ("kinesisClient.region", "regionName") if key in parsed), None)
    region = parsed[region_key] if region_key else None
    arns: dict[str, str | None] = {}
    if listed[0] == "streamArns":
        for arn in parsed["streamArns"]:
            where = labels["streamArns"]
            if region is not None and arn_region(arn) != region:
                raise ConfigError(f"{where}: {arn} is in region {arn_region(arn)}, not in the Kinesis client's "
                                  f"{region} ({labels[region_key or '']}): an application reads one region")
            first = next(iter(arns.values()), None)
            if first is not None and arn_region(arn) != arn_region(first):
                raise ConfigError(f"{where}: {first} and {arn} are in different regions: an application reads one")
            _add(arns, arn.rpartition("/")[2], arn, where)
    else:
        if region is None:
            raise ConfigError(f"{labels['streamNames']}: set regionName (or kinesisClient.region) in {source}: the "
                              "streams are found by name in that region")
        for name in parsed["streamNames"]:
            _add(arns, name, None, labels["streamNames"])
    for stream, keys in overrides.items():
        if stream not in arns:
            raise ConfigError(f"{next(iter(keys.values()))[1]}: stream {stream} is not one of {listed[0]} "
                              f"({', '.join(arns)})")
    return tuple(_stream(name, arn, overrides.get(name, {}), command, initial) for name, arn in arns.items())


def _add(arns: dict[str, str | None], name: str, arn: str | None, where: str) -> None:
    if name in arns:
        raise ConfigError(f"{where}: stream {name} is listed twice (its stream.{name}.* keys must name one stream)")
    arns[name] = arn


def _stream(name: str, arn: str | None, keys: Mapping[str, tuple[Any, str]], command: tuple[str, ...],
            initial: InitialPosition) -> StreamSettings:
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

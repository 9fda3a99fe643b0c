"""The ``kclmp_kinesis`` source's options, parsed once into frozen values; an error names
the option and says what it takes.

Options (Databricks' Kinesis names where they exist):

    streamName / streamArn     the stream (a comma-separated list reads several)
    region, endpointUrl        where Kinesis is (an emulator's URL)
    roleArn, roleSessionName   assume this role (credentials otherwise: boto3's default chain)
    initialPosition            latest (default), trim_horizon / earliest,
                               {"at_timestamp": "<ISO-8601 or epoch ms>"},
                               {"at_sequence_number": {"<shardId>": "<seq>", ...}} (others: trim_horizon)
    metadataPath               streaming: where executors record each batch's end per shard
                               (a directory or s3://bucket/prefix; one per query)
    s3Endpoint                 an S3 endpoint URL for an s3:// metadataPath (an emulator)
    maxRecordsPerTrigger       rows per micro-batch at most (shared by the shards that move)
    maxRecordsPerFetch         GetRecords' Limit (default 10000)
    maxFetchDuration           how long a shard's batch reads at most (default 10s)
    maxFetchRate               MB/s a shard is read at most (default: Kinesis' 5 reads a second)
    shardsPerTask              shards one Spark task reads (default 5)
    consumerMode               polling (default) or efo: executors read by SubscribeToShard, a
                               subscription a batch (Kinesis allows a consumer one a shard every
                               5 s: a shard's batches come at most that often; polling for less)
    consumerName / consumerArn efo: the stream consumer (registered by that name on each stream
                               when missing; default kcl-mp-spark), or its ARN (one stream)
    availableNow               true: hold the run to what had arrived at its first plan (Spark < 4.2)
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from kcl_mp.spark.kinesis_read import Connection, ReadLimits

NAME = "kclmp_kinesis"


def _duration_s(key: str, value: str) -> float:
    text = value.strip().lower()
    for unit, scale in (("ms", 0.001), ("s", 1.0), ("m", 60.0)):
        if text.endswith(unit) and text[: -len(unit)].replace(".", "", 1).isdigit():
            return float(text[: -len(unit)]) * scale
    if text.replace(".", "", 1).isdigit():
        return float(text)
    raise ValueError(f"{NAME}: option {key}={value!r} must be a duration such as 10s, 500ms or 2m")


def _epoch_ms(value: Any) -> int:
    if isinstance(value, (int, float)) or (isinstance(value, str) and value.isdigit()):
        return int(value)
    try:
        stamp = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError as exc:
        raise ValueError(f"{NAME}: option initialPosition: at_timestamp {value!r} must be ISO-8601 "
                         "(2026-11-26T10:00:00Z) or epoch milliseconds") from exc
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=timezone.utc)
    return round(stamp.timestamp() * 1000)


@dataclass(frozen=True)
class Initial:
    """Where a query without a checkpoint starts: LATEST, TRIM_HORIZON, AT_TIMESTAMP (``ts``)
    or AT_SEQUENCE_NUMBER (``sequence_numbers`` by shard id)."""

    kind: str = "LATEST"
    ts: int | None = None
    sequence_numbers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, value: str | None) -> Initial:
        text = (value or "latest").strip()
        simple = {"latest": "LATEST", "trim_horizon": "TRIM_HORIZON", "earliest": "TRIM_HORIZON"}
        if text.lower() in simple:
            return cls(simple[text.lower()])
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict) and set(parsed) == {"at_timestamp"}:
            return cls("AT_TIMESTAMP", ts=_epoch_ms(parsed["at_timestamp"]))
        if isinstance(parsed, dict) and set(parsed) == {"at_sequence_number"} and isinstance(
                parsed["at_sequence_number"], dict) and all(
                isinstance(v, str) and v.isdigit() for v in parsed["at_sequence_number"].values()):
            return cls("AT_SEQUENCE_NUMBER", sequence_numbers=tuple(sorted(parsed["at_sequence_number"].items())))
        raise ValueError(f"{NAME}: option initialPosition={text!r} must be latest, trim_horizon, earliest, "
                         '{"at_timestamp": "<ISO-8601 or epoch ms>"} or {"at_sequence_number": {"<shardId>": "<seq>"}}')


@dataclass(frozen=True)
class Options:
    """The source's options, parsed once; errors name the option."""

    streams: tuple[str, ...]
    connection: Connection
    initial: Initial
    metadata: str | None
    s3_endpoint: str | None
    max_rows: int | None
    read: ReadLimits
    shards_per_task: int
    available_now: bool
    fan_out: bool = False
    consumer_name: str = "kcl-mp-spark"
    consumer_arn: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> Options:
        lower = {k.lower(): v for k, v in options.items() if v is not None}
        named = [s.strip() for s in lower.get("streamname", "").split(",") if s.strip()]
        arns = [s.strip() for s in lower.get("streamarn", "").split(",") if s.strip()]
        if not named and not arns:
            raise ValueError(f"{NAME}: no stream: .option('streamName', '<name>') or .option('streamArn', '<arn>')")
        if any(not arn.startswith("arn:") for arn in arns):
            raise ValueError(f"{NAME}: option streamArn={lower['streamarn']!r} must hold stream ARNs (arn:...)")

        def positive(key: str, default: int | None) -> int | None:
            value = lower.get(key.lower())
            if value is None:
                return default
            if not value.strip().isdigit() or int(value) < 1:
                raise ValueError(f"{NAME}: option {key}={value!r} must be a whole number >= 1")
            return int(value)

        mode = lower.get("consumermode", "polling").lower()
        if mode not in ("polling", "efo"):
            raise ValueError(f"{NAME}: option consumerMode={mode!r} must be polling or efo")
        consumer_arn = lower.get("consumerarn")
        if consumer_arn and (mode != "efo" or len(named) + len(arns) != 1):
            raise ValueError(f"{NAME}: option consumerArn goes with consumerMode=efo and one stream "
                             "(several streams: consumerName, registered on each)")
        rate = lower.get("maxfetchrate")
        try:
            rate_mb = float(rate) if rate is not None else None
        except ValueError:
            rate_mb = -1.0
        if rate_mb is not None and rate_mb <= 0:
            raise ValueError(f"{NAME}: option maxFetchRate={rate!r} must be MB a second above 0")
        available_now = lower.get("availablenow", "false").lower()
        if available_now not in ("true", "false"):
            raise ValueError(f"{NAME}: option availableNow={available_now!r} must be true or false")
        records_per_fetch = positive("maxRecordsPerFetch", 10_000)
        assert records_per_fetch is not None
        if records_per_fetch > 10_000:
            raise ValueError(f"{NAME}: option maxRecordsPerFetch={records_per_fetch} is above GetRecords' 10000")
        read = ReadLimits(records_per_fetch=records_per_fetch,
                          fetch_duration_s=_duration_s("maxFetchDuration", lower.get("maxfetchduration", "10s")),
                          fetch_rate_bytes=None if rate_mb is None else rate_mb * 1024 * 1024)
        shards_per_task = positive("shardsPerTask", 5)
        assert shards_per_task is not None
        region = lower.get("region") or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        return cls(tuple(named + arns),
                   Connection(region, lower.get("endpointurl"), lower.get("rolearn"),
                              lower.get("rolesessionname", "kcl-mp-spark")),
                   Initial.parse(lower.get("initialposition")), lower.get("metadatapath"), lower.get("s3endpoint"),
                   positive("maxRecordsPerTrigger", None), read, shards_per_task, available_now == "true",
                   mode == "efo", lower.get("consumername") or "kcl-mp-spark", consumer_arn or None)

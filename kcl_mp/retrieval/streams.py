"""The stream a configuration names, behind the seam (``stream.Stream``): its client, its
implementation, the stream a lease reads and the fetcher that reads one of its shards.

``Config.stream_kind`` (decided once, from ``streamArn`` or the list's ARNs) picks Kinesis or
DynamoDB Streams: a multi-stream application reads streams of one kind.
A multi-stream application's lease names its stream in its key (``leases.multi_stream``):
``lease_stream`` finds that stream's settings, so each lease reads its own stream with its own
processor, and tells that processor which stream it reads.
A DynamoDB stream's client is built from the Kinesis client settings (``kinesisEndpoint``,
``kinesisClient.region``, ``AwsCredentialsProvider``): the stream's endpoint, whatever its kind.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from kcl_mp.aws.clients import DEFAULT_LIMITS, ClientLimits
from kcl_mp.aws.clients import client as aws_client
from kcl_mp.config import Config, InitialPosition
from kcl_mp.config.settings import StreamKind, StreamSettings
from kcl_mp.config.values import stream_of
from kcl_mp.leases.multi_stream import split_key
from kcl_mp.multilang.wire import make_batch
from kcl_mp.retrieval.dynamodb_stream import DynamoDBStream
from kcl_mp.retrieval.fanout import FanOutFetcher
from kcl_mp.retrieval.kinesis_stream import KinesisStream
from kcl_mp.retrieval.polling import Fetcher
from kcl_mp.retrieval.prefetch import PoolBudget
from kcl_mp.retrieval.stream import Stream
from kcl_mp.sequence import ExtendedSequenceNumber

_SERVICE = {StreamKind.KINESIS: "kinesis", StreamKind.DYNAMODB: "dynamodbstreams"}


def stream_client(config: Config, *, raw_records: bool = False, limits: ClientLimits = DEFAULT_LIMITS) -> Any:
    """A boto3 client for the configured stream's API (``aws.clients.client``'s options)."""
    return aws_client(_SERVICE[config.stream_kind], config.kinesis, raw_records=raw_records, limits=limits)


@dataclass(frozen=True)
class LeaseStream:
    """The stream one lease reads, and what its processor is told of it."""

    shard_id: str  # the shard's own id (a multi-stream lease's key also names its stream)
    name: str
    arn: str | None
    identifier: str | None  # a multi-stream lease's serialized stream identifier (account:name:epoch)
    command: tuple[str, ...]  # its processor
    initial_position: InitialPosition
    by_arn: bool = False  # read through its ARN (listed in streamArns: maybe another account's stream)

    @property
    def env(self) -> dict[str, str]:
        """What its processor finds in its environment beside kcl-mp's (the Java daemon sets none)."""
        env = {"KCL_STREAM_NAME": self.name}
        if self.arn:
            env["KCL_STREAM_ARN"] = self.arn
        if self.identifier:
            env["KCL_STREAM_IDENTIFIER"] = self.identifier
        return env

    @property
    def initialize_keys(self) -> Mapping[str, str]:
        """The keys a multi-stream lease's ``initialize`` adds (none for one stream: its message
        stays the Java daemon's; amazon_kclpy ignores extra keys, Node's aws-kcl passes them on)."""
        if self.identifier is None:
            return {}
        return {"streamName": self.name, **({"streamArn": self.arn} if self.arn else {}),
                "streamIdentifier": self.identifier}


def lease_stream(config: Config, key: str, stream: StreamSettings | None = None) -> LeaseStream:
    """The stream lease ``key`` reads: the configured one, or the multi-stream lease's own, with its
    processor and initial position; a stream named by its name gets its ARN in the Kinesis
    client's region and the account its lease key carries. ``stream``: that stream's settings
    where the list has changed since ``config`` was read (``streamListFile``)."""
    split = split_key(key) if config.streams else None
    if split is None:
        return LeaseStream(key, config.stream_name, config.stream_arn, None, config.processor.command,
                           config.initial_position)
    identifier, shard_id = split
    # the table shows no stream that is not listed (not_a_lease)
    stream = stream or next(s for s in config.streams if s.name == identifier.name)
    region = config.kinesis.region
    arn = stream.arn or (f"arn:aws:kinesis:{region}:{identifier.account}:stream/{stream.name}" if region else None)
    return LeaseStream(shard_id, stream.name, arn, identifier.serialized, stream.command, stream.initial_position,
                       by_arn=stream.by_arn)


def listed_stream(config: Config, client: Any, stream: StreamSettings | LeaseStream) -> Stream:
    """One stream of a multi-stream application (its settings, or a lease's), over ``client``."""
    if config.stream_kind is StreamKind.DYNAMODB:
        assert stream.arn is not None  # stream_list: a DynamoDB stream is listed by its ARN
        return DynamoDBStream(client, stream.arn, stream_of(stream.arn)[1], config.dynamodb_streams)
    return KinesisStream(client, stream.name, stream.arn, by_arn=stream.by_arn)


def open_stream(config: Config, client: Any) -> Stream:
    """The configured stream, over ``client`` (``stream_client``'s)."""
    if config.stream_kind is StreamKind.DYNAMODB:
        assert config.stream_arn is not None  # load_config: a DynamoDB stream is named by its ARN
        return DynamoDBStream(client, config.stream_arn, config.stream_name, config.dynamodb_streams)
    return KinesisStream(client, config.stream_name, config.stream_arn)


def open_fetcher(config: Config, client: Any, stream: LeaseStream, start: ExtendedSequenceNumber,
                 log: logging.LoggerAdapter | logging.Logger, pool: PoolBudget,
                 consumer_arn: str | None = None, hash_range: tuple[int, int] | None = None) -> Fetcher:
    """The fetcher of one lease's shard: enhanced fan-out when the host registered a consumer,
    else polling through its stream; records as the stream's processors expect them, KPL user
    records outside ``hash_range`` (the lease's) dropped as Java drops them."""
    shard_id, initial = stream.shard_id, stream.initial_position
    if consumer_arn:
        return FanOutFetcher(client, stream.name, shard_id, start, initial, config.retrieval, make_batch,
                             log, pool=pool, consumer_arn=consumer_arn, hash_range=hash_range)
    keyless = config.stream_kind is StreamKind.DYNAMODB and config.dynamodb_streams.record_format == "ADAPTER_V1"
    encode = partial(make_batch, keyless=True) if keyless else make_batch
    source = listed_stream(config, client, stream) if config.streams else open_stream(config, client)
    return Fetcher(source, shard_id, start, initial, config.retrieval, encode, log, pool=pool, hash_range=hash_range)

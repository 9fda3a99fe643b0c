"""The stream a configuration names, behind the seam (``stream.Stream``): its client, its
implementation and the fetcher that reads one of its shards.

``Config.stream_kind`` (decided once, from ``streamArn``) picks Kinesis or DynamoDB Streams.
A DynamoDB stream's client is built from the Kinesis client settings (``kinesisEndpoint``,
``kinesisClient.region``, ``AwsCredentialsProvider``): the stream's endpoint, whatever its kind.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

from kcl_mp.aws.clients import DEFAULT_LIMITS, ClientLimits
from kcl_mp.aws.clients import client as aws_client
from kcl_mp.config import Config, InitialPosition
from kcl_mp.config.settings import StreamKind
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


def open_stream(config: Config, client: Any) -> Stream:
    """The configured stream, over ``client`` (``stream_client``'s)."""
    if config.stream_kind is StreamKind.DYNAMODB:
        assert config.stream_arn is not None  # load_config: a DynamoDB stream is named by its ARN
        return DynamoDBStream(client, config.stream_arn, config.stream_name, config.dynamodb_streams)
    return KinesisStream(client, config.stream_name, config.stream_arn)


def open_fetcher(config: Config, client: Any, shard_id: str, start: ExtendedSequenceNumber,
                 log: logging.LoggerAdapter | logging.Logger, pool: PoolBudget,
                 consumer_arn: str | None = None) -> Fetcher:
    """The fetcher of one shard: enhanced fan-out when the host registered a consumer, else
    polling through the stream; records as the stream's processors expect them."""
    initial: InitialPosition = config.initial_position
    if consumer_arn:
        return FanOutFetcher(client, config.stream_name, shard_id, start, initial, config.retrieval, make_batch,
                             log, pool=pool, consumer_arn=consumer_arn)
    keyless = config.stream_kind is StreamKind.DYNAMODB and config.dynamodb_streams.record_format == "ADAPTER_V1"
    encode = partial(make_batch, keyless=True) if keyless else make_batch
    return Fetcher(open_stream(config, client), shard_id, start, initial, config.retrieval, encode, log, pool=pool)

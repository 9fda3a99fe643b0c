"""The stream a configuration names, behind the seam (``stream.Stream``): its client, its
implementation and the fetcher that reads one of its shards."""

from __future__ import annotations

import logging
from typing import Any

from kcl_mp.aws.clients import DEFAULT_LIMITS, ClientLimits
from kcl_mp.aws.clients import client as aws_client
from kcl_mp.config import Config, InitialPosition
from kcl_mp.multilang.wire import make_batch
from kcl_mp.retrieval.fanout import FanOutFetcher
from kcl_mp.retrieval.kinesis_stream import KinesisStream
from kcl_mp.retrieval.polling import Fetcher
from kcl_mp.retrieval.prefetch import PoolBudget
from kcl_mp.retrieval.stream import Stream
from kcl_mp.sequence import ExtendedSequenceNumber


def stream_client(config: Config, *, raw_records: bool = False, limits: ClientLimits = DEFAULT_LIMITS) -> Any:
    """A boto3 client for the configured stream's API (``aws.clients.client``'s options)."""
    return aws_client("kinesis", config.kinesis, raw_records=raw_records, limits=limits)


def open_stream(config: Config, client: Any) -> Stream:
    """The configured stream, over ``client`` (``stream_client``'s)."""
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
    return Fetcher(open_stream(config, client), shard_id, start, initial, config.retrieval, make_batch, log, pool=pool)

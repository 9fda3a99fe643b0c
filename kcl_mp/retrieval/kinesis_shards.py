"""A Kinesis data stream's shards: DescribeStreamSummary at start-up, ListShards, and whether a
shard that GetShardIterator or SubscribeToShard did not find has really left the stream.

The calls both retrievals make (polling and enhanced fan-out: deploy/iam), apart from the
reading ones (``kinesis_stream``, ``fanout``).
"""

from __future__ import annotations

from datetime import datetime, timezone
from functools import partial
from typing import Any

from kcl_mp.aws.errors import NOT_FOUND, call, error_code
from kcl_mp.config import InitialPosition
from kcl_mp.errors import ConfigError, DependencyError
from kcl_mp.leases.shard_sync import Shard
from kcl_mp.retrieval.stream import ShardGone
from kcl_mp.sequence import AT_TIMESTAMP, LATEST

LIST_SHARDS_PAGE = 1000  # ListShards' own default page size, stated


def describe(kinesis: Any, stream_name: str, stream_arn: str | None) -> str:
    """The stream's ARN. At start-up, before anything is written: Kinesis answers and the
    stream exists (a misspelt streamName must not leave a lease table behind)."""
    return describe_summary(kinesis, stream_name, stream_arn)[0]


def describe_summary(kinesis: Any, stream_name: str, stream_arn: str | None) -> tuple[str, int]:
    """``describe``'s ARN, and the stream's creation time in ms since 1970 (a multi-stream
    application's epoch when nothing else gives one: ``leases.multi_stream.choose_epoch``)."""
    arn, name = stream_arn, stream_name
    summary = call(f"describing stream {arn or name}", partial(
        kinesis.describe_stream_summary, **({"StreamARN": arn} if arn else {"StreamName": name})),
        {NOT_FOUND: None})
    if summary is None:
        key = f"streamArn {arn}" if arn else f"streamName {name}"
        raise ConfigError(f"{key}: no such stream at {kinesis.meta.endpoint_url}")
    described = summary["StreamDescriptionSummary"]
    return str(described["StreamARN"]), int(described["StreamCreationTimestamp"].timestamp() * 1000)


def check_gone(kinesis: Any, stream_name: str, shard_id: str, exc: BaseException, stream_arn: str | None = None
               ) -> None:
    """Raise ``ShardGone`` when ``exc`` is ResourceNotFound and ListShards confirms that the
    shard is not in the stream; a listing that fails raises its own error."""
    if error_code(exc) == NOT_FOUND and shard_id not in {
            shard.shard_id for shard in list_shards(kinesis, stream_name, stream_arn=stream_arn)}:
        raise ShardGone(f"shard {shard_id} is not in stream {stream_name} ({NOT_FOUND}, and ListShards "
                        "does not list it)") from exc


def list_shards(kinesis: Any, stream_name: str, shard_filter: dict[str, Any] | None = None,
                stream_arn: str | None = None) -> list[Shard]:
    """Every page of ListShards (of the stream by ``stream_arn`` when given: it may be another
    account's). An expired NextToken restarts the listing (bounded)."""
    first: dict[str, Any] = {**({"StreamARN": stream_arn} if stream_arn else {"StreamName": stream_name}),
                             "MaxResults": LIST_SHARDS_PAGE}
    if shard_filter:
        first["ShardFilter"] = dict(shard_filter)
    for _ in range(3):
        shards: list[Shard] = []
        kwargs = first
        for _ in range(10_000):  # bounded paging
            page = call(f"ListShards on {stream_name}", partial(kinesis.list_shards, **kwargs),
                        {"ExpiredNextTokenException": None})
            if page is None:
                break
            shards.extend(Shard.from_api(s) for s in page.get("Shards", ()))
            token = page.get("NextToken")
            if not token:
                return shards
            kwargs = {"NextToken": token, "MaxResults": LIST_SHARDS_PAGE}
    raise DependencyError(f"ListShards on {stream_name}: the NextToken kept expiring")


def shard_filter(initial: InitialPosition) -> dict[str, Any]:
    """ListShards' ShardFilter for the shards open at the initial position (empty table)."""
    if initial.kind == LATEST:
        return {"Type": "AT_LATEST"}
    if initial.kind == AT_TIMESTAMP and initial.timestamp is not None:
        return {"Type": "AT_TIMESTAMP", "Timestamp": datetime.fromtimestamp(initial.timestamp, tz=timezone.utc)}
    return {"Type": "AT_TRIM_HORIZON"}


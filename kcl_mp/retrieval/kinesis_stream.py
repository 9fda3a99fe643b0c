"""A Kinesis data stream behind the stream seam (``stream.Stream``): the listing of
``kinesis_shards``, and reading by GetShardIterator and GetRecords.

Listing is ListShards, every page (an expired NextToken restarts it, bounded); an empty lease
table lists only the shards open at the initial position (ShardFilter AT_LATEST,
AT_TRIM_HORIZON, AT_TIMESTAMP). A shard's children come with its last GetRecords
(ChildShards). GetShardIterator's ResourceNotFound is the shard's end only once ListShards
confirms the shard is not listed: Java takes the error alone as the end
(KinesisDataFetcher.advanceIteratorTo); kcl-mp first confirms it, so a throttled or
half-created stream never ends a live shard.
"""

from __future__ import annotations

from typing import Any

from kcl_mp.aws.errors import AWS_ERRORS, error_code, translate
from kcl_mp.config import InitialPosition
from kcl_mp.config.settings import StreamKind
from kcl_mp.leases.shard_sync import MAX_HASH_KEY, Shard
from kcl_mp.retrieval import kinesis_shards
from kcl_mp.retrieval.stream import IteratorExpired, Page, Position

_EXPIRED = frozenset({"ExpiredIteratorException"})


class KinesisStream:
    kind = StreamKind.KINESIS
    max_hash_key = MAX_HASH_KEY
    skip_trimmed = False  # Kinesis never answers TrimmedDataAccessException
    filters_at_position = True
    empty_read_wait = 1

    def __init__(self, kinesis: Any, stream_name: str, stream_arn: str | None = None, *, by_arn: bool = False):
        """``by_arn``: every call names the stream by ``stream_arn`` (a multi-stream application's
        stream of streamArns, which may be another account's: Kinesis then needs the ARN)."""
        self.kinesis, self.stream_name, self.stream_arn = kinesis, stream_name, stream_arn
        self.address_arn = stream_arn if by_arn else None
        self._address = {"StreamARN": stream_arn} if self.address_arn else {"StreamName": stream_name}

    @property
    def name(self) -> str:
        return self.stream_name

    def describe(self) -> str:
        return kinesis_shards.describe(self.kinesis, self.stream_name, self.stream_arn)

    def list_shards(self, at: InitialPosition | None = None) -> list[Shard]:
        shard_filter = kinesis_shards.shard_filter(at) if at else None
        return kinesis_shards.list_shards(self.kinesis, self.stream_name, shard_filter, self.address_arn)

    def shard_iterator(self, shard_id: str, position: Position) -> str:
        kwargs: dict[str, Any] = {**self._address, "ShardId": shard_id, "ShardIteratorType": position.kind}
        if position.sequence_number is not None:
            kwargs["StartingSequenceNumber"] = position.sequence_number
        if position.timestamp is not None:
            kwargs["Timestamp"] = position.timestamp
        try:
            return str(self.kinesis.get_shard_iterator(**kwargs)["ShardIterator"])
        except AWS_ERRORS as exc:
            error = translate(exc, f"GetShardIterator on {shard_id}")
            kinesis_shards.check_gone(self.kinesis, self.stream_name, shard_id, exc, self.address_arn)
            raise error from exc

    def get_records(self, shard_id: str, iterator: str, limit: int) -> Page:
        try:
            response = self.kinesis.get_records(ShardIterator=iterator, Limit=limit,
                                                **({"StreamARN": self.address_arn} if self.address_arn else {}))
        except AWS_ERRORS as exc:
            if error_code(exc) in _EXPIRED:
                raise IteratorExpired() from exc
            raise translate(exc, f"GetRecords on {shard_id}") from exc
        # raw JSON may say null for the children
        return Page(response.get("Records") or [], response.get("NextShardIterator"),
                    response.get("MillisBehindLatest"), tuple(response.get("ChildShards") or ()))

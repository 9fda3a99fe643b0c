"""A DynamoDB stream behind the stream seam (``stream.Stream``), by the rules of the DynamoDB
Streams Kinesis Adapter (2.x; docs/dynamodb-streams.md has the sources):

- listing: DescribeStream, ``Limit`` 100 a page from ``ExclusiveStartShardId`` (there is no
  ListShards and no filter by position: an empty lease table is planned from the whole tree);
  a throttled listing (about 10 calls a second per stream) fails, and the shard sync tries
  again after listShardsBackoffTimeInMillis, up to maxListShardsRetryAttempts (the adapter:
  a second, 50 times);
- shards have one parent at most, and the adapter's hash range 0..1 (so the lease audit's key
  space is 0..1);
- children, at a shard's end: DescribeStream with ShardFilter CHILD_SHARDS, up to 10 tries with
  backoff (a child appears a moment after its parent closes), then the full listing, and
  failing that none (the shard sync then finds them);
- reading: GetRecords at most 1,000; ExpiredIteratorException (15 minutes) -> ``IteratorExpired``,
  TrimmedDataAccessException (24 hours) -> ``DataTrimmed``, ResourceNotFound on a shard -> its
  end (``ShardGone``); LimitExceeded (a third reader of a shard) is a ``ThrottledError`` the
  fetcher backs off from;
- records: Kinesis-shaped for the fetcher, ``Data`` the adapter's JSON (``dynamodb_record``),
  ``PartitionKey`` the sequence number (adapter 2.x; ADAPTER_V1: written as null by
  ``wire.make_batch(keyless=True)``), arrival time the record's ApproximateCreationDateTime;
  millisBehindLatest is now less the last record's creation time (None for an empty page);
- pacing: after an empty read the next waits twice idleTimeBetweenReadsInMillis (the adapter's
  sleep controller: a quiet shard costs half the reads).
"""

from __future__ import annotations

import base64
import random
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from kcl_mp.aws.errors import AWS_ERRORS, NOT_FOUND, call, error_code, translate
from kcl_mp.backoff import Backoff
from kcl_mp.config.settings import DynamoDBStreamsSettings, StreamKind
from kcl_mp.errors import ConfigError, DependencyError
from kcl_mp.leases.shard_sync import Shard
from kcl_mp.retrieval.dynamodb_record import adapter_json, epoch_millis
from kcl_mp.retrieval.stream import DataTrimmed, IteratorExpired, Page, Position, ShardGone

DESCRIBE_PAGE = 100  # DescribeStream's Limit: the API's maximum
CHILD_TRIES = 10  # the adapter's getChildShards: backoff 50 ms to 1 s, then the full listing
CHILD_BACKOFF = Backoff(base_s=0.05, cap_s=1.0)
HASH_RANGE = (0, 1)  # the adapter's mapping of every shard (KinesisMapperUtil)
_EXPIRED = "ExpiredIteratorException"
_TRIMMED = "TrimmedDataAccessException"
_ITERATOR_TYPES = frozenset({"TRIM_HORIZON", "LATEST", "AT_SEQUENCE_NUMBER", "AFTER_SEQUENCE_NUMBER"})


class DynamoDBStream:
    kind = StreamKind.DYNAMODB
    max_hash_key = HASH_RANGE[1]
    filters_at_position = False
    empty_read_wait = 2  # DynamoDBStreamsSleepTimeController: twice the idle time after an empty read

    def __init__(self, client: Any, arn: str, table: str, settings: DynamoDBStreamsSettings,
                 *, sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.time,
                 rng: random.Random | None = None):
        self.dynamodbstreams, self.arn, self.table, self.settings = client, arn, table, settings
        self.sleep, self.clock, self.rng = sleep, clock, rng or random.Random()
        self.v1 = settings.record_format == "ADAPTER_V1"

    @property
    def name(self) -> str:
        return self.arn

    @property
    def skip_trimmed(self) -> bool:
        return self.settings.skip_records_behavior == "SKIP_RECORDS_TO_TRIM_HORIZON"

    # -- listing ----------------------------------------------------------------------

    def describe(self) -> str:
        """The stream's ARN once DescribeStream shows it exists and is enabled (start-up)."""
        found = self._describe({"StreamArn": self.arn, "Limit": 1}, {NOT_FOUND: NOT_FOUND})
        if found is None:
            endpoint = self.dynamodbstreams.meta.endpoint_url
            raise ConfigError(f"streamArn {self.arn}: no such stream at {endpoint} (does table {self.table} have a "
                              "stream? DescribeTable's LatestStreamArn names its current one)")
        status = found.get("StreamStatus")
        if status in ("DISABLED", "DISABLING"):
            raise ConfigError(f"streamArn {self.arn}: the stream of table {self.table} is {status}: nothing new "
                              "arrives in it; enable the table's stream and use its new LatestStreamArn")
        return str(found.get("StreamArn", self.arn))

    def list_shards(self, at: Any = None) -> list[Shard]:
        """Every shard, a page of 100 at a time (``at`` is ignored: no filter by position)."""
        shards: list[Shard] = []
        seen: set[str] = set()
        request: dict[str, Any] = {"StreamArn": self.arn, "Limit": DESCRIBE_PAGE}
        for _ in range(100_000):  # bounded paging
            page = self._describe(request)
            shards.extend(_shard(s) for s in page.get("Shards", ()))
            last = page.get("LastEvaluatedShardId")
            if not last:
                return shards
            if last in seen:
                raise DependencyError(f"DescribeStream on {self.arn}: LastEvaluatedShardId {last} came twice")
            seen.add(last)
            request = {**request, "ExclusiveStartShardId": last}
        raise DependencyError(f"DescribeStream on {self.arn}: too many pages")

    def child_shards(self, shard_id: str) -> tuple[dict[str, Any], ...]:
        """The children of closed shard ``shard_id``, as ChildShards entries: ShardFilter CHILD_SHARDS,
        tried a few times, then the full listing (a service without the filter, a late child).
        Never raises: without them (the listing failed too) the shard sync finds them."""
        request = {"StreamArn": self.arn, "Limit": DESCRIBE_PAGE,
                   "ShardFilter": {"Type": "CHILD_SHARDS", "ShardId": shard_id}}
        for attempt in range(CHILD_TRIES):
            try:
                children = [_shard(s) for s in self._describe(request).get("Shards", ())]
            except DependencyError as error:
                if not error.retriable:
                    break  # a filter this endpoint does not know: the listing instead
                children = []
            found = [c for c in children if shard_id in c.parent_shard_ids]
            if found:
                return tuple(_child_entry(c) for c in found)
            self.sleep(CHILD_BACKOFF.next_delay(attempt, self.rng))
        try:
            listed = self.list_shards()
        except DependencyError:
            return ()
        return tuple(_child_entry(c) for c in listed if shard_id in c.parent_shard_ids)

    def _describe(self, request: dict[str, Any], outcomes: dict[str, str] | None = None) -> Any:
        """One DescribeStream, its StreamDescription (None for an error code in ``outcomes``).
        Throttled, it raises a ThrottledError: the shard sync tries again after
        listShardsBackoffTimeInMillis (the adapter waits a second, up to 50 times), never
        holding the supervisor's loop (its renewals) meanwhile."""
        answer = call(f"DescribeStream on {self.arn}", partial(self.dynamodbstreams.describe_stream, **request),
                      outcomes or {})
        return answer["StreamDescription"] if isinstance(answer, dict) else None

    # -- reading ----------------------------------------------------------------------

    def shard_iterator(self, shard_id: str, position: Position) -> str:
        if position.kind not in _ITERATOR_TYPES:
            raise DependencyError(f"shard {shard_id}: DynamoDB Streams have no {position.kind} iterator",
                                  retriable=False)
        request: dict[str, Any] = {"StreamArn": self.arn, "ShardId": shard_id, "ShardIteratorType": position.kind}
        if position.sequence_number is not None:
            request["SequenceNumber"] = position.sequence_number
        try:
            return str(self.dynamodbstreams.get_shard_iterator(**request)["ShardIterator"])
        except AWS_ERRORS as exc:
            raise self._reading_error(exc, shard_id, "GetShardIterator") from exc

    def get_records(self, shard_id: str, iterator: str, limit: int) -> Page:
        try:
            answer = self.dynamodbstreams.get_records(ShardIterator=iterator, Limit=limit)
        except AWS_ERRORS as exc:
            raise self._reading_error(exc, shard_id, "GetRecords") from exc
        raw = answer.get("Records") or ()
        records = [self._kinesis_shaped(r) for r in raw]
        behind = None
        if raw and raw[-1]["dynamodb"].get("ApproximateCreationDateTime") is not None:
            behind = max(0, int(self.clock() * 1000) - epoch_millis(raw[-1]["dynamodb"]["ApproximateCreationDateTime"]))
        following = answer.get("NextShardIterator")
        children = self.child_shards(shard_id) if following is None else ()
        return Page(records, following, behind, children)

    def _reading_error(self, exc: BaseException, shard_id: str, operation: str) -> Exception:
        code = error_code(exc)
        message = getattr(exc, "response", {}).get("Error", {}).get("Message", "")
        if code == _EXPIRED:
            return IteratorExpired(message)
        if code == _TRIMMED:
            return DataTrimmed(message or code)
        if code == NOT_FOUND:
            return ShardGone(f"shard {shard_id} is not in stream {self.arn} ({operation}: {NOT_FOUND})")
        return translate(exc, f"{operation} on {shard_id}")

    def _kinesis_shaped(self, record: dict[str, Any]) -> dict[str, Any]:
        stream = record["dynamodb"]
        sequence = stream["SequenceNumber"]
        return {"SequenceNumber": sequence, "Data": base64.b64encode(adapter_json(record, self.v1)).decode("ascii"),
                "PartitionKey": "" if self.v1 else sequence,
                "ApproximateArrivalTimestamp": stream.get("ApproximateCreationDateTime")}


def _shard(description: dict[str, Any]) -> Shard:
    numbers = description.get("SequenceNumberRange", {})
    parent = description.get("ParentShardId")
    return Shard(description["ShardId"], (parent,) if parent else (), HASH_RANGE,
                 numbers.get("StartingSequenceNumber"), numbers.get("EndingSequenceNumber"))


def _child_entry(shard: Shard) -> dict[str, Any]:
    """A ChildShards entry, as Kinesis' GetRecords gives them at a shard's end."""
    return {"ShardId": shard.shard_id, "ParentShards": list(shard.parent_shard_ids),
            "HashKeyRange": {"StartingHashKey": str(HASH_RANGE[0]), "EndingHashKey": str(HASH_RANGE[1])}}

"""DynamoDB Streams as the service behaves, in front of moto's tables.

moto's server answers the DynamoDB Streams API for one hard-coded shard per table that never
ends: no lineage, no rollover, no shard end, no paging, no trimming, no iterator expiry, no
throttling, and an unknown shard answers HTTP 500. A consumer's hard parts are exactly those,
so this middleware serves the Streams API itself (``X-Amz-Target: DynamoDBStreams_20120810.*``)
from a shard tree of its own, fed by the change records moto keeps for each table:

- each record goes to the open shard whose (internal) hash range holds its item key, so one
  item's changes stay in one line of descent and a reader that finishes parents before
  children sees them in order;
- shards roll over (one child) after ``rollover_records`` records or on request, and split
  (two children, one parent each) on request; a closed shard has an EndingSequenceNumber and
  its last GetRecords answer has no NextShardIterator;
- DescribeStream pages with ``Limit`` (at most 100) and ``ExclusiveStartShardId`` and honours
  ``ShardFilter`` CHILD_SHARDS; GetRecords takes at most 1,000; AT_TIMESTAMP is refused;
- iterators expire after ``iterator_ttl_s`` (ExpiredIteratorException), records older than a
  trim are gone (TrimmedDataAccessException), a third reader of one shard within
  ``reader_window_s`` is throttled (LimitExceededException), DescribeStream above
  ``describe_per_second`` is throttled, unknown streams and shards are ResourceNotFound.

Records carry what the service sends: eventVersion 1.1, the table's region, the
ApproximateCreationDateTime in whole epoch seconds. Tests steer it over HTTP:
``POST /_kclmp/dynamodb-streams`` with ``{"action": "rollover"|"split"|"trim"|"ttl_delete"|
"configure", ...}`` (see ``Admin``).
"""

from __future__ import annotations

import io
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from kcl_mp.embedded.stream_tree import Iterator, Settings, Shard, Stream, StreamsError, wire_json

TARGET = "DynamoDBStreams_20120810."
UPDATE_TABLE = "DynamoDB_20120810.UpdateTable"
ADMIN_PATH = "/_kclmp/dynamodb-streams"
TTL_IDENTITY = {"PrincipalId": "dynamodb.amazonaws.com", "Type": "Service"}  # the API's names (Lambda's: lower case)


class Service:
    """The Streams API over the streams this emulator keeps (one lock: moto's DynamoDB lock)."""

    def __init__(self, tables: Callable[[], Iterable[Any]], lock: threading.RLock,
                 clock: Callable[[], float] = time.time, settings: Settings | None = None):
        self.tables, self.lock, self.clock = tables, lock, clock
        self.settings = settings or Settings()
        self.streams: dict[str, Stream] = {}
        self.readers: dict[tuple[str, str], dict[str, float]] = {}
        self.describes: deque[float] = deque()
        self.chains = 0
        self.ttl_deletes: set[tuple[str, str]] = set()  # (table, keys json) of the next REMOVE to mark

    # moto's records into the streams' shard trees
    def sync(self) -> None:
        now = self.clock()
        for table in self.tables():
            spec = table.stream_specification or {}
            label = table.latest_stream_label
            if not label:
                continue
            arn = f"{table.table_arn}/stream/{label}"
            stream = self.streams.get(arn)
            if stream is None:
                for old in self.streams.values():
                    if old.table == table.name and old.enabled:
                        old.disable()
                stream = self.streams[arn] = Stream(arn, label, table.name, spec.get("StreamViewType", "KEYS_ONLY"),
                                                    table.schema, now, self.settings)
            if not spec.get("StreamEnabled"):
                if stream.enabled:
                    stream.disable()
                continue
            source = table.stream_shard
            fresh = source.items[stream.ingested:] if source is not None else []
            for item in fresh:
                stream.append(self._record(item.record, table), now, self.settings)
            stream.ingested += len(fresh)

    def _record(self, moto_record: dict[str, Any], table: Any) -> dict[str, Any]:
        record = dict(moto_record, eventVersion="1.1", awsRegion=table.region_name)
        if record["eventName"] == "REMOVE":
            mark = (table.name, json.dumps(record["dynamodb"]["Keys"], sort_keys=True))
            if mark in self.ttl_deletes:
                self.ttl_deletes.discard(mark)
                record["userIdentity"] = dict(TTL_IDENTITY)
        return record

    def stream(self, arn: str) -> Stream:
        self.sync()
        stream = self.streams.get(arn)
        if stream is None:
            raise StreamsError("ResourceNotFoundException", f"Requested resource not found: Stream: {arn} not found")
        return stream

    # the API
    def list_streams(self, body: dict[str, Any]) -> dict[str, Any]:
        self.sync()
        arns = [a for a, s in self.streams.items() if body.get("TableName") in (None, s.table)]
        start = body.get("ExclusiveStartStreamArn")
        if start in arns:
            arns = arns[arns.index(start) + 1:]
        limit = int(body.get("Limit", 100))
        out: dict[str, Any] = {"Streams": [{"StreamArn": a, "TableName": self.streams[a].table,
                                            "StreamLabel": self.streams[a].label} for a in arns[:limit]]}
        if len(arns) > limit:
            out["LastEvaluatedStreamArn"] = arns[limit - 1]
        return out

    def describe_stream(self, body: dict[str, Any]) -> dict[str, Any]:
        now = self.clock()
        while self.describes and self.describes[0] <= now - 1:
            self.describes.popleft()
        if len(self.describes) >= self.settings.describe_per_second:
            raise StreamsError("LimitExceededException", "Rate exceeded for DescribeStream")
        self.describes.append(now)
        limit = int(body.get("Limit", 100))
        if not 1 <= limit <= 100:
            raise StreamsError("ValidationException", f"1 validation error detected: Value '{limit}' at 'limit' "
                               "failed to satisfy constraint: Member must have value less than or equal to 100")
        shard_filter = body.get("ShardFilter") or {}
        children_of = shard_filter.get("ShardId") if shard_filter.get("Type") == "CHILD_SHARDS" else None
        stream = self.stream(body["StreamArn"])
        return {"StreamDescription": stream.describe(limit, body.get("ExclusiveStartShardId"), children_of)}

    def get_shard_iterator(self, body: dict[str, Any]) -> dict[str, Any]:
        kind = body.get("ShardIteratorType")
        if kind not in ("TRIM_HORIZON", "LATEST", "AT_SEQUENCE_NUMBER", "AFTER_SEQUENCE_NUMBER"):
            raise StreamsError("ValidationException", f"1 validation error detected: Value '{kind}' at "
                               "'shardIteratorType' failed to satisfy constraint: Member must satisfy enum value "
                               "set: [AFTER_SEQUENCE_NUMBER, LATEST, AT_SEQUENCE_NUMBER, TRIM_HORIZON]")
        stream = self.stream(body["StreamArn"])
        shard = stream.shard(body["ShardId"])
        if kind == "TRIM_HORIZON":
            after = max(shard.start, shard.trimmed_below) - 1
        elif kind == "LATEST":
            after = shard.end if shard.end is not None else stream.next_sequence - 1
        else:
            try:
                sequence = int(body["SequenceNumber"])
            except (KeyError, ValueError) as e:
                raise StreamsError("ValidationException", f"Invalid SequenceNumber for {kind}") from e
            if sequence < shard.trimmed_below:
                raise StreamsError("TrimmedDataAccessException", f"Requested sequence number {sequence} is beyond "
                                   f"the trim horizon of shard {shard.shard_id}")
            if sequence < shard.start or (shard.end is not None and sequence > shard.end):
                raise StreamsError("ValidationException", f"Invalid SequenceNumber {sequence} for shard "
                                   f"{shard.shard_id}")
            after = sequence - 1 if kind == "AT_SEQUENCE_NUMBER" else sequence
        self.chains += 1
        token = Iterator(stream.arn, shard.shard_id, after, self.clock(), f"c{self.chains}")
        return {"ShardIterator": token.encode()}

    def get_records(self, body: dict[str, Any]) -> dict[str, Any]:
        limit = int(body.get("Limit", self.settings.max_get_records))
        if not 1 <= limit <= self.settings.max_get_records:
            raise StreamsError("ValidationException", f"1 validation error detected: Value '{limit}' at 'limit' "
                               f"failed to satisfy constraint: Member must have value less than or equal to "
                               f"{self.settings.max_get_records}")
        token = Iterator.decode(str(body.get("ShardIterator", "")))
        now = self.clock()
        if now - token.issued > self.settings.iterator_ttl_s:
            raise StreamsError("ExpiredIteratorException", "Iterator expired. The iterator was created at time "
                               f"{token.issued:.0f} while right now it is {now:.0f} which is further in the future "
                               f"than the tolerated delay of {self.settings.iterator_ttl_s:.0f} seconds.")
        stream = self.stream(token.arn)
        shard = stream.shard(token.shard_id)
        self._admit_reader(stream, shard, token.chain, now)
        if token.after + 1 < shard.trimmed_below:
            raise StreamsError("TrimmedDataAccessException", f"Iterator of shard {shard.shard_id} points before its "
                               "trim horizon")
        records = [r for r in shard.records if int(r["dynamodb"]["SequenceNumber"]) > token.after][:limit]
        out: dict[str, Any] = {"Records": records}
        last = int(records[-1]["dynamodb"]["SequenceNumber"]) if records else token.after
        read_all = not any(int(r["dynamodb"]["SequenceNumber"]) > last for r in shard.records)
        if not (shard.end is not None and read_all):
            out["NextShardIterator"] = replace(token, after=last, issued=now).encode()
        return out

    def _admit_reader(self, stream: Stream, shard: Shard, chain: str, now: float) -> None:
        seen = self.readers.setdefault((stream.arn, shard.shard_id), {})
        for other, at in list(seen.items()):
            if at <= now - self.settings.reader_window_s:
                del seen[other]
        if chain not in seen and len(seen) >= self.settings.max_readers:
            raise StreamsError("LimitExceededException", f"Rate exceeded for shard {shard.shard_id} in stream "
                               f"{stream.arn}: more than {self.settings.max_readers} readers")
        seen[chain] = now

    # what tests steer
    def admin(self, body: dict[str, Any]) -> dict[str, Any]:
        action = body.get("action")
        now = self.clock()
        if action == "configure":
            known = Settings.__dataclass_fields__
            unknown = sorted(set(body) - {"action"} - set(known))
            if unknown:
                raise StreamsError("ValidationException", f"unknown settings {unknown}")
            self.settings = replace(self.settings, **{k: v for k, v in body.items() if k != "action"})
            return {"settings": self.settings.__dict__}
        if action == "ttl_delete":
            self.ttl_deletes.add((body["table"], json.dumps(body["keys"], sort_keys=True)))
            return {}
        stream = self._stream_of(body)
        if action in ("rollover", "split"):
            targets = [stream.shard(body["shard"])] if body.get("shard") else stream.open_shards()
            opened = [c for s in targets for c in stream.close(s, 1 if action == "rollover" else 2, now)]
            return {"closed": [s.shard_id for s in targets], "opened": [s.shard_id for s in opened]}
        if action == "trim":
            older_than = now - float(body.get("older_than_s", 0))
            for shard in stream.shards:
                kept = [r for r in shard.records if r["dynamodb"]["ApproximateCreationDateTime"] >= older_than]
                if len(kept) < len(shard.records):
                    gone = shard.records[len(shard.records) - len(kept) - 1]
                    shard.trimmed_below = int(gone["dynamodb"]["SequenceNumber"]) + 1
                    shard.records = kept
            return {"trimmed_below": {s.shard_id: s.trimmed_below for s in stream.shards}}
        raise StreamsError("ValidationException", f"unknown action {action!r}")

    def _stream_of(self, body: dict[str, Any]) -> Stream:
        self.sync()
        if body.get("arn"):
            return self.stream(body["arn"])
        live = [s for s in self.streams.values() if s.table == body.get("table") and s.enabled]
        if not live:
            raise StreamsError("ResourceNotFoundException", f"no enabled stream for table {body.get('table')!r}")
        return live[0]


OPERATIONS = {"ListStreams": Service.list_streams, "DescribeStream": Service.describe_stream,
              "GetShardIterator": Service.get_shard_iterator, "GetRecords": Service.get_records}


class StreamsMiddleware:
    """WSGI: the Streams API and its admin path served here, everything else passed to moto."""

    def __init__(self, app: Callable[..., Iterable[bytes]], service: Service):
        self.app, self.service = app, service

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        admin = environ.get("PATH_INFO") == ADMIN_PATH and environ.get("REQUEST_METHOD") == "POST"
        length = int(environ.get("CONTENT_LENGTH") or 0)
        if target == UPDATE_TABLE:
            # the records written before a stream is disabled are the stream's: take them first
            environ["wsgi.input"] = io.BytesIO(environ["wsgi.input"].read(length) if length else b"")
            with self.service.lock:
                self.service.sync()
                return self.app(environ, start_response)
        if not target.startswith(TARGET) and not admin:
            return self.app(environ, start_response)
        raw = environ["wsgi.input"].read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
            operation = OPERATIONS.get(target[len(TARGET):]) if not admin else Service.admin
            if operation is None:
                raise StreamsError("UnknownOperationException", f"unknown operation {target}")
            with self.service.lock:
                answer, status = operation(self.service, body), "200 OK"
        except StreamsError as e:
            answer = {"__type": f"com.amazonaws.dynamodb.v20120810#{e.code}", "message": e.message}
            status = f"{e.status} Bad Request"
        except (ValueError, KeyError, TypeError) as e:
            answer = {"__type": "com.amazonaws.dynamodb.v20120810#ValidationException", "message": repr(e)}
            status = "400 Bad Request"
        payload = json.dumps(answer, default=wire_json).encode()
        start_response(status, [("Content-Type", "application/x-amz-json-1.0"),
                                ("Content-Length", str(len(payload)))])
        return [payload]


def moto_tables() -> Iterable[Any]:
    """Every table of every account and region moto holds (its DynamoDB backends, in process)."""
    from moto.dynamodb.models import dynamodb_backends

    for regions in list(dynamodb_backends.values()):
        for backend in list(regions.values()):
            yield from list(backend.tables.values())


def wrap(app: Callable[..., Iterable[bytes]], lock: threading.RLock) -> StreamsMiddleware:
    return StreamsMiddleware(app, Service(moto_tables, lock))


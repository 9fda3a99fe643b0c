"""One DynamoDB stream's shard tree as the service keeps it, apart from HTTP and moto.

Shards over internal hash ranges of item keys (so one item's changes stay in one line of
descent), their lineage when they roll over or split, sequence numbers, the pages of
DescribeStream, and what a shard iterator string carries. ``dynamodb_streams`` serves the
API from these.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

HASH_SPACE = 1 << 128
FIRST_SEQUENCE = 10**20  # 21 digits, as the service's sequence numbers have at least
SEQUENCE_STEP = 100


def wire_json(value: Any) -> str:
    """A value ``json`` cannot write, as the wire has it: a binary attribute (moto keeps bytes) in base64."""
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    raise TypeError(f"{type(value).__name__} is not JSON")


class StreamsError(Exception):
    """An error the service answers with: its code (the ``__type``) and HTTP status."""

    def __init__(self, code: str, message: str, status: int = 400):
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


@dataclass(frozen=True)
class Settings:
    """How the emulated service behaves; ``configure`` changes it at run time."""

    shards: int = 1  # open shards a new stream starts with
    rollover_records: int = 0  # close a shard after this many records (0: only on request)
    iterator_ttl_s: float = 900.0
    reader_window_s: float = 5.0
    max_readers: int = 2  # distinct iterator chains reading one shard within the window
    describe_per_second: int = 10
    max_get_records: int = 1000


@dataclass
class Shard:
    shard_id: str
    parent: str | None
    low: int  # hash range [low, high) of item keys: internal, the API has none
    high: int
    start: int
    end: int | None = None
    records: list[dict[str, Any]] = field(default_factory=list)
    trimmed_below: int = 0  # sequence numbers below this are gone

    def describe(self) -> dict[str, Any]:
        span: dict[str, str] = {"StartingSequenceNumber": str(self.start)}
        if self.end is not None:
            span["EndingSequenceNumber"] = str(self.end)
        out: dict[str, Any] = {"ShardId": self.shard_id, "SequenceNumberRange": span}
        if self.parent:
            out["ParentShardId"] = self.parent
        return out


class Stream:
    """One stream's shard tree and records (the service's, not moto's)."""

    def __init__(self, arn: str, label: str, table: str, view_type: str, key_schema: list[Any],
                 created: float, settings: Settings):
        self.arn, self.label, self.table = arn, label, table
        self.view_type, self.key_schema, self.created = view_type, key_schema, created
        self.enabled = True
        self.next_sequence = FIRST_SEQUENCE
        self.shards: list[Shard] = []  # in creation order: ids sort the same way
        self.ingested = 0  # moto records taken so far
        width = HASH_SPACE // max(1, settings.shards)
        for n in range(max(1, settings.shards)):
            high = HASH_SPACE if n == settings.shards - 1 else (n + 1) * width
            self._open(None, n * width, high, created)

    def _open(self, parent: str | None, low: int, high: int, now: float) -> Shard:
        digest = hashlib.sha256(f"{self.arn}/{len(self.shards)}".encode()).hexdigest()[:8]
        shard = Shard(f"shardId-{int(now * 1000):020d}-{digest}", parent, low, high, self.next_sequence)
        self.shards.append(shard)
        return shard

    def shard(self, shard_id: str) -> Shard:
        for shard in self.shards:
            if shard.shard_id == shard_id:
                return shard
        raise StreamsError("ResourceNotFoundException", f"Requested resource not found: Shard: {shard_id} in "
                           f"Stream: {self.arn} not found")

    def open_shards(self) -> list[Shard]:
        return [s for s in self.shards if s.end is None]

    def append(self, record: dict[str, Any], now: float, settings: Settings) -> None:
        keys = json.dumps(record["dynamodb"]["Keys"], sort_keys=True, default=wire_json).encode()
        point = int.from_bytes(hashlib.md5(keys).digest(), "big")
        shard = next(s for s in self.open_shards() if s.low <= point < s.high)
        sequence = self.next_sequence
        self.next_sequence += SEQUENCE_STEP
        dynamodb = dict(record["dynamodb"], SequenceNumber=str(sequence), ApproximateCreationDateTime=int(now))
        shard.records.append(dict(record, dynamodb=dynamodb))
        if settings.rollover_records and len(shard.records) >= settings.rollover_records:
            self.close(shard, 1, now)

    def close(self, shard: Shard, children: int, now: float) -> list[Shard]:
        """End ``shard`` and open ``children`` (1: a rollover, 2: a split) over its hash range."""
        if shard.end is not None:
            raise StreamsError("ValidationException", f"shard {shard.shard_id} is already closed")
        shard.end = self.next_sequence - 1
        self.next_sequence += SEQUENCE_STEP
        if not self.enabled:
            return []
        width = (shard.high - shard.low) // children
        return [self._open(shard.shard_id, shard.low + n * width,
                           shard.high if n == children - 1 else shard.low + (n + 1) * width, now)
                for n in range(children)]

    def disable(self) -> None:
        self.enabled = False
        for shard in self.open_shards():
            shard.end = self.next_sequence - 1
        self.next_sequence += SEQUENCE_STEP

    def describe(self, limit: int, after: str | None, children_of: str | None) -> dict[str, Any]:
        shards = self.shards
        if children_of is not None:
            self.shard(children_of)
            shards = [s for s in shards if s.parent == children_of]
        if after is not None:
            ids = [s.shard_id for s in shards]
            shards = shards[ids.index(after) + 1:] if after in ids else [s for s in shards if s.shard_id > after]
        page = shards[:limit]
        out: dict[str, Any] = {
            "StreamArn": self.arn, "StreamLabel": self.label, "TableName": self.table,
            "StreamStatus": "ENABLED" if self.enabled else "DISABLED", "StreamViewType": self.view_type,
            "CreationRequestDateTime": self.created, "KeySchema": self.key_schema,
            "Shards": [s.describe() for s in page],
        }
        if len(shards) > limit:
            out["LastEvaluatedShardId"] = page[-1].shard_id
        return out


@dataclass(frozen=True)
class Iterator:
    """What a shard iterator string carries: where to read, when it was issued, whose chain it is."""

    arn: str
    shard_id: str
    after: int  # the next record read has a sequence number above this
    issued: float
    chain: str

    def encode(self) -> str:
        raw = json.dumps([self.arn, self.shard_id, self.after, self.issued, self.chain]).encode()
        return base64.urlsafe_b64encode(raw).decode()

    @staticmethod
    def decode(text: str) -> Iterator:
        try:
            arn, shard_id, after, issued, chain = json.loads(base64.urlsafe_b64decode(text.encode()))
            return Iterator(str(arn), str(shard_id), int(after), float(issued), str(chain))
        except (ValueError, TypeError) as e:
            raise StreamsError("ValidationException", f"Invalid ShardIterator: {text[:40]!r}") from e

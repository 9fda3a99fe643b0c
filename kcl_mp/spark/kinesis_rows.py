"""The ``kclmp_kinesis`` source's rows: a shard's records as Arrow batches of its schema, KPL
aggregates de-aggregated with their sub-sequence numbers and user records outside the
shard's hash key range dropped (``deaggregate.user_record_runs``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol

import pyarrow as pa
import pybase64

from kcl_mp.retrieval.deaggregate import is_aggregate, user_record_runs
from kcl_mp.spark import arrow_columns as columns

ARROW = pa.schema([
    ("partitionKey", pa.string()), ("data", pa.binary()), ("stream", pa.string()), ("shardId", pa.string()),
    ("sequenceNumber", pa.string()), ("subSequenceNumber", pa.int64()),
    ("approximateArrivalTimestamp", pa.timestamp("us", tz="UTC"))])
TIMESTAMP = ARROW.field("approximateArrivalTimestamp").type
SCHEMA = ("partitionKey string, data binary, stream string, shardId string, sequenceNumber string, "
          "subSequenceNumber bigint, approximateArrivalTimestamp timestamp")
ROWS_PER_ARROW_BATCH = 10_000


class ShardPart(Protocol):
    """Whose records they are (a ``kinesis_read.ShardTake``)."""

    @property
    def stream(self) -> str: ...

    @property
    def shard_id(self) -> str: ...

    @property
    def hash_range(self) -> tuple[int, int]: ...


def arrival_ms(record: Mapping[str, Any]) -> int:
    stamp = record.get("ApproximateArrivalTimestamp")
    if stamp is None:
        return 0
    return round(stamp * 1000) if isinstance(stamp, (int, float)) else round(stamp.timestamp() * 1000)


def rows(take: ShardPart, records: list[dict[str, Any]]) -> Iterator[pa.RecordBatch]:
    """The records' rows as Arrow batches of the source's schema. A run of records with no KPL
    aggregate goes straight into columns (the common case: 2.7 us a 1 KB record, against 5.7
    through ``user_record_runs``' tuples); one with an aggregate through them."""
    for start in range(0, len(records), ROWS_PER_ARROW_BATCH):
        run = records[start:start + ROWS_PER_ARROW_BATCH]
        datas = [record["Data"] for record in run]
        if any(is_aggregate(data) for data in datas):
            for users in user_record_runs(run, None, ROWS_PER_ARROW_BATCH, take.hash_range):
                yield _arrow(take, [u[1] for u in users], [u[0] for u in users], [u[2] for u in users],
                             [u[4] for u in users], [u[3] for u in users])
        else:
            yield _arrow(take, [record["PartitionKey"] for record in run], datas,
                         [record["SequenceNumber"] for record in run], [0] * len(run),
                         [arrival_ms(record) for record in run])


def _arrow(take: ShardPart, keys: list[str], datas: list[Any], seqs: list[str], subs: list[int],
           arrivals_ms: list[int]) -> pa.RecordBatch:
    """One Arrow batch; ``datas`` base64 (the wire's, checked: Kinesis sends nothing else) or bytes."""
    n = len(keys)
    b64 = pybase64.b64decode
    return pa.RecordBatch.from_arrays([
        columns.string(keys),
        columns.binary([b64(data, validate=True) if isinstance(data, str) else data for data in datas]),
        columns.repeated(take.stream, n),
        columns.repeated(take.shard_id, n),
        columns.string(seqs),
        columns.int64(subs),
        columns.int64([ms * 1000 for ms in arrivals_ms], TIMESTAMP),
    ], schema=ARROW)

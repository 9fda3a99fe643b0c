#!/usr/bin/env python3
"""The landing sink (an amazon_kclpy processor, so it runs unchanged under kcl-mp and the Java
MultiLangDaemon): records land as Parquet files per stream and shard, and Kinesis is
checkpointed only once a file is committed.

    executableName = python3 -m kcl_mp.spark.sink --landing /data/landing
    executableName = python3 -m kcl_mp.spark.sink --landing s3://bucket/prefix --stream orders --batch-seconds 5

A file is written when its batch holds ``--batch-records`` records or ``--batch-bytes`` bytes,
or its first record waited ``--batch-seconds`` (set ``callProcessRecordsEvenForEmptyRecordList
= true`` so that a quiet shard's last records are written on time), and on shutdownRequested
and shardEnded. Committing is atomic (:mod:`kcl_mp.spark.storage`). Then the processor
checkpoints the file's last record (every ``--checkpoint-every`` files; shard end and shutdown
always). A crash anywhere loses nothing: what was not checkpointed is delivered again and
landed again as another file; the ``kclmp_landing`` source emits each position once
(:mod:`kcl_mp.spark.layout`). On leaseLost the unwritten batch is dropped for the same reason.

Layout, names and the ``kclmp.*`` metadata (where each file continues from, its last position,
the writer's last checkpoint, the shard's end): :mod:`kcl_mp.spark.layout`. Files are
zstd-compressed.

Columns (``SCHEMA``): stream, shardId, sequenceNumber (string: 56 digits do not fit a
decimal(38)), subSequenceNumber, partitionKey, approximateArrivalTimestamp, data (binary) and
ingestTime (when the file was written: the Spark 3.5 fallback reader's watermark).

The stream's name: ``--stream``, else the ``KCL_STREAM_NAME`` environment variable (kcl-mp
sets it for its processors), else the name in ``KCL_STREAM_ARN``. The Java daemon sets
neither: name the stream with ``--stream`` there.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
from amazon_kclpy import kcl
from amazon_kclpy.v3 import processor

from kcl_mp.spark.layout import (
    META_CHECKPOINTED,
    META_ENDED,
    META_FROM,
    META_LAST,
    META_SHARD,
    META_STREAM,
    START,
    FileName,
    Position,
    format_position,
    parse_name,
    shard_prefix,
)
from kcl_mp.spark.storage import Storage

SCHEMA = pa.schema([
    ("stream", pa.string()),
    ("shardId", pa.string()),
    ("sequenceNumber", pa.string()),
    ("subSequenceNumber", pa.int64()),
    ("partitionKey", pa.string()),
    ("approximateArrivalTimestamp", pa.timestamp("ms", tz="UTC")),
    ("data", pa.binary()),
    ("ingestTime", pa.timestamp("ms", tz="UTC")),
])
RETRYABLE = ("ThrottlingException", "KinesisClientLibDependencyException")
ROW_OVERHEAD = 96  # bytes a row costs beyond its data and partition key (sequence number, times)


def initial_position(sequence_number: str | None, sub_sequence_number: int | None) -> Position:
    """Where a processor was initialized: its lease's checkpoint, or the shard's start for
    TRIM_HORIZON / LATEST / AT_TIMESTAMP (nothing before it was delivered to this consumer)."""
    if sequence_number and sequence_number.isdigit():
        return int(sequence_number), sub_sequence_number or 0
    return START


@dataclass(frozen=True)
class Rolling:
    """When a file is written (``records``, ``bytes``, ``seconds`` after its first record) and
    how many files go between checkpoints."""

    records: int
    bytes: int
    seconds: float
    checkpoint_every: int


class LandingSink(processor.RecordProcessorBase):
    def __init__(self, storage: Storage, stream: str, rolling: Rolling):
        self.storage, self.stream, self.rolling = storage, stream, rolling
        self.writer = uuid.uuid4().hex[:12]
        self.shard = ""
        self.rows: list[tuple[str, int, str, int, bytes]] = []
        self.bytes = 0
        self.first_at: float | None = None
        self.files = 0
        self.unchecked = 0  # files committed since the last checkpoint
        self.after: Position = START  # where the next file continues from
        self.checkpointed: Position = START

    def log(self, message: str) -> None:
        sys.stderr.write(f"kcl_mp.spark.sink writer={self.writer} stream={self.stream} shard={self.shard}: {message}\n")
        sys.stderr.flush()

    def initialize(self, initialize_input: Any) -> None:
        self.shard = initialize_input.shard_id
        self.after = self.checkpointed = initial_position(initialize_input.sequence_number,
                                                          initialize_input.sub_sequence_number)
        self.log(f"landing in {self.storage.location(shard_prefix(self.stream, self.shard))} "
                 f"from {format_position(self.after)}")

    def process_records(self, process_records_input: Any) -> None:
        for record in process_records_input.records:
            if self.first_at is None:
                self.first_at = time.monotonic()
            data = record.binary_data
            self.rows.append((record.sequence_number, record.sub_sequence_number or 0, record.partition_key,
                              record.timestamp_millis, data))
            self.bytes += len(data) + len(record.partition_key) + ROW_OVERHEAD
            if len(self.rows) >= self.rolling.records or self.bytes >= self.rolling.bytes:
                self.write()
        if self.first_at is not None and time.monotonic() - self.first_at >= self.rolling.seconds:
            self.write()
        if self.unchecked >= self.rolling.checkpoint_every:
            self.checkpoint(process_records_input.checkpointer, self.after)

    def write(self, ended: bool = False) -> None:
        """Commit the batch as one file; nothing is checkpointed before this returns. At the
        shard's end with nothing left to write, an empty file (first = last = where the shard's
        records ended) records the end for readers."""
        if not self.rows and not (ended and self.after != START):
            return
        rows, self.rows, self.bytes, self.first_at = self.rows, [], 0, None
        self.files += 1
        relative, table = landing_file(self.stream, self.shard, rows, self.after, self.checkpointed, ended,
                                       datetime.now(timezone.utc), self.writer, self.files)
        self.storage.commit(relative, table)
        self.after = parse_name(relative.rpartition("/")[2]).last
        self.unchecked += 1

    def checkpoint(self, checkpointer: Any, position: Position | None) -> None:
        """Checkpoint ``position`` (None: SHARD_END); a refusal is logged, never raised."""
        for attempt in range(5):
            try:
                if position is None:
                    checkpointer.checkpoint()
                else:
                    checkpointer.checkpoint(str(position[0]), position[1])
                    self.checkpointed = position
                self.unchecked = 0
                return
            except kcl.CheckpointError as e:
                if e.value in RETRYABLE:
                    time.sleep(0.2 * (attempt + 1))
                    continue
                self.log(f"checkpoint at {format_position(position or self.after)} not made: {e.value} "
                         "(the lease moved: the new owner delivers again)")
                return

    def lease_lost(self, lease_lost_input: Any) -> None:
        self.log(f"lease lost: {len(self.rows)} unwritten records dropped (the next owner delivers them again)")
        self.rows, self.bytes, self.first_at = [], 0, None

    def shard_ended(self, shard_ended_input: Any) -> None:
        self.write(ended=True)
        self.checkpoint(shard_ended_input.checkpointer, None)

    def shutdown_requested(self, shutdown_requested_input: Any) -> None:
        self.write()
        if self.unchecked:
            self.checkpoint(shutdown_requested_input.checkpointer, self.after)


def landing_file(stream: str, shard: str, rows: Sequence[tuple[str, int, str, int, bytes]], after: Position,
                 checkpointed: Position, ended: bool, written: datetime, writer: str, n: int) -> tuple[str, pa.Table]:
    """A file's name (relative to the landing root) and table: ``rows`` are (sequence number,
    sub-sequence number, partition key, arrival ms, data); none: the shard's end at ``after``."""
    seqs, subs, keys, arrivals, data = zip(*rows) if rows else ((), (), (), (), ())
    first: Position = (int(seqs[0]), subs[0]) if rows else after
    last: Position = (int(seqs[-1]), subs[-1]) if rows else after
    count = len(rows)
    table = pa.Table.from_arrays([
        pa.array([stream] * count, pa.string()),
        pa.array([shard] * count, pa.string()),
        pa.array(seqs, pa.string()),
        pa.array(subs, pa.int64()),
        pa.array(keys, pa.string()),
        pa.array(arrivals, pa.int64()).cast(pa.timestamp("ms", tz="UTC")),
        pa.array(data, pa.binary()),
        pa.array([written] * count, pa.timestamp("ms", tz="UTC")),
    ], schema=SCHEMA).replace_schema_metadata({
        META_STREAM: stream, META_SHARD: shard, META_FROM: format_position(after),
        META_LAST: format_position(last), META_CHECKPOINTED: format_position(checkpointed),
        META_ENDED: "true" if ended else "false"})
    return shard_prefix(stream, shard) + str(FileName(first, last, writer, n)), table


def stream_name(option: str | None, environ: dict[str, str]) -> str | None:
    """``--stream``, else KCL_STREAM_NAME, else the name in KCL_STREAM_ARN (``...:stream/<name>``)."""
    if option:
        return option
    if environ.get("KCL_STREAM_NAME"):
        return environ["KCL_STREAM_NAME"]
    arn = environ.get("KCL_STREAM_ARN", "")
    return arn.rpartition(":stream/")[2] or None


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m kcl_mp.spark.sink",
                                description="land Kinesis records as Parquet files (a kcl-mp / KCL processor)")
    p.add_argument("--landing", required=True, help="a directory, file:///dir, or s3://bucket/prefix")
    p.add_argument("--stream", help="the stream's name in the layout and the stream column "
                                    "(default: $KCL_STREAM_NAME, or the name in $KCL_STREAM_ARN)")
    p.add_argument("--batch-records", type=int, default=10000, help="records per file at most (default 10000)")
    p.add_argument("--batch-bytes", type=int, default=64 * 1024 * 1024,
                   help="a file's records' bytes at most, roughly (default 64 MiB)")
    p.add_argument("--batch-seconds", type=float, default=60.0,
                   help="write a batch once its first record waited this long (default 60)")
    p.add_argument("--checkpoint-every", type=int, default=1,
                   help="checkpoint after every N files (default 1; more: fewer DynamoDB writes, more replay)")
    p.add_argument("--s3-endpoint", help="an S3 endpoint URL (a local emulator)")
    args = p.parse_args(argv)
    if args.batch_records < 1 or args.batch_bytes < 1 or args.batch_seconds <= 0 or args.checkpoint_every < 1:
        p.error("--batch-records, --batch-bytes and --checkpoint-every must be >= 1, --batch-seconds > 0")
    stream = stream_name(args.stream, dict(os.environ))
    if stream is None:
        p.error("--stream is required: neither KCL_STREAM_NAME nor KCL_STREAM_ARN is set")
    rolling = Rolling(args.batch_records, args.batch_bytes, args.batch_seconds, args.checkpoint_every)
    sink = LandingSink(Storage(args.landing, args.s3_endpoint), stream, rolling)
    kcl.KCLProcess(sink).run()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A sink processor (amazon_kclpy): records land as Parquet files, one per shard and batch,
and Kinesis is checkpointed only once a file is committed.

    executableName = python3 processors/python/parquet_sink.py --landing /data/landing
    executableName = python3 processors/python/parquet_sink.py --landing s3://bucket/prefix --batch-records 50000

A batch is written when it holds ``--batch-records`` records or its first record waited
``--batch-seconds`` (set ``callProcessRecordsEvenForEmptyRecordList = true`` so that a
quiet shard's last records are written on time), and on shutdownRequested and shardEnded.
Committing is atomic: in a directory the file is written under a hidden temporary name
(``.name.tmp``, which Spark's file source ignores), fsynced and renamed; on S3 the one
PutObject is the commit (an object is visible whole or not at all). Then the processor
checkpoints the batch's last record (every ``--checkpoint-every`` files; shard end and
shutdown always). A crash anywhere loses nothing: what was not checkpointed is delivered
again and written again; the Spark job drops the duplicates on (shardId, sequenceNumber,
subSequenceNumber). On leaseLost the unwritten batch is dropped for the same reason.

Columns: shardId, sequenceNumber (string: 56 digits do not fit a decimal(38)),
subSequenceNumber, partitionKey, approximateArrivalTimestamp, data (binary), and
ingestTime (when this file was written: the Spark job's watermark, which a lagging shard
cannot move the way arrival time can).

File names: ``<shardId>.<first sequence>.<last sequence>.<writer>-<n>.parquet``; the
writer part is unique to each processor process, so a batch written again after a
failover is a new file, never a half-overwritten one.
"""

import argparse
import os
import sys
import time
import uuid
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.parquet as pq
from amazon_kclpy import kcl
from amazon_kclpy.v3 import processor

SCHEMA = pa.schema([
    ("shardId", pa.string()),
    ("sequenceNumber", pa.string()),
    ("subSequenceNumber", pa.int64()),
    ("partitionKey", pa.string()),
    ("approximateArrivalTimestamp", pa.timestamp("ms", tz="UTC")),
    ("data", pa.binary()),
    ("ingestTime", pa.timestamp("ms", tz="UTC")),
])
RETRYABLE = ("ThrottlingException", "KinesisClientLibDependencyException")


class Landing:
    """Where files go: a local directory, or an S3 prefix (``s3://bucket/prefix``)."""

    def __init__(self, url, s3_endpoint=None):
        self.url = url
        if url.startswith("s3://"):
            import boto3

            bucket, _, prefix = url[len("s3://"):].partition("/")
            self.bucket, self.prefix = bucket, prefix.strip("/")
            self.s3 = boto3.client("s3", endpoint_url=s3_endpoint)
            self.directory = None
        else:
            self.directory = url[len("file://"):] if url.startswith("file://") else url
            os.makedirs(self.directory, exist_ok=True)

    def commit(self, name, table):
        """Write ``table`` as ``name``, atomically; returns where it went."""
        if self.directory is None:
            sink = pa.BufferOutputStream()
            pq.write_table(table, sink)
            key = f"{self.prefix}/{name}" if self.prefix else name
            self.s3.put_object(Bucket=self.bucket, Key=key, Body=sink.getvalue().to_pybytes())
            return f"s3://{self.bucket}/{key}"
        final = os.path.join(self.directory, name)
        temporary = os.path.join(self.directory, f".{name}.tmp")
        with open(temporary, "wb") as out:
            pq.write_table(table, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, final)
        directory = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(directory)  # the rename itself survives a power cut
        finally:
            os.close(directory)
        return final


class ParquetSink(processor.RecordProcessorBase):
    def __init__(self, landing, batch_records, batch_seconds, checkpoint_every):
        self.landing = landing
        self.batch_records = batch_records
        self.batch_seconds = batch_seconds
        self.checkpoint_every = checkpoint_every
        self.writer = uuid.uuid4().hex[:12]
        self.shard = None
        self.rows = []
        self.first_at = None
        self.files = 0
        self.unchecked = 0  # files committed since the last checkpoint
        self.last = None  # (sequence, sub-sequence) of the last record written

    def log(self, message):
        sys.stderr.write(f"parquet_sink {self.shard}: {message}\n")
        sys.stderr.flush()

    def initialize(self, initialize_input):
        self.shard = initialize_input.shard_id
        self.log(f"writing to {self.landing.url} from {initialize_input.sequence_number}")

    def process_records(self, process_records_input):
        for record in process_records_input.records:
            if self.first_at is None:
                self.first_at = time.monotonic()
            self.rows.append((record.sequence_number, record.sub_sequence_number or 0, record.partition_key,
                              record.timestamp_millis, record.binary_data))
            if len(self.rows) >= self.batch_records:
                self.write()
        if self.first_at is not None and time.monotonic() - self.first_at >= self.batch_seconds:
            self.write()
        if self.unchecked >= self.checkpoint_every:
            self.checkpoint(process_records_input.checkpointer, *self.last)

    def write(self):
        """Commit the batch as one file; nothing is checkpointed before this returns."""
        if not self.rows:
            return
        rows, self.rows, self.first_at = self.rows, [], None
        now = datetime.now(timezone.utc)
        columns = list(zip(*rows))
        table = pa.Table.from_arrays([
            pa.array([self.shard] * len(rows), pa.string()),
            pa.array(columns[0], pa.string()),
            pa.array(columns[1], pa.int64()),
            pa.array(columns[2], pa.string()),
            pa.array(columns[3], pa.int64()).cast(pa.timestamp("ms", tz="UTC")),
            pa.array(columns[4], pa.binary()),
            pa.array([now] * len(rows), pa.timestamp("ms", tz="UTC")),
        ], schema=SCHEMA)
        self.files += 1
        name = f"{self.shard}.{rows[0][0]}.{rows[-1][0]}.{self.writer}-{self.files}.parquet"
        self.landing.commit(name, table)
        self.last = (rows[-1][0], rows[-1][1])
        self.unchecked += 1

    def checkpoint(self, checkpointer, sequence_number=None, sub_sequence_number=None):
        for attempt in range(5):
            try:
                checkpointer.checkpoint(sequence_number, sub_sequence_number)
                self.unchecked = 0
                return
            except kcl.CheckpointError as e:
                if e.value in RETRYABLE:
                    time.sleep(0.2 * (attempt + 1))
                    continue
                self.log(f"checkpoint not made: {e.value}")  # the lease moved: the new owner re-delivers
                return

    def lease_lost(self, lease_lost_input):
        self.log(f"lease lost: {len(self.rows)} unwritten records dropped (the next owner delivers them again)")
        self.rows = []

    def shard_ended(self, shard_ended_input):
        self.write()
        self.checkpoint(shard_ended_input.checkpointer)

    def shutdown_requested(self, shutdown_requested_input):
        self.write()
        if self.last is not None and self.unchecked:
            self.checkpoint(shutdown_requested_input.checkpointer, *self.last)


def main(argv=None):
    p = argparse.ArgumentParser(description="land Kinesis records as Parquet files (a kcl-mp / KCL processor)")
    p.add_argument("--landing", required=True, help="a directory, file:///dir, or s3://bucket/prefix")
    p.add_argument("--batch-records", type=int, default=10000, help="records per file at most (default 10000)")
    p.add_argument("--batch-seconds", type=float, default=60.0,
                   help="write a batch once its first record waited this long (default 60)")
    p.add_argument("--checkpoint-every", type=int, default=1,
                   help="checkpoint after every N files (default 1; more: fewer DynamoDB writes, more replay)")
    p.add_argument("--s3-endpoint", help="an S3 endpoint URL (a local emulator)")
    args = p.parse_args(argv)
    if args.batch_records < 1 or args.batch_seconds <= 0 or args.checkpoint_every < 1:
        p.error("--batch-records and --checkpoint-every must be >= 1, --batch-seconds > 0")
    sink = ParquetSink(Landing(args.landing, args.s3_endpoint), args.batch_records, args.batch_seconds,
                       args.checkpoint_every)
    kcl.KCLProcess(sink).run()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A ready-made record processor written with amazon_kclpy, unchanged from what runs under
the Java MultiLangDaemon: it counts records per partition key and checkpoints.

Checkpoint policy: after every batch once ``CHECKPOINT_SECONDS`` (default 0: every batch)
have passed since the last checkpoint, and on shutdownRequested and shardEnded. Retryable
checkpoint errors (ThrottlingException, KinesisClientLibDependencyException) are retried a
few times with a pause; ShutdownException means the lease moved, so it stops trying.
"""

import os
import sys
import time
from collections import Counter

from amazon_kclpy import kcl
from amazon_kclpy.v3 import processor

RETRYABLE = ("ThrottlingException", "KinesisClientLibDependencyException")


class SampleProcessor(processor.RecordProcessorBase):
    def __init__(self):
        self.shard = None
        self.every_s = float(os.environ.get("CHECKPOINT_SECONDS", "0"))
        self.last_checkpoint = 0.0
        self.counts = Counter()
        self.total = 0

    def log(self, message):
        sys.stderr.write(f"sample_processor {self.shard}: {message}\n")
        sys.stderr.flush()

    def checkpoint(self, checkpointer, sequence_number=None, sub_sequence_number=None):
        for attempt in range(5):
            try:
                checkpointer.checkpoint(sequence_number, sub_sequence_number)
                self.last_checkpoint = time.monotonic()
                return
            except kcl.CheckpointError as e:
                if e.value in RETRYABLE:
                    time.sleep(0.2 * (attempt + 1))
                    continue
                self.log(f"checkpoint not made: {e.value}")
                return

    def initialize(self, initialize_input):
        self.shard = initialize_input.shard_id
        self.log(f"starting at {initialize_input.sequence_number}")

    def process_records(self, process_records_input):
        records = process_records_input.records
        for record in records:
            self.counts[record.partition_key] += 1
        self.total += len(records)
        if records and time.monotonic() - self.last_checkpoint >= self.every_s:
            last = records[-1]
            self.checkpoint(process_records_input.checkpointer, last.sequence_number, last.sub_sequence_number)

    def lease_lost(self, lease_lost_input):
        self.log(f"lease lost after {self.total} records")

    def shard_ended(self, shard_ended_input):
        self.log(f"shard ended after {self.total} records")
        self.checkpoint(shard_ended_input.checkpointer)

    def shutdown_requested(self, shutdown_requested_input):
        self.log(f"shutting down after {self.total} records over {len(self.counts)} keys")
        self.checkpoint(shutdown_requested_input.checkpointer)


if __name__ == "__main__":
    kcl.KCLProcess(SampleProcessor()).run()

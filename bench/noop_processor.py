#!/usr/bin/env python3
"""The benchmark's processor: amazon_kclpy, does nothing with the records, checkpoints every
``$BENCH_CHECKPOINT_EVERY`` records (default 1000), and appends one line per batch to
``$BENCH_OUT/<shard>`` ("<records> <unix time>"; ``<stream identifier>.<shard>`` in a
multi-stream application, whose streams' shard ids repeat) so the benchmark sees the first
record and the last without asking the daemon anything."""

import os
import time

from amazon_kclpy import kcl
from amazon_kclpy.v3 import processor


class Noop(processor.RecordProcessorBase):
    def __init__(self):
        self.every = int(os.environ.get("BENCH_CHECKPOINT_EVERY", "1000"))
        self.since = 0
        self.fd = -1

    def initialize(self, initialize_input):
        stream = os.environ.get("KCL_STREAM_IDENTIFIER")  # kcl-mp's, for a multi-stream application's shards
        path = os.path.join(os.environ["BENCH_OUT"], f"{stream}.{initialize_input.shard_id}" if stream else
                            initialize_input.shard_id)
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def process_records(self, process_records_input):
        records = process_records_input.records
        os.write(self.fd, f"{len(records)} {time.time():.6f}\n".encode())
        self.since += len(records)
        if records and self.since >= self.every:
            last = records[-1]
            process_records_input.checkpointer.checkpoint(last.sequence_number, last.sub_sequence_number)
            self.since = 0

    def lease_lost(self, lease_lost_input):
        pass

    def shard_ended(self, shard_ended_input):
        shard_ended_input.checkpointer.checkpoint()

    def shutdown_requested(self, shutdown_requested_input):
        pass


if __name__ == "__main__":
    kcl.KCLProcess(Noop()).run()

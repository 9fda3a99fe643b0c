#!/usr/bin/env python3
"""A processor written with amazon_kclpy that records everything it is given.

Each child appends JSON lines to ``$RECORDER_DIR/<shard>.<pid>.jsonl``: one per event
(initialize, shutdownRequested, leaseLost, shardEnded, checkpoint results) and one per record,
each with the wall-clock time it was written (``at``; a record also carries ``got``, when its
processRecords arrived: the moment of delivery, and ``behind``, that processRecords'
millisBehindLatest). It checkpoints after every
``$RECORDER_CHECKPOINT_EVERY`` records (at the last record of the batch), and on
shutdownRequested and shardEnded. ``$RECORDER_BATCH_DELAY_S`` makes each processRecords take
that long (a busy processor). ``$RECORDER_SHARD_END_REFUSALS`` = N: the first N shardEnded of
each shard are answered without a checkpoint (a processor that forgets to checkpoint at shard
end). ``$RECORDER_FAULT``: see ``_fault``. ``$RECORDER_HOST``: a name written into the
initialize line (which daemon ran this child); so is ``$KCL_STREAM_IDENTIFIER`` as ``stream``
when kcl-mp sets it (a multi-stream application's processor).
``$RECORDER_BURN_MS`` = SHARD=MS,...,*=MS: CPU milliseconds burned per record (process time,
so a busy machine slows it down but does not make it cheaper), by shard, ``*`` for the others
(shards whose records cost more CPU than others').
``$RECORDER_STDERR_ENV`` = NAME: write that environment variable to stderr at initialize (a
careless processor printing its credentials; the daemon's logs must not show them).
``$RECORDER_LEASES_AT_SHARD_END`` = TABLE@ENDPOINT: at shardEnded, before checkpointing, the
lease keys the table holds, scanned at that endpoint, go into the shardEnded line (``leases``):
whether the children's leases existed before the processor heard of the shard's end.
``$RECORDER_STDERR_FLOOD`` = SHARD:LINES:CHARS: at initialize of SHARD, write one line of
100,000 bytes to stderr, then LINES lines of CHARS characters (``flood 00000 xxx...``).
"""

import json
import os
import signal
import sys
import time

from amazon_kclpy import kcl
from amazon_kclpy.v3 import processor


def _epoch_ms(value):
    """kclpy 3.x gives a datetime, older versions the raw milliseconds."""
    return round(value.timestamp() * 1000) if hasattr(value, "timestamp") else value


def _burn(cpu_s):
    """Spend ``cpu_s`` seconds of this process's CPU."""
    until = time.process_time() + cpu_s
    while cpu_s and time.process_time() < until:
        pass


class Recorder(processor.RecordProcessorBase):
    def __init__(self):
        self.out = None
        self.every = int(os.environ.get("RECORDER_CHECKPOINT_EVERY", "100"))
        self.since = 0
        self.last = None
        self.delay_s = float(os.environ.get("RECORDER_BATCH_DELAY_S", "0"))
        self.since_start = 0
        self.faulted = False
        self.got = None
        self.behind = None  # the current processRecords' millisBehindLatest
        self.burn_s = 0.0  # CPU per record ($RECORDER_BURN_MS), set at initialize

    def _write(self, entry):
        entry.setdefault("at", time.time())
        self.out.write(json.dumps(entry) + "\n")
        self.out.flush()

    def _checkpoint(self, checkpointer, seq=None, sub=None):
        asked = time.time()  # the event's "at" is when the answer came
        try:
            checkpointer.checkpoint(seq, sub)
            self._write({"event": "checkpoint", "seq": seq, "sub": sub, "error": None, "asked": asked})
        except kcl.CheckpointError as e:
            self._write({"event": "checkpoint", "seq": seq, "sub": sub, "error": e.value, "asked": asked})

    def initialize(self, initialize_input):
        path = os.path.join(os.environ["RECORDER_DIR"], f"{initialize_input.shard_id}.{os.getpid()}.jsonl")
        burns = dict(item.split("=", 1) for item in os.environ.get("RECORDER_BURN_MS", "").split(",") if item)
        self.burn_s = float(burns.get(initialize_input.shard_id, burns.get("*", "0"))) / 1000.0
        self.out = open(path, "a")
        if os.environ.get("RECORDER_STDERR_ENV"):
            name = os.environ["RECORDER_STDERR_ENV"]
            print(f"{name}={os.environ.get(name)}", file=sys.stderr, flush=True)
        if os.environ.get("RECORDER_STDERR_FLOOD"):
            shard, lines, chars = os.environ["RECORDER_STDERR_FLOOD"].rsplit(":", 2)
            if initialize_input.shard_id == shard:
                sys.stderr.write("long " + "y" * 99_995 + "\n")
                for i in range(int(lines)):
                    head = f"flood {i:05d} "
                    sys.stderr.write(head + "x" * (int(chars) - len(head)) + "\n")
                sys.stderr.flush()
        line = {"event": "initialize", "shard": initialize_input.shard_id,
                "seq": initialize_input.sequence_number, "sub": initialize_input.sub_sequence_number,
                "host": os.environ.get("RECORDER_HOST")}
        if os.environ.get("KCL_STREAM_IDENTIFIER"):  # a multi-stream lease's: which stream the shard is of
            line["stream"] = os.environ["KCL_STREAM_IDENTIFIER"]
        self._write(line)

    def _fault(self, records):
        """$RECORDER_FAULT = SHARD:MODE:AFTER[:always]: the first child of SHARD (every child,
        with ``always``) fails once it has recorded AFTER records, by MODE (exit, crash, hang,
        wrong, garbage, memory)."""
        shard, mode, after, *always = os.environ.get("RECORDER_FAULT", "::0").split(":")
        mine = os.path.basename(self.out.name).rsplit(".", 2)[0]
        if mine != shard or self.since_start < int(after) or self.faulted:
            return
        if not always and len([n for n in os.listdir(os.environ["RECORDER_DIR"]) if n.startswith(shard + ".")]) > 1:
            return  # a restarted child: healthy
        self.faulted = True
        self._write({"event": "fault", "mode": mode})
        if mode == "exit":
            os._exit(3)
        if mode == "crash":  # mid-batch: half the batch recorded, then killed
            for r in records[: len(records) // 2]:
                self._record(r)
            os.kill(os.getpid(), signal.SIGKILL)
        if mode == "hang":
            time.sleep(3600)
        if mode == "wrong":
            sys.stdout.write('\n{"action": "status", "responseFor": "shutdown"}\n')
            sys.stdout.flush()
        if mode == "garbage":  # not protocol lines: skipped, and the child carries on
            for i in range(2000):
                sys.stdout.write(f"garbage line {i}: not JSON\n")
            sys.stdout.flush()
        if mode == "memory":
            self.hog = b"x" * (400 << 20)
            time.sleep(60)

    def _record(self, r):
        self._write({"pk": r.partition_key, "data": r.binary_data.decode("utf-8", "replace"),
                     "seq": r.sequence_number, "sub": r.sub_sequence_number,
                     "ts": _epoch_ms(r.approximate_arrival_timestamp), "got": self.got, "behind": self.behind})

    def process_records(self, process_records_input):
        self.got = time.time()
        self.behind = process_records_input.millis_behind_latest
        if self.delay_s:
            time.sleep(self.delay_s)
        self._fault(process_records_input.records)
        for r in process_records_input.records:
            _burn(self.burn_s)
            self._record(r)
            self.last = (r.sequence_number, r.sub_sequence_number)
        self.since += len(process_records_input.records)
        self.since_start += len(process_records_input.records)
        if self.since >= self.every and self.last:
            self._checkpoint(process_records_input.checkpointer, self.last[0], self.last[1])
            self.since = 0

    def lease_lost(self, lease_lost_input):
        self._write({"event": "leaseLost"})

    def shard_ended(self, shard_ended_input):
        entry = {"event": "shardEnded"}
        if os.environ.get("RECORDER_LEASES_AT_SHARD_END"):
            import boto3  # only where asked: amazon_kclpy processors do not need it

            table, endpoint = os.environ["RECORDER_LEASES_AT_SHARD_END"].split("@", 1)
            dynamodb = boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1")
            items = dynamodb.scan(TableName=table, ConsistentRead=True, ProjectionExpression="leaseKey")["Items"]
            entry["leases"] = sorted(item["leaseKey"]["S"] for item in items)
        self._write(entry)
        refusals = int(os.environ.get("RECORDER_SHARD_END_REFUSALS", "0"))
        if refusals and self._shard_ends_seen() <= refusals:
            self._write({"event": "shardEndNotCheckpointed"})
            return
        self._checkpoint(shard_ended_input.checkpointer)

    def _shard_ends_seen(self):
        """shardEnded events recorded for this shard by every child so far (this one included)."""
        shard = os.path.basename(self.out.name).rsplit(".", 2)[0]
        seen = 0
        for name in os.listdir(os.environ["RECORDER_DIR"]):
            if name.startswith(shard + "."):
                with open(os.path.join(os.environ["RECORDER_DIR"], name)) as f:
                    seen += sum('"event": "shardEnded"' in line for line in f)
        return seen

    def shutdown_requested(self, shutdown_requested_input):
        self._write({"event": "shutdownRequested"})
        if self.last:
            self._checkpoint(shutdown_requested_input.checkpointer, self.last[0], self.last[1])


if __name__ == "__main__":
    kcl.KCLProcess(Recorder()).run()

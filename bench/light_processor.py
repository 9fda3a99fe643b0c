#!/usr/bin/env python3
"""The throughput benchmark's processor: the multilang protocol by hand, no JSON decoding of
records, so that on a 2-core host the daemons, not their processors, are what is measured.

A processRecords line is counted (``"action":"record"`` occurrences), never parsed; every
``$BENCH_CHECKPOINT_EVERY`` records (default 1000) it checkpoints at the batch's last record
(its sequence and sub-sequence numbers cut from the line's end). One line per batch goes to
``$BENCH_OUT/<shard>`` ("<records> <unix time>"), as bench/noop_processor.py writes it.
Both daemons write ``"action"`` first (Jackson's order, kcl-mp's copy of it).
"""

import json
import os
import sys
import time

RECORD = b'"action":"record"'
SEQ = b'"sequenceNumber":"'
SUB = b'"subSequenceNumber":'


def send(message: dict) -> None:
    sys.stdout.buffer.write(json.dumps(message).encode() + b"\n")
    sys.stdout.buffer.flush()


def last_position(line: bytes) -> tuple[str, int]:
    start = line.rfind(SEQ) + len(SEQ)
    seq = line[start:line.index(b'"', start)].decode()
    sub_at = line.index(SUB, start) + len(SUB)
    end = sub_at
    while line[end:end + 1].isdigit():
        end += 1
    return seq, int(line[sub_at:end])


def main() -> int:
    every = int(os.environ.get("BENCH_CHECKPOINT_EVERY", "1000"))
    since, fd = 0, -1
    stdin = sys.stdin.buffer
    for _ in range(1 << 62):  # until the daemon closes stdin
        line = stdin.readline()
        if not line:
            return 0
        if line.startswith(b'{"action":"processRecords"'):
            count = line.count(RECORD)
            os.write(fd, f"{count} {time.time():.6f}\n".encode())
            since += count
            if count and since >= every:
                seq, sub = last_position(line)
                send({"action": "checkpoint", "sequenceNumber": seq, "subSequenceNumber": sub})
                stdin.readline()  # the daemon's answer: errors do not matter here
                since = 0
            send({"action": "status", "responseFor": "processRecords"})
            continue
        message = json.loads(line)
        action = message["action"]
        if action == "initialize":
            path = os.path.join(os.environ["BENCH_OUT"], message["shardId"])
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        elif action == "shardEnded":
            send({"action": "checkpoint", "sequenceNumber": None, "subSequenceNumber": None})
            stdin.readline()
        elif action == "checkpoint":
            continue  # an answer arriving late: nothing waits for it
        send({"action": "status", "responseFor": action})
    return 0


if __name__ == "__main__":
    sys.exit(main())

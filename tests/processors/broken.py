#!/usr/bin/env python3
"""Deliberately broken processors for the conformance kit's tests: plain JSON lines, no
library. ``broken.py MODE``:

    no-shard-end-checkpoint   answers shardEnded with a status and no checkpoint
    wrong-status              answers processRecords with a status for initialize
    stays-alive               does everything right but does not exit when stdin closes
    extra-key                 answers processRecords with a status carrying a key "foo"
    two-on-a-line             answers processRecords with a checkpoint and its status on one line
    no-newline                answers processRecords with a status and no line break after it
    unflushed                 answers processRecords with a status it never flushes
    checkpoint-after-status   checkpoints after its status for processRecords (not before it)
    late-shard-end            checkpoints after its status for shardEnded (not before it)
    chatty                    prints plain text on stdout before every status (harmless)

The processRecords modes answer every other action correctly.
"""

import json
import os
import sys
import time

mode = sys.argv[1]
# Buffered whatever PYTHONUNBUFFERED says: what a program that never flushes writes
BUFFERED = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1 << 16)
CHECKPOINT = json.dumps({"action": "checkpoint", "sequenceNumber": None})


def say(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    action = json.loads(line)["action"]
    if action == "checkpoint":
        continue  # the reply to our request
    status = {"action": "status", "responseFor": action}
    if mode == "chatty":
        print(f"got {action}, answering", flush=True)
    if action == "processRecords" and mode == "wrong-status":
        status["responseFor"] = "initialize"
    elif action == "processRecords" and mode == "extra-key":
        status["foo"] = 1
    elif action == "processRecords" and mode == "two-on-a-line":
        sys.stdout.write(CHECKPOINT + json.dumps(status) + "\n")
        sys.stdout.flush()
        continue
    elif action == "processRecords" and mode == "no-newline":
        sys.stdout.write(json.dumps(status))
        sys.stdout.flush()
        continue
    elif action == "processRecords" and mode == "unflushed":
        BUFFERED.write(json.dumps(status) + "\n")  # stays in this process until it exits
        continue
    if (mode, action) in (("checkpoint-after-status", "processRecords"), ("late-shard-end", "shardEnded")):
        sys.stdout.write(json.dumps(status) + "\n" + CHECKPOINT + "\n")  # one write: both arrive together
        sys.stdout.flush()
        continue
    if action == "shardEnded" and mode != "no-shard-end-checkpoint":
        say({"action": "checkpoint", "sequenceNumber": None})
        sys.stdin.readline()
    say(status)
BUFFERED.flush()  # as the runtime of most languages does at exit
if mode == "stays-alive":
    time.sleep(60)

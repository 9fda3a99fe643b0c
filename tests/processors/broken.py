#!/usr/bin/env python3
"""Deliberately broken processors for the conformance kit's tests: plain JSON lines, no
library. ``broken.py MODE``:

    no-shard-end-checkpoint   answers shardEnded with a status and no checkpoint
    wrong-status              answers processRecords with a status for initialize
    stays-alive               does everything right but does not exit when stdin closes
"""

import json
import sys
import time

mode = sys.argv[1]


def say(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    action = json.loads(line)["action"]
    if action == "checkpoint":
        continue  # the reply to our request
    answer = action
    if action == "processRecords" and mode == "wrong-status":
        answer = "initialize"
    if action == "shardEnded" and mode != "no-shard-end-checkpoint":
        say({"action": "checkpoint", "sequenceNumber": None})
        sys.stdin.readline()
    say({"action": "status", "responseFor": answer})
if mode == "stays-alive":
    time.sleep(60)

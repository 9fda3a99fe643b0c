#!/usr/bin/env python3
"""Processors for tests/e2e/test_hostile_records.py: plain JSON lines, no library (a
library's per-record cost would dwarf what the test measures). ``hostile.py MODE``:

    count       counts user records and checks they come once each, in order (sequence
                number, then sub-sequence number); checkpoints at the last record of every
                processRecords (between the calls of one split batch)
    bad-lines   at initialize, before its status, writes each stdout line that once killed the
                daemon's reader (deep nesting, 1e999, an integer of 5,000 digits, a 3 KB line
                of '['); at the first processRecords, checkpoints a 5,000-digit sequence
                number and records the reply; then counts as ``count``
    flood       counts as ``count``, and at every processRecords writes a 16 MiB line of
                numbers before its status and 5,000 status lines of 65 KB nobody asked for
                after it

Each writes ``$HOSTILE_DIR/<shard>.<pid>.json`` at initialize and after every processRecords:
records, calls, records out of order, the largest processRecords line, the checkpoint
replies' errors, and its parent's pid (the pool process driving it).
"""

import json
import os
import sys

mode = sys.argv[1]
out = sys.stdout


def say(message):
    out.write(json.dumps(message) + "\n")
    out.flush()


def reply():
    """The daemon's answer to a checkpoint request: its error (None: stored)."""
    return json.loads(sys.stdin.readline())["error"]


def save():
    with open(path + ".tmp", "w") as f:
        json.dump(state, f)
    os.replace(path + ".tmp", path)


state = {"records": 0, "calls": 0, "disorder": 0, "max_line": 0, "max_call_records": 0, "errors": [],
         "pool": os.getppid(), "last": None}
path = None
for line in sys.stdin:
    message = json.loads(line)
    action = message["action"]
    if action == "initialize":
        path = os.path.join(os.environ["HOSTILE_DIR"], f"{message['shardId']}.{os.getpid()}.json")
        if mode == "bad-lines":
            out.write("[" * 2000 + "\n")
            out.write("[" * 3000 + "\n")
            out.write('{"action":"checkpoint","sequenceNumber":"1","subSequenceNumber":1e999}\n')
            out.write('{"action":"checkpoint","sequenceNumber":"1","subSequenceNumber":' + "9" * 5000 + "}\n")
            out.write('{"action":"status","responseFor":' + "[" * 5000 + "\n")
        save()
        say({"action": "status", "responseFor": "initialize"})
        continue
    if action == "processRecords":
        records = message["records"]
        state["calls"] += 1
        state["max_line"] = max(state["max_line"], len(line))
        state["max_call_records"] = max(state["max_call_records"], len(records))
        for record in records:
            position = (int(record["sequenceNumber"]), record["subSequenceNumber"])
            if state["last"] is not None and position <= tuple(state["last"]):
                state["disorder"] += 1
            state["last"] = position
        state["records"] += len(records)
        if mode == "bad-lines" and state["calls"] == 1:
            say({"action": "checkpoint", "sequenceNumber": "9" * 5000, "subSequenceNumber": 0})
            state["errors"].append(reply())
        if records:
            last = records[-1]
            say({"action": "checkpoint", "sequenceNumber": last["sequenceNumber"],
                 "subSequenceNumber": last["subSequenceNumber"]})
            state["errors"].append(reply())
        save()
        if mode == "flood":
            out.write("[" + "0," * (8 << 20) + "0]\n")
            say({"action": "status", "responseFor": action})
            padding = " " * 65_000
            for _ in range(5000):
                out.write('{"action":"status","responseFor":"processRecords"}' + padding + "\n")
            out.flush()
            continue
    elif action == "shardEnded":
        say({"action": "checkpoint", "sequenceNumber": None})
        reply()
    say({"action": "status", "responseFor": action})

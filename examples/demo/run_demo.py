#!/usr/bin/env python3
"""The demo: kcl-mp on the embedded local default, a producer, and a live view.

Starts ``kcl-mp --properties examples/demo/app.properties --embedded --progress 2`` (which
starts a moto server on 127.0.0.1 and creates the stream), puts records into the stream
(10% of the puts KPL-aggregated) while kcl-mp's live view shows records/s per shard and
the last checkpoint, then waits until the lease table holds every shard's last record as
its checkpoint and stops kcl-mp with SIGTERM. Ctrl-C stops it earlier, gracefully.
``--properties`` runs another properties file the same way (the Spark pipeline's does).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import boto3

from kcl_mp.config import load_config
from kcl_mp.devtools.producer import produce
from kcl_mp.embedded import EMBEDDED_ENV, embedded_overrides, free_port

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000, help="user records to put (default 20,000)")
    parser.add_argument("--rate", type=int, default=2_000, help="records per second to put (default 2,000)")
    parser.add_argument("--timeout", type=float, default=300, help="give up after this many seconds")
    parser.add_argument("--properties", default="examples/demo/app.properties", help="the properties file to run")
    args = parser.parse_args()

    os.environ.update(EMBEDDED_ENV)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    config = load_config(str(ROOT / args.properties), overrides=embedded_overrides(url))
    run_dir = ROOT / "run"
    run_dir.mkdir(exist_ok=True)
    log_path = run_dir / f"{config.application_name}.log"
    print(f"kcl-mp demo: embedded moto server on {url}; kcl-mp's log: {log_path}")
    with open(log_path, "wb") as log:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "kcl_mp", "--properties", args.properties,
             "--embedded", "--embedded-port", str(port), "--progress", "2"],
            cwd=ROOT, stdout=None, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
    stop = {"asked": False}
    signal.signal(signal.SIGINT, lambda *_: stop.update(asked=True))
    try:
        return run(args, url, daemon, stop, config.stream_name, config.lease.table_name)
    finally:
        if daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
        try:
            code = daemon.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.pid, signal.SIGKILL)
            code = daemon.wait(10)
        print(f"kcl-mp exited with status {code}")
        print(NEXT_STEPS.format(properties=args.properties))


NEXT_STEPS = """next steps:
  while a demo runs: kcl-mp leases -p {properties} --embedded --watch   (the lease table, live)
  your processor:    kcl-mp check-processor -- python your_app.py       (the multilang conformance kit)
  on AWS, per host:  kcl-mp check-config -p app.properties               (the pre-flight: nothing written)
  then docs/migration.md (moving a Java fleet, host by host) and docs/deploy.md (systemd, containers)"""


def run(args: argparse.Namespace, url: str, daemon: subprocess.Popen, stop: dict, stream: str, table: str) -> int:
    kinesis = boto3.client("kinesis", endpoint_url=url, region_name="us-east-1")
    dynamodb = boto3.client("dynamodb", endpoint_url=url, region_name="us-east-1")
    deadline = time.monotonic() + args.timeout
    while True:  # kcl-mp creates the stream; wait for it
        if daemon.poll() is not None:
            print("kcl-mp stopped before the stream was ready; see its log")
            return 1
        try:
            summary = kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]
            if summary["StreamStatus"] == "ACTIVE":
                break
        except Exception:
            pass
        if time.monotonic() > deadline:
            return 1
        time.sleep(0.5)
    started = time.monotonic()
    puts = []
    chunk = max(1, args.rate // 2)
    while len(puts) < args.records and not stop["asked"]:
        n = min(chunk, args.records - len(puts))
        puts += produce(kinesis, stream, n, first_id=len(puts), seed=len(puts))
        time.sleep(max(0.0, started + len(puts) / args.rate - time.monotonic()))
    last = {}
    for p in puts:
        last[p.shard_id] = max(last.get(p.shard_id, (0, 0)), (int(p.sequence_number), p.sub_sequence_number))
    print(f"put {len(puts)} records in {time.monotonic() - started:.1f} s; waiting for every shard's last checkpoint")
    while not stop["asked"] and time.monotonic() < deadline and daemon.poll() is None:
        try:
            items = dynamodb.scan(TableName=table, ConsistentRead=True)["Items"]
        except Exception:
            items = []
        done = {i["leaseKey"]["S"] for i in items if i.get("checkpoint", {}).get("S", "").isdigit()
                and (int(i["checkpoint"]["S"]), int(i["checkpointSubSequenceNumber"]["N"]))
                >= last.get(i["leaseKey"]["S"], (0, 0))}
        if set(last) <= done:
            print(f"all {len(puts)} records processed and checkpointed in {time.monotonic() - started:.1f} s")
            return 0
        time.sleep(1)
    return 0 if stop["asked"] else 1


if __name__ == "__main__":
    sys.exit(main())

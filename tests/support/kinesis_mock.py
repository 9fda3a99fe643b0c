"""kinesis-mock (npm ``kinesis-local``) on loopback: the Kinesis emulator for resharding tests.

moto never ends a shard; kinesis-mock splits and merges for real, closes the parents and
returns ChildShards at their end. `make test` installs it (tests/emulators/package.json);
a missing install fails the tests that need it, with the command to fix it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import boto3
from botocore.config import Config as BotoConfig

from kcl_mp.embedded import LOOPBACK, Emulator, free_port, wait_active

MAIN_JS = Path(__file__).resolve().parents[1] / "emulators" / "node_modules" / "kinesis-local" / "main.js"
RESHARD_S = "300ms"  # how long a split or merge keeps the stream UPDATING
CREATING_AT_ONCE = 5  # Kinesis's (and kinesis-mock's) limit on streams CREATING at one time


@dataclass
class KinesisMock(Emulator):
    """kinesis-mock holds its streams in memory and ignores SIGTERM and SIGINT (still running 15 s
    after either, measured): a SIGTERM's wait cost every test worker that used it 10 s at its end."""

    def stop(self, wait_s: float = 10.0) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(wait_s)


def start_kinesis_mock(log_path: Path, wait_s: float = 60.0) -> KinesisMock:
    node = shutil.which("node")
    if node is None or not MAIN_JS.exists():
        raise RuntimeError(f"kinesis-mock is not installed ({MAIN_JS} or node missing): run `make test`, "
                           "or `npm ci --prefix tests/emulators`")
    port = free_port()
    env = {**os.environ, "KINESIS_MOCK_PLAIN_PORT": str(port), "KINESIS_MOCK_TLS_PORT": str(free_port()),
           "SPLIT_SHARD_DURATION": RESHARD_S, "MERGE_SHARDS_DURATION": RESHARD_S, "CREATE_STREAM_DURATION": RESHARD_S,
           "DELETE_STREAM_DURATION": RESHARD_S, "LOG_LEVEL": "WARN", "SHARD_LIMIT": "200"}
    with open(log_path, "ab") as log:
        process = subprocess.Popen([node, str(MAIN_JS)], cwd=str(MAIN_JS.parent), env=env, stdin=subprocess.DEVNULL,
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    emulator = KinesisMock(f"http://{LOOPBACK}:{port}", process, str(log_path))
    client = boto3.client("kinesis", endpoint_url=emulator.url, region_name="us-east-1",
                          config=BotoConfig(retries={"max_attempts": 1}, connect_timeout=1, read_timeout=2))
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"kinesis-mock exited with status {process.returncode} at start; see {log_path}")
        try:
            client.list_streams()
            return emulator
        except Exception:  # not listening yet
            time.sleep(0.2)
    emulator.stop()
    raise RuntimeError(f"kinesis-mock did not answer on {emulator.url} within {wait_s:.0f} s; see {log_path}")


def create_streams(kinesis, shards: dict[str, int]) -> None:
    """Create each stream of ``shards`` (name: shard count) and wait for all to be ACTIVE, never
    more than five CREATING at once: past that Kinesis and kinesis-mock answer
    LimitExceededException, and on a starved machine the mock turns a stream ACTIVE late."""
    names = list(shards)
    for start in range(0, len(names), CREATING_AT_ONCE):
        batch = names[start:start + CREATING_AT_ONCE]
        for name in batch:
            kinesis.create_stream(StreamName=name, ShardCount=shards[name])
        for name in batch:
            wait_active(kinesis, name)


def split_in_half(kinesis, stream: str, shard: dict) -> None:
    """Split ``shard`` (a ListShards entry) in the middle of its hash range; wait for ACTIVE."""
    low, high = (int(shard["HashKeyRange"][k]) for k in ("StartingHashKey", "EndingHashKey"))
    kinesis.split_shard(StreamName=stream, ShardToSplit=shard["ShardId"], NewStartingHashKey=str((low + high) // 2))
    wait_active(kinesis, stream)

"""What the benchmarks that run kcl-mp beside the Java daemon share: the emulator they both
read (inside the loopback namespace), the in-memory Kinesis (kcl_mp.devtools.fast_kinesis)
some read instead of moto's, the properties file they both take, the command that starts
either and the way to stop it, and what the bench processor (bench/noop_processor.py) wrote
per shard."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kcl_mp.devtools import java_daemon

ROOT = Path(__file__).resolve().parents[1]

PROCESSOR = ROOT / "bench" / "noop_processor.py"


def properties(path: Path, url: str, stream: str, app: str, **keys: object) -> Path:
    """One properties file both daemons read as it is: the emulator's endpoints, the bench
    processor, TRIM_HORIZON, metrics off; ``keys`` add or replace keys (None: leave it out)."""
    base: dict[str, object] = {
        "executableName": f"{sys.executable} {PROCESSOR}",
        "streamName": stream,
        "applicationName": app,
        "AwsCredentialsProvider": "DefaultCredentialsProvider",
        "regionName": "us-east-1",
        "kinesisEndpoint": url,
        "dynamoDBEndpoint": url,
        "cloudWatchClient.endpointOverride": url,
        "initialPositionInStream": "TRIM_HORIZON",
        "metricsLevel": "NONE",
        "shutdownGraceMillis": 5000,
    }
    path.write_text("".join(f"{key} = {value}\n" for key, value in {**base, **keys}.items() if value is not None))
    return path


def command(daemon: str, properties_path: Path) -> list[str]:
    """The command line of ``daemon`` ("kcl-mp" or "java") for a properties file."""
    if daemon == "kcl-mp":
        return [sys.executable, "-m", "kcl_mp", "--properties", str(properties_path)]
    return java_daemon.command(properties_path)


def stop(process: subprocess.Popen) -> None:
    """SIGTERM, then (after 60 s) SIGKILL to its whole session (started with
    ``start_new_session``)."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


def wait_for(condition: Any, timeout: float, process: subprocess.Popen, what: str) -> bool:
    """True once ``condition()`` holds; False after ``timeout``; raises if the daemon exited."""
    deadline = time.monotonic() + timeout
    for _ in range(1_000_000):  # bounded by the deadline
        if condition():
            return True
        if process.poll() is not None:
            raise RuntimeError(f"{what}: the daemon exited with status {process.returncode}")
        if time.monotonic() > deadline:
            return False
        time.sleep(0.25)
    return False


def start_fast_kinesis(port: int, stream: str, shards: int, log: Path, *, record_bytes: int = 100,
                       page_records: int = 10_000, records_per_shard: int = 0,
                       delay_ms: float = 0.0) -> subprocess.Popen:
    """fast_kinesis on ``port`` serving ``stream`` (endless shards unless ``records_per_shard``;
    every answer held ``delay_ms``), once it answers (at most 30 s)."""
    process = subprocess.Popen([sys.executable, "-m", "kcl_mp.devtools.fast_kinesis", str(port), "--stream", stream,
                                "--shards", str(shards), "--record-bytes", str(record_bytes),
                                "--page-records", str(page_records), "--records-per-shard", str(records_per_shard),
                                "--delay-ms", str(delay_ms)],
                               stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1).close()
            return process
        except urllib.error.HTTPError:
            return process  # it answers (400: no operation)
        except OSError:
            if process.poll() is not None:
                break
            time.sleep(0.1)
    stop(process)
    raise RuntimeError(f"fast_kinesis did not start; see {log}")


@dataclass(frozen=True)
class Delivered:
    """What the bench processor of one shard wrote: records, first and last batch's time."""

    records: int
    first: float
    last: float


def deliveries(out: Path) -> dict[str, Delivered]:
    """Per shard, from the files bench/noop_processor.py appends to (``<records> <unix time>``
    a line); a line still being written is left for the next read."""
    shards: dict[str, Delivered] = {}
    for path in out.iterdir():
        lines = path.read_text().split("\n")[:-1]
        if not lines:
            continue
        stamps = []
        total = 0
        for line in lines:
            count, at = line.split()
            total += int(count)
            stamps.append(float(at))
        shards[path.name] = Delivered(total, min(stamps), max(stamps))
    return shards


def bench_environment(prefix: str) -> Path:
    """Inside the loopback namespace: the emulator's throwaway credentials in this process's
    environment (inherited by both daemons), a SIGTERM that stops what we started (through
    ``finally``), and a fresh work directory for logs and the processors' files."""
    from kcl_mp.embedded import EMBEDDED_ENV

    assert java_daemon.inside_namespace(), "run inside java_daemon.in_loopback_namespace"
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    os.environ.update(EMBEDDED_ENV)
    os.environ["AWS_REGION"] = EMBEDDED_ENV["AWS_DEFAULT_REGION"]
    return Path(tempfile.mkdtemp(prefix=prefix))


def enter_namespace(script: str, only: str | None) -> int | None:
    """Re-run ``script`` inside a loopback-only network namespace (the Java daemon calls the
    EC2 metadata address at start) and give its status; inside, None when the daemons asked
    for can run, else 1 with the reason on stderr."""
    if not java_daemon.inside_namespace():
        return java_daemon.in_loopback_namespace([sys.executable, script, *sys.argv[1:]])
    if shutil.which("java") is None and only != "kcl-mp":
        print("bench: java (17+) is needed for the Java daemon; --only kcl-mp runs kcl-mp alone", file=sys.stderr)
        return 1
    return None

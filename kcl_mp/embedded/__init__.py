"""The embedded local default: a moto server on loopback, for runs with no AWS account.

moto runs as its own process (its own session, so a Ctrl-C meant for kcl-mp does not end
it before kcl-mp has released its leases), on a free 127.0.0.1 port, with its request
log in a file rather than on the terminal. It serves moto's application through
``embedded.app``, which linearizes DynamoDB's calls as the service does. Tests use the
same module.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from kcl_mp.embedded.dynamodb_streams import ADMIN_PATH
from kcl_mp.errors import DependencyError

LOOPBACK = "127.0.0.1"

# Credentials the emulator accepts; never real ones.
EMBEDDED_ENV = {
    "AWS_ACCESS_KEY_ID": "kclmp-embedded",
    "AWS_SECRET_ACCESS_KEY": "kclmp-embedded-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


@dataclass
class Emulator:
    url: str
    process: subprocess.Popen
    log_path: str

    def stop(self, wait_s: float = 10.0) -> None:
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(wait_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(wait_s)

    def __enter__(self) -> Emulator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def start_emulator(port: int | None = None, *, wait_s: float = 30.0, log_path: str | None = None,
                   http2: bool = False) -> Emulator:
    """Start moto (``python -m kcl_mp.embedded``) on 127.0.0.1 and wait until it answers HTTP.

    ``http2``: serve moto with hypercorn instead (HTTP/1.1 and cleartext HTTP/2 on one port),
    for the Java daemon, whose Kinesis client speaks h2c only (needs the ``bench`` extra).
    """
    try:
        import moto.server  # noqa: F401  (only to fail early with a clear message)
    except ImportError as exc:
        raise DependencyError(
            "the embedded emulator needs moto's server: pip install 'kcl-mp[embedded]'", retriable=False
        ) from exc
    port = port or free_port()
    if log_path is None:
        fd, log_path = tempfile.mkstemp(prefix="kcl-mp-moto-", suffix=".log")
        os.close(fd)
    url = f"http://{LOOPBACK}:{port}"
    with open(log_path, "ab") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "kcl_mp.embedded", str(port), *(["--http2"] if http2 else [])],
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    emulator = Emulator(url, process, log_path)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise DependencyError(
                f"the moto server exited with status {process.returncode} at start; see {log_path}", retriable=False
            )
        try:
            with urllib.request.urlopen(f"{url}/moto-api/data.json", timeout=2):
                return emulator
        except (urllib.error.URLError, ConnectionError, OSError):
            time.sleep(0.1)
    emulator.stop()
    raise DependencyError(f"the moto server did not answer on {url} within {wait_s:.0f} s; see {log_path}")


def ensure_stream(kinesis: Any, name: str, shard_count: int, *, wait_s: float = 60.0) -> bool:
    """Create the stream unless it exists, then wait for ACTIVE. True when this call created it."""
    created = False
    try:
        kinesis.describe_stream_summary(StreamName=name)
    except kinesis.exceptions.ResourceNotFoundException:
        kinesis.create_stream(StreamName=name, ShardCount=shard_count)
        created = True
    wait_active(kinesis, name, wait_s)
    return created


def ensure_table_stream(dynamodb: Any, url: str, table: str, shards: int) -> tuple[str, bool]:
    """The stream ARN of ``table`` on the emulator at ``url``, creating the table (a string hash
    key ``pk``, its stream NEW_AND_OLD_IMAGES with ``shards`` open shards) unless it exists; True
    when this call created it."""
    try:
        found = dynamodb.describe_table(TableName=table)["Table"]
    except dynamodb.exceptions.ResourceNotFoundException:
        body = json.dumps({"action": "configure", "shards": shards}).encode()
        request = urllib.request.Request(url + ADMIN_PATH, body, method="POST")
        with urllib.request.urlopen(request, timeout=10):
            pass
        found = dynamodb.create_table(
            TableName=table, BillingMode="PAY_PER_REQUEST", KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"})["TableDescription"]
        return str(found["LatestStreamArn"]), True
    if not found.get("LatestStreamArn"):
        raise DependencyError(f"table {table} on the emulator has no stream", retriable=False)
    return str(found["LatestStreamArn"]), False


def wait_active(kinesis: Any, name: str, wait_s: float = 60.0) -> None:
    """Wait until the stream is ACTIVE (after creating it, or a split or merge)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        status = kinesis.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]["StreamStatus"]
        if status == "ACTIVE":
            return
        time.sleep(0.1)
    raise DependencyError(f"stream {name} not ACTIVE after {wait_s:.0f} s")


def endpoint_file(application_name: str) -> Path:
    """Where ``kcl-mp --embedded`` writes its emulator's URL while it runs, so that ``kcl-mp
    leases --embedded`` (and a person: ``cat`` it) finds the emulator of that application.

    >>> endpoint_file("my app").name
    'kcl-mp-embedded-my%20app.url'
    """
    return Path(tempfile.gettempdir()) / f"kcl-mp-embedded-{quote(application_name, safe='')}.url"


def embedded_overrides(url: str) -> dict[str, str]:
    """Properties that point every client at the emulator with its throwaway credentials.

    Also sets those credentials in this process's environment (inherited by shard workers
    and processors), replacing any real ones, so an embedded run cannot reach AWS.
    """
    os.environ.update(EMBEDDED_ENV)
    return {
        "kinesisEndpoint": url,
        "dynamoDBEndpoint": url,
        "cloudWatchClient.endpointOverride": url,
        "AwsCredentialsProvider": "EnvironmentVariableCredentialsProvider",
    }


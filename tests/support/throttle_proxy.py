"""A loopback HTTP/1.1 proxy in front of an emulator that answers a share of requests with the
service's own throttling error, and delays a share of the rest: what a busy AWS account
looks like to kcl-mp, with a real emulator behind it.

The errors are shaped as the services send them, so botocore parses (and retries) them as
it would in production: status 400, ``application/x-amz-json-1.0`` (DynamoDB, with its
``x-amz-crc32`` header) or ``-1.1`` (Kinesis), a body ``{"__type": ..., "message": ...}``.
Data-plane calls get ``ProvisionedThroughputExceededException`` (DynamoDB item calls;
Kinesis GetRecords, GetShardIterator, PutRecord(s)); the control plane gets the
throttling error each service sends there (DynamoDB ``ThrottlingException``, Kinesis
``LimitExceededException``). A throttled answer comes after a delay too, as AWS's do.

Seeded: the decisions come from one ``random.Random(seed)`` in the order requests arrive
(concurrent requests arrive in no fixed order, so a run replays its rates, not each
decision). ``set_share`` changes the share at once (a storm); ``counts`` says what it did,
``slowest`` how long the emulator took.
"""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
import uuid
import zlib
from collections import Counter
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlsplit

from .efo_proxy import HOP_BY_HOP
from .loopback_http import LoopbackServer

DATA_PLANE = {
    "dynamodb": {"GetItem", "PutItem", "UpdateItem", "DeleteItem", "Scan", "Query", "BatchGetItem", "BatchWriteItem"},
    "kinesis": {"GetRecords", "GetShardIterator", "PutRecord", "PutRecords"},
}
# Concurrent requests go to the emulator concurrently: kcl_mp.embedded.app linearizes
# DynamoDB's calls there (moto alone lets two conditional writes to one item both succeed).
CONTENT_TYPE = {"dynamodb": "application/x-amz-json-1.0", "kinesis": "application/x-amz-json-1.1"}
ACCOUNT = "000000000000"


def throttle_error(service: str, operation: str, request: dict) -> tuple[str, str]:
    """The (__type, message) AWS answers ``operation`` with when it throttles it."""
    if service == "dynamodb":
        if operation in DATA_PLANE[service]:
            return ("com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
                    "The level of configured provisioned throughput for the table was exceeded. "
                    "Consider increasing your provisioning level with the UpdateTable API.")
        return "com.amazon.coral.availability#ThrottlingException", "Rate of requests exceeds the allowed throughput."
    stream = request.get("StreamName", "unknown")
    if operation in DATA_PLANE[service]:
        shard = request.get("ShardId", "shardId-000000000000")
        return ("ProvisionedThroughputExceededException",
                f"Rate exceeded for shard {shard} in stream {stream} under account {ACCOUNT}.")
    return "LimitExceededException", f"Rate exceeded for stream {stream} under account {ACCOUNT}."


class ThrottleProxy:
    """``service`` is "kinesis" or "dynamodb"; ``share`` of requests throttled; ``slow_share``
    of the others delayed by up to ``max_delay_s`` (throttled ones always are); ``delays``: a
    fixed delay of every call of an operation (a slow write, to widen a race)."""

    def __init__(self, upstream: str, service: str, *, seed: int, share: float = 0.05,
                 slow_share: float = 0.1, max_delay_s: float = 0.25, delays: dict[str, float] | None = None):
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.service = service
        self.rng = random.Random(f"{service}:{seed}")
        self.share, self.slow_share, self.max_delay_s = share, slow_share, max_delay_s
        self.delays = delays or {}
        self.lock = threading.Lock()
        self.counts: Counter = Counter()  # "requests", "throttled", "delayed", "throttled:<operation>"
        self.slowest: dict[str, float] = {}  # the longest seconds seen: "upstream", per operation
        self.http = LoopbackServer(self.relay)
        self.url = self.http.url

    def set_share(self, share: float) -> None:
        with self.lock:
            self.share = share

    def _decide(self, operation: str) -> tuple[bool, float]:
        with self.lock:
            throttle = self.rng.random() < self.share
            slow = throttle or self.rng.random() < self.slow_share
            delay = self.rng.uniform(0.02, self.max_delay_s) if slow else 0.0
            self.counts["requests"] += 1
            self.counts["delayed"] += slow
            if throttle:
                self.counts["throttled"] += 1
                self.counts[f"throttled:{operation}"] += 1
        return throttle, delay + self.delays.get(operation, 0.0)

    def _timed(self, operation: str, upstream_s: float) -> None:
        """The emulator's time for a call, its wait for DynamoDB's lock included (the longest)."""
        with self.lock:
            self.slowest["upstream"] = max(self.slowest.get("upstream", 0.0), round(upstream_s, 3))
            self.slowest[operation] = max(self.slowest.get(operation, 0.0), round(upstream_s, 3))

    def relay(self, handler: BaseHTTPRequestHandler) -> None:
        body = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        operation = handler.headers.get("X-Amz-Target", ".").rsplit(".", 1)[-1]
        throttle, delay = self._decide(operation)
        if delay:
            time.sleep(delay)
        if throttle:
            try:
                request = json.loads(body or b"{}")
            except ValueError:
                request = {}
            kind, message = throttle_error(self.service, operation, request)
            self._answer(handler, 400, "Bad Request", [("Content-Type", CONTENT_TYPE[self.service])],
                         json.dumps({"__type": kind, "message": message}).encode())
            return
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in HOP_BY_HOP}
        upstream = http.client.HTTPConnection(*self.upstream, timeout=60)
        began = time.monotonic()
        try:
            upstream.request(handler.command, handler.path, body=body, headers=headers)
            response = upstream.getresponse()
            data = response.read()
            self._timed(operation, time.monotonic() - began)
        except OSError:
            handler.send_error(502)
            return
        finally:
            upstream.close()
        kept = [(k, v) for k, v in response.getheaders() if k.lower() not in HOP_BY_HOP]
        self._answer(handler, response.status, response.reason, kept, data)

    def _answer(self, handler: BaseHTTPRequestHandler, status: int, reason: str, headers: list[tuple[str, str]],
                data: bytes) -> None:
        handler.send_response(status, reason)
        names = {k.lower() for k, _ in headers}
        for name, value in headers:
            handler.send_header(name, value)
        if "x-amzn-requestid" not in names:
            handler.send_header("x-amzn-RequestId", str(uuid.uuid4()))
        if self.service == "dynamodb" and status == 400 and "x-amz-crc32" not in names:
            handler.send_header("x-amz-crc32", str(zlib.crc32(data)))
        handler.send_header("Content-Length", str(len(data)))
        try:
            handler.end_headers()
            handler.wfile.write(data)
        except OSError:  # the client is gone (a host killed while it waited)
            handler.close_connection = True

    def stop(self) -> None:
        self.http.close()

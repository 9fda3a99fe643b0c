"""A loopback HTTP server that answers AWS JSON-protocol calls the way AWS does when moto
cannot: an AccessDeniedException (moto does not enforce IAM), a throttling error, an
expired shard iterator (moto's never expire, kinesis-mock's only after five minutes), or a
request that is never answered (an endpoint that accepts connections and hangs).

``answer(n, target)`` decides for the n-th request (from 0; ``target`` is its X-Amz-Target,
e.g. ``DynamoDB_20120810.DescribeTable``): an error code to answer with, None to never
answer, or ``PASS`` to hand the request to ``upstream`` (a moto server) and its answer back:
an IAM policy missing one action is ``AwsStub(lambda n, t: "AccessDeniedException" if
t.endswith(".UpdateItem") else PASS, moto_url)``. Every request is recorded in ``targets``.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HANG_LIMIT_S = 120.0  # a request left unanswered is dropped after this, or at stop()
MESSAGES = {
    "AccessDeniedException": "User: arn:aws:iam::123456789012:user/kclmp-test is not authorized to perform: {action}",
    "ThrottlingException": "Rate of requests exceeds the allowed throughput.",
    "ExpiredIteratorException": "Iterator expired. The iterator was created at time Mon Nov 23 20:00:00 UTC 2026 "
                                "while right now it is Mon Nov 23 20:05:01 UTC 2026 which is further in the future "
                                "than the tolerated delay of 300000 milliseconds.",
}


PASS = "pass"  # answer(): proxy the request to the upstream server


class AwsStub:
    def __init__(self, answer: Callable[[int, str], str | None], upstream: str | None = None):
        self.targets: list[str] = []
        self.released = threading.Event()
        lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                request = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                target = self.headers.get("X-Amz-Target", "")
                with lock:
                    n = len(stub.targets)
                    stub.targets.append(target)
                code = answer(n, target)
                if code == PASS:
                    self._proxy(request)
                    return
                if code is None:
                    stub.released.wait(HANG_LIMIT_S)
                    self.close_connection = True
                    return
                service = "dynamodb" if target.startswith("DynamoDB") else "kinesis"
                action = f"{service}:{target.split('.')[-1]}"
                body = json.dumps({"__type": f"com.amazonaws.stub#{code}",
                                   "message": MESSAGES[code].format(action=action)}).encode()
                self.send_response(400)
                self.send_header("Content-Type", "application/x-amz-json-1.0")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("x-amzn-RequestId", f"stub-{n}")
                self.end_headers()
                self.wfile.write(body)

            def _proxy(self, request: bytes) -> None:
                assert upstream is not None, "PASS needs an upstream"
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                forwarded = urllib.request.Request(upstream + self.path, data=request, headers=headers, method="POST")
                try:
                    with urllib.request.urlopen(forwarded, timeout=30) as response:
                        status, body, reply = response.status, response.read(), response.headers
                except urllib.error.HTTPError as error:
                    status, body, reply = error.code, error.read(), error.headers
                self.send_response(status)
                for name, value in reply.items():
                    if name.lower() not in ("content-length", "connection", "transfer-encoding", "server", "date"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)

"""A loopback HTTP proxy in front of kinesis-mock that fixes only the framing of
SubscribeToShard, so boto3's own event-stream code can run against a real emulator.

Why: kinesis-mock (npm kinesis-local) implements SubscribeToShard, and its events are
right (SubscribeToShardEvent messages, checksums, ContinuationSequenceNumber, ChildShards),
but it does not send the ``initial-response`` event AWS sends first on a JSON-protocol
event stream, and botocore refuses a stream without it ("First event was not of type
initial-response"). The proxy inserts that one event (an empty JSON object, as AWS sends)
in front of the stream and passes every other byte through unchanged, both ways; every
other call is relayed as it is. Chosen over kinesis-mock's TLS/HTTP2 port, which sends the
same stream (botocore fails the same way), and over a fake server, which would test our
reading of our own fake rather than a real emulator's events.

``cut_subscriptions()`` breaks every open subscription mid-stream (both sockets closed),
as a network failure would: the tests' broken-subscription case. ``end_subscriptions()``
ends them cleanly after their next event, as AWS ends every subscription after five
minutes.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import zlib
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlsplit

from .loopback_http import LoopbackServer

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection",
              "content-length"}


def event_message(headers: dict[str, str], payload: bytes) -> bytes:
    """One event-stream message (string headers only): prelude, its CRC, headers, payload, CRC."""
    encoded = b"".join(len(name).to_bytes(1, "big") + name + b"\x07" + len(value).to_bytes(2, "big") + value
                       for name, value in ((k.encode(), v.encode()) for k, v in headers.items()))
    total = 12 + len(encoded) + len(payload) + 4
    prelude = total.to_bytes(4, "big") + len(encoded).to_bytes(4, "big")
    message = prelude + zlib.crc32(prelude).to_bytes(4, "big") + encoded + payload
    return message + zlib.crc32(message).to_bytes(4, "big")


INITIAL_RESPONSE = event_message(
    {":message-type": "event", ":event-type": "initial-response", ":content-type": "application/json"}, b"{}")


class EfoProxy:
    def __init__(self, upstream: str):
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.lock = threading.Lock()
        self.streams: set[tuple[socket.socket, http.client.HTTPConnection]] = set()
        self.subscriptions = 0
        self.subscribed: list[tuple[str, str]] = []  # (ConsumerARN, ShardId) of each SubscribeToShard, in order
        self.cuts = 0
        self.generation = 0  # end_subscriptions() ends the streams opened before it
        self.http = LoopbackServer(self.relay, get=True)
        self.url = self.http.url

    def relay(self, handler: BaseHTTPRequestHandler) -> None:
        body = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in HOP_BY_HOP}
        upstream = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            upstream.request(handler.command, handler.path, body=body, headers=headers)
            response = upstream.getresponse()
        except OSError:
            upstream.close()
            handler.send_error(502)
            return
        streaming = response.getheader("Content-Type", "") == "application/vnd.amazon.eventstream"
        subscribe = handler.headers.get("X-Amz-Target", "").endswith(".SubscribeToShard")
        if subscribe:
            asked = json.loads(body)
            with self.lock:
                self.subscribed.append((asked["ConsumerARN"], asked["ShardId"]))
        handler.send_response(response.status, response.reason)
        for name, value in response.getheaders():
            if name.lower() not in HOP_BY_HOP:
                handler.send_header(name, value)
        if not streaming:
            data = response.read()
            upstream.close()
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
            return
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        entry = (handler.connection, upstream)
        with self.lock:
            self.streams.add(entry)
            self.subscriptions += subscribe
            generation = self.generation
        try:
            if subscribe and response.status == 200:
                self._chunk(handler, INITIAL_RESPONSE)
            for _ in range(10_000_000):  # ends with the upstream stream, or a cut
                data = response.read1(65536)
                if not data or self.generation != generation:
                    break
                self._chunk(handler, data)
            handler.wfile.write(b"0\r\n\r\n")
        except Exception:  # a cut: either socket closed under the relay (OSError, or None inside http.client)
            handler.close_connection = True
        finally:
            with self.lock:
                self.streams.discard(entry)
            upstream.close()

    @staticmethod
    def _chunk(handler: BaseHTTPRequestHandler, data: bytes) -> None:
        handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        handler.wfile.flush()

    def open_streams(self) -> int:
        with self.lock:
            return len(self.streams)

    def end_subscriptions(self) -> None:
        """End every open event stream cleanly at its next event (a five-minute expiry)."""
        with self.lock:
            self.generation += 1

    def cut_subscriptions(self) -> int:
        """Close every open event stream on both sides; how many were cut."""
        with self.lock:
            streams = list(self.streams)
            self.cuts += len(streams)
        for client, upstream in streams:
            for close in (lambda client=client: client.shutdown(socket.SHUT_RDWR), client.close, upstream.close):
                try:
                    close()
                except OSError:
                    pass
        return len(streams)

    def stop(self) -> None:
        self.cut_subscriptions()
        self.http.close()

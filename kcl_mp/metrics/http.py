"""The metrics process's HTTP endpoint (/metrics, /healthz): one thread, bounded, never starved.

A liveness probe that times out restarts the pod and moves every lease it held, so the
endpoint must answer however many clients hold connections open. A thread per connection
(``socketserver.ThreadingMixIn``) cannot: 500 idle sockets made 500 threads that were never
freed, and with the file limit reached new connections (the probe's) were not accepted.
Here one thread runs an asyncio loop that serves every connection:

- a client has ``timeout_s`` (5 s, a Kubernetes probe's timeout) to send its request head,
  and as long again to take the answer; then its connection is closed;
- past ``max_connections`` (64) open at once, each new one closes the oldest that has had
  ``GRACE_S`` (1 s) to send its request, so a new client, the kubelet's probe included, is
  always let in and answered, however many idle sockets others hold; a burst of new ones
  is let in whole (a probe in its middle sends its request within milliseconds, but is read
  only after the burst is accepted) up to ``HARD_MAX_CONNECTIONS`` (128), where the oldest
  is closed whatever its age. A closed socket's file is freed a loop turn later and the
  loop accepts ``ACCEPT_BATCH`` (16) a turn, so open files stay under 128 + 2 x 16 and
  a few: below a 256 limit, where asyncio would stop accepting for a second;
- one request a connection (``Connection: close``), GET or HEAD, a head of at most
  ``MAX_HEAD_BYTES`` (431 past it); the answer is computed on the loop's thread (/healthz
  reads a few numbers, /metrics formats what the exporter holds).

Threads: one, whatever the load. Open files: about ``HARD_MAX_CONNECTIONS`` at most.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable

from kcl_mp import logs
from kcl_mp.errors import ConfigError

TIMEOUT_S = 5.0
MAX_CONNECTIONS = 64
GRACE_S = 1.0
HARD_MAX_CONNECTIONS = 128
MAX_HEAD_BYTES = 8 << 10
BACKLOG = 1024  # connections the kernel completes while the loop is busy (past it: the client's 1 s SYN retry)
ACCEPT_BATCH = 16  # accepted per loop turn, so requests already sent are read between bursts

Answer = tuple[int, str, bytes]  # status, content type, body
App = Callable[[str], Answer]  # the request's path -> the answer

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            431: "Request Header Fields Too Large", 500: "Internal Server Error", 503: "Service Unavailable"}


def listen(address: str, port: int) -> socket.socket:
    """Bind the endpoint in the supervisor, so a taken port is a start-up error naming the key."""
    try:
        return socket.create_server((address, port), family=_family(address), backlog=BACKLOG)
    except OSError as exc:
        raise ConfigError(f"kclmp.metricsPort: cannot listen on {address}:{port}: {exc.strerror or exc}") from exc


def _family(address: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in address else socket.AF_INET


def to_close(opened: list[float], now: float, max_connections: int = MAX_CONNECTIONS,
             grace_s: float = GRACE_S, hard_max: int = HARD_MAX_CONNECTIONS) -> int:
    """How many of the oldest connections to close as one more opens at ``now``, given when
    each open one was opened (oldest first): those past ``max_connections`` that had
    ``grace_s``, and whatever it takes to stay under ``hard_max``.

    >>> to_close([0.0, 0.2, 9.5], now=10.0, max_connections=2)  # the two oldest had their second
    2
    >>> to_close([9.2, 9.5, 9.9], now=10.0, max_connections=2, hard_max=5)  # a burst: let in
    0
    >>> to_close([9.2, 9.5, 9.9], now=10.0, max_connections=2, hard_max=3)
    1
    """
    excess = len(opened) + 1 - max_connections
    aged = sum(1 for at in opened[:max(0, excess)] if now - at >= grace_s)
    return max(aged, len(opened) + 1 - hard_max, 0)


def response(status: int, content_type: str, body: bytes, head_only: bool = False) -> bytes:
    """The bytes of one answer, the connection closed after it.

    >>> response(404, "text/plain", b"no\\n").split(b"\\r\\n")[:3]
    [b'HTTP/1.1 404 Not Found', b'Content-Type: text/plain', b'Content-Length: 3']
    """
    head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    return head if head_only else head + body


def request_target(head: bytes) -> tuple[str, str] | int:
    """The method and path of a request head, or the status that refuses it.

    >>> request_target(b"GET /healthz?x=1 HTTP/1.1\\r\\nHost: a\\r\\n\\r\\n")
    ('GET', '/healthz')
    >>> request_target(b"POST /metrics HTTP/1.1\\r\\n\\r\\n"), request_target(b"\\x16\\x03\\x01\\r\\n\\r\\n")
    (405, 400)
    """
    parts = head.split(b"\r\n", 1)[0].split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/") or not parts[1].startswith(b"/"):
        return 400
    method = parts[0].decode("ascii", "replace")
    if method not in ("GET", "HEAD"):
        return 405
    return method, parts[1].split(b"?", 1)[0].decode("ascii", "replace")


class Endpoint:
    """Serves ``app`` on ``sock`` from one daemon thread (``start``) until ``stop``."""

    def __init__(self, sock: socket.socket, app: App, log: logs.ShardLog, *,
                 max_connections: int = MAX_CONNECTIONS, timeout_s: float = TIMEOUT_S):
        self.sock, self.app, self.log = sock, app, log
        self.max_connections, self.timeout_s = max_connections, timeout_s
        self.open: dict[asyncio.StreamWriter, float] = {}  # when each was opened, oldest first
        self.thread = threading.Thread(target=self._run, name="http", daemon=True)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Event | None = None
        self._ready = threading.Event()
        self._errors = logs.LineBudget(1, 60.0)

    def start(self) -> None:
        self.thread.start()
        self._ready.wait(5.0)

    def stop(self) -> None:
        if self._loop is not None and self._stopped is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)
        self.thread.join(5.0)

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop, self._stopped = asyncio.get_running_loop(), asyncio.Event()
        self._loop.set_exception_handler(self._loop_error)
        server = await asyncio.start_server(self._connection, sock=self.sock, limit=MAX_HEAD_BYTES,
                                            backlog=ACCEPT_BATCH)
        self.sock.listen(BACKLOG)  # asyncio's backlog is also its accept batch: the kernel's queue stays long
        self._ready.set()
        async with server:
            await self._stopped.wait()
        for writer in list(self.open):
            writer.transport.abort()

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict) -> None:
        """asyncio's own errors (out of open files while accepting: it retries in a second),
        logged at most once a minute: a flood must not become a flood of log lines."""
        allowed, dropped = self._errors.allow()
        if allowed:
            self.log.warning("metrics endpoint: %s%s", context.get("message", "error"),
                             f" ({context['exception']})" if context.get("exception") else "")
        if dropped:
            self.log.warning("metrics endpoint: %d more such errors in the last minute", dropped)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        now = time.monotonic()
        for oldest in list(self.open)[:to_close(list(self.open.values()), now, self.max_connections)]:
            del self.open[oldest]
            oldest.transport.abort()  # its read or write fails at once and it ends
        self.open[writer] = now
        writer.transport.set_write_buffer_limits(high=0)  # drain() returns once all is with the kernel
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.timeout_s)
            except asyncio.LimitOverrunError:
                answer = response(431, "text/plain", b"request head too large\n")
            else:
                answer = self._answer(head)
            writer.write(answer)
            await asyncio.wait_for(writer.drain(), self.timeout_s)
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError, OSError):
            pass  # idle past the timeout, gone, or closed to make room: nothing to answer
        finally:
            self.open.pop(writer, None)
            writer.transport.abort()

    def _answer(self, head: bytes) -> bytes:
        target = request_target(head)
        if isinstance(target, int):
            return response(target, "text/plain", b"kcl-mp serves GET /metrics and /healthz\n")
        method, path = target
        try:
            status, content_type, body = self.app(path)
        except Exception:  # a bug in an answer must not end the endpoint
            self.log.exception("the metrics endpoint failed to answer %s", path)
            status, content_type, body = 500, "text/plain", b"internal error\n"
        return response(status, content_type, body, head_only=method == "HEAD")


__all__ = ["Answer", "App", "Endpoint", "listen", "request_target", "response"]

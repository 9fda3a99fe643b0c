"""A threaded HTTP server on 127.0.0.1 that hands every request to one function: the skeleton
of the test proxies (efo_proxy, throttle_proxy)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        """A client killed mid-request (the tests kill hosts) is not an error of the proxy."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class LoopbackServer:
    """Serves ``relay(handler)`` for POST (and GET when ``get``) on a free port: ``url``; ``close()`` ends it."""

    def __init__(self, relay: Callable[[BaseHTTPRequestHandler], None], get: bool = False):
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                relay(self)

            if get:
                def do_GET(self) -> None:
                    relay(self)

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

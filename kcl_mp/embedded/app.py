"""moto's WSGI application as the embedded emulator serves it: DynamoDB calls one at a time.

moto checks a write's condition and then writes, without a lock, so under a threaded
server two concurrent conditional writes to one item can both succeed (measured: 6 to 10
trials in 300 with four writers), which DynamoDB never allows: two hosts would both take
one lease. So every DynamoDB request, reads too (a Scan walks the items a write changes),
holds one lock while moto handles it, which linearizes them as the service does; Kinesis
and moto's own API stay concurrent. That costs nothing measurable (UpdateItem from four
threads: about 150 requests/s either way): moto's handling is Python under the GIL anyway.

``python -m kcl_mp.embedded PORT`` serves it as ``python -m moto.server`` does (werkzeug's
threaded server, its request log on stderr); with ``--http2``, under hypercorn (HTTP/1.1
and cleartext HTTP/2 on one port).
"""

from __future__ import annotations

import io
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

DYNAMODB_TARGET = "DynamoDB_20120810."

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class DynamoDBLock:
    """WSGI middleware: a request whose ``X-Amz-Target`` is DynamoDB's runs alone among them.

    The body is read before the lock is taken, so a client paused mid-request (a host
    stopped by SIGSTOP) cannot hold every other host's renewals behind it.
    """

    def __init__(self, app: WSGIApp):
        self.app = app
        self.lock = threading.RLock()  # re-entered by dynamodb_streams around UpdateTable

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if not environ.get("HTTP_X_AMZ_TARGET", "").startswith(DYNAMODB_TARGET):
            return self.app(environ, start_response)
        length = int(environ.get("CONTENT_LENGTH") or 0)
        if length:
            environ["wsgi.input"] = io.BytesIO(environ["wsgi.input"].read(length))
        with self.lock:
            # moto (Flask) has handled the request when this returns; the iterable holds its answer.
            return self.app(environ, start_response)


def moto_app() -> WSGIApp:
    """moto, DynamoDB calls one at a time, DynamoDB Streams as the service behaves
    (``dynamodb_streams``: moto's own is one shard that never ends) under the same lock, S3
    listings in time of their prefix (``s3_listing``), the lookups moto repeats for every
    request made once (``request_lookups``), and its JSON answers written without its walk
    over every attribute value (``attribute_values``) or its alias lookup for every plain
    member (``plain_members``), and Kinesis records found by key, not by a scan of the shard
    (``shard_records``)."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    from kcl_mp.embedded import attribute_values, plain_members, request_lookups, s3_listing, shard_records
    from kcl_mp.embedded.dynamodb_streams import wrap

    request_lookups.install()
    s3_listing.install()
    attribute_values.install()
    plain_members.install()
    shard_records.install()

    app = DynamoDBLock(DomainDispatcherApplication(create_backend_app))
    return wrap(app, app.lock)


def serve(host: str, port: int) -> None:
    """Threaded HTTP/1.1, as ``python -m moto.server -H host -p port`` serves moto."""
    from moto.moto_server.werkzeug_app import MotoRequestHandler
    from werkzeug.serving import run_simple

    os.environ.setdefault("MOTO_PORT", str(port))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    run_simple(host, port, moto_app(), threaded=True, request_handler=MotoRequestHandler)


def serve_http2(host: str, port: int) -> None:
    """HTTP/1.1 and h2c on one port under hypercorn, for the Java daemon's Kinesis client."""
    import asyncio

    from hypercorn.asyncio import serve as hypercorn_serve
    from hypercorn.config import Config as HypercornConfig
    from hypercorn.middleware import AsyncioWSGIMiddleware

    os.environ.setdefault("MOTO_PORT", str(port))
    config = HypercornConfig()
    config.bind = [f"{host}:{port}"]
    config.loglevel = "WARNING"
    app = AsyncioWSGIMiddleware(moto_app(), max_body_size=64 << 20)
    asyncio.run(hypercorn_serve(app, config))

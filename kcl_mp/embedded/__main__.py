"""``python -m kcl_mp.embedded PORT [--http2]``: serve the emulator on 127.0.0.1:PORT (see ``app``)."""

import sys

from kcl_mp.embedded import LOOPBACK
from kcl_mp.embedded.app import serve, serve_http2

(serve_http2 if sys.argv[2:] == ["--http2"] else serve)(LOOPBACK, int(sys.argv[1]))

"""A processor child's stderr reader: the thread that reads the pipe and logs its lines
(``child_stderr.StderrLines`` decides what is logged, cut or counted), and keeps the last
lines for the driver's error messages.
"""

from __future__ import annotations

import logging
import os
import select
import threading
import time
from collections import deque
from dataclasses import replace

from kcl_mp.logs import redact_cut
from kcl_mp.multilang.child_stderr import Dropped, Event, StderrLines

TAIL_LINES = 20  # the last stderr lines an error message quotes
TAIL_CHARS = 300  # of each


class StderrReader:
    def __init__(self, shard_id: str, log: logging.LoggerAdapter | logging.Logger, lines: StderrLines, level: int):
        self.shard_id, self.log, self.lines = shard_id, log, lines
        self.level = level  # kclmp.processorStderrLevel
        self.dropped = 0  # lines not logged so far (this thread adds, others read)
        self._tail: deque[str] = deque(maxlen=TAIL_LINES)
        self._tail_lock = threading.Lock()  # copying a deque while another thread appends raises

    def tail(self) -> list[str]:
        """The last lines it wrote (each cut at TAIL_CHARS)."""
        with self._tail_lock:
            return list(self._tail)

    def run(self, fd: int) -> None:
        """The reader thread's body, to the pipe's end. It wakes when a window with dropped lines
        closes, so they are reported then, even if the child has gone quiet."""
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        try:
            while True:
                due = self.lines.report_due()
                if poller.poll(-1 if due is None else max(1, int((due - time.monotonic()) * 1000) + 1)):
                    chunk = os.read(fd, 1 << 16)
                    if not chunk:
                        break
                    self._log(self.lines.feed(chunk, time.monotonic()))
                else:
                    self._log(self.lines.tick(time.monotonic()))
        except (OSError, ValueError):
            pass  # closed under us during close()
        finally:
            self._log(self.lines.end(time.monotonic()))

    def _log(self, events: list[Event]) -> None:
        for event in events:
            if isinstance(event, Dropped):
                self.dropped += event.lines
                self.log.warning("processor for %s wrote more to stderr than kclmp.processorStderrLinesPer10s = %d "
                                 "with kclmp.processorStderrBytesPer10s = %d allows: %d lines (%d bytes) were not "
                                 "logged in the last %g s", self.shard_id, self.lines.lines_per_window,
                                 self.lines.bytes_per_window, event.lines, event.bytes, event.window_s)
                continue
            # a secret cut by a limit is no longer a whole secret: the scrubber is told where the cut is
            with self._tail_lock:
                self._tail.append(redact_cut(event.text[:TAIL_CHARS]) if len(event.text) > TAIL_CHARS else event.text)
            if event.logged:  # Java logs every stderr line at ERROR; here kclmp.processorStderrLevel says
                text = redact_cut(event.text) if event.cut_bytes else event.text
                self.log.log(self.level, "processor stderr: %s", replace(event, text=text).render())

"""The supervisor's signals, in the manner of gunicorn's arbiter: a handler only queues.

SIGTERM and SIGINT are queued for the loop, which a byte on a wake-up pipe interrupts
(``signal.set_wakeup_fd``). During start-up there is no loop yet, and a call may wait or
retry for minutes: a signal then ends the start-up at once (``StartupInterrupted``).
"""

from __future__ import annotations

import os
import signal
from typing import Any


class StartupInterrupted(BaseException):
    """SIGTERM or SIGINT during start-up. A BaseException, as KeyboardInterrupt is, so that no
    ``except Exception`` on its way out of a boto3 call (botocore's retries) can swallow it."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class SignalQueue:
    def __init__(self) -> None:
        self.pending: list[int] = []
        self.starting = False  # start-up calls are running: a signal interrupts them
        self.wake_fd = -1  # readable when a signal arrived

    def install(self) -> None:
        self.wake_fd, wake_w = os.pipe()
        os.set_blocking(self.wake_fd, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._queue)

    def _queue(self, signum: int, frame: Any) -> None:
        """NO LOGGING HERE: only queue the signal; the loop handles it."""
        if self.starting:
            self.starting = False  # once: a second signal must not break the stop of the metrics process
            raise StartupInterrupted(signum)
        self.pending.append(signum)

    def drain_wakeups(self) -> None:
        try:
            while os.read(self.wake_fd, 512):
                pass
        except BlockingIOError:
            pass

"""The tests' one fake clock: a time that moves only when a test sets or advances it."""

from __future__ import annotations


class Clock:
    """Callable as ``time.monotonic`` (or ``time.time``) is; ``now`` is the time it returns."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now

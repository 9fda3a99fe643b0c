"""Retry delays as values: a pure function of the attempt number and a random draw."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with full jitter, capped.

    >>> b = Backoff(base_s=0.1, cap_s=2.0)
    >>> [round(b.ceiling(n), 2) for n in range(6)]
    [0.1, 0.2, 0.4, 0.8, 1.6, 2.0]
    """

    base_s: float = 0.2
    cap_s: float = 10.0

    def ceiling(self, attempt: int) -> float:
        return min(self.cap_s, self.base_s * (2.0 ** min(attempt, 30)))

    def next_delay(self, attempt: int, rng: random.Random) -> float:
        """Somewhere in [ceiling/2, ceiling]: never zero, so a retry storm cannot form."""
        top = self.ceiling(attempt)
        return top / 2 + rng.random() * top / 2

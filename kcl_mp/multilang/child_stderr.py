"""A processor's stderr as an operator expects it in the log: whole lines, within a budget.

The Java daemon logs every stderr line of a processor whole, at ERROR. kcl-mp logs them
whole too, at ``kclmp.processorStderrLevel`` (WARNING unless set: a processor's ordinary
logging is not an error), with two bounds that a processor stuck in a loop cannot break:

- A line is kept up to ``MAX_LINE_BYTES`` (64 KiB). A longer one is logged cut, saying so
  and by how much (``... [cut: 134,464 more bytes]``); the rest of it is skipped, never
  logged as further lines. 64 KiB holds any stack-trace or structured log line whole, fits
  one CloudWatch Logs event (256 KB), and is all of a processor's stderr that kcl-mp keeps
  in memory at once, whatever the processor writes.
- At most ``lines_per_window`` lines and ``bytes_per_window`` bytes each ``WINDOW_S``
  reach the log (``kclmp.processorStderrLinesPer10s``, ``kclmp.processorStderrBytesPer10s``;
  0: no limit, as Java). The default lines, 10,000, let a processor log a line per record
  at a shard's full write rate (1,000 records/s); the default bytes, 10 MiB, let each of
  those lines be 1 KiB, while 10,000 cut lines of 64 KiB would be 640 MiB. Lines over
  either budget are counted, and when a window that dropped lines closes, one ``Dropped``
  says how many lines and bytes: the flood shows in the log (and in the metrics) while it
  happens, not only when the processor exits. A line is counted by its UTF-8 bytes as
  kept (at most ``MAX_LINE_BYTES``).

Pure: bytes and the clock in, ``Line`` and ``Dropped`` events out. Lines break at ``\\n``,
``\\r`` or ``\\r\\n``, as ``child_lines.LineSplitter`` cuts stdout; unlike stdout's, a line over the
cap is cut and its remainder counted. Blank lines are neither logged nor counted.

>>> lines = StderrLines(lines_per_window=2, max_line_bytes=8)
>>> [e.render() for e in lines.feed(b"one\\ntwo and more\\nthree\\n", now=0.0) if e.logged]
['one', 'two and ... [cut: 4 more bytes]']
>>> lines.tick(now=10.0)
[Dropped(lines=1, window_s=10.0, bytes=5)]
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_LINE_BYTES = 64 << 10
WINDOW_S = 10.0
LINES_PER_WINDOW = 10_000
BYTES_PER_WINDOW = 10 << 20

_BREAK = re.compile(rb"\r\n|\r|\n")


@dataclass(frozen=True)
class Line:
    text: str
    cut_bytes: int  # bytes of the line past MAX_LINE_BYTES, not kept
    logged: bool  # within the budgets: goes to the log

    def render(self) -> str:
        return f"{self.text} ... [cut: {self.cut_bytes:,} more bytes]" if self.cut_bytes else self.text


@dataclass(frozen=True)
class Dropped:
    lines: int  # lines not logged in the window that just closed
    window_s: float
    bytes: int = 0  # their bytes as kept


Event = Line | Dropped


class StderrLines:
    """One processor's stderr, fed as it is read. ``report_due()`` says when ``tick`` must
    run for a window's drops to be reported although no further line arrives."""

    def __init__(self, lines_per_window: int = LINES_PER_WINDOW, window_s: float = WINDOW_S,
                 max_line_bytes: int = MAX_LINE_BYTES, bytes_per_window: int = BYTES_PER_WINDOW):
        self.lines_per_window, self.window_s, self.max_line_bytes = lines_per_window, window_s, max_line_bytes
        self.bytes_per_window = bytes_per_window
        self._parts: list[bytes] = []  # the unfinished line's kept part
        self._size = 0
        self._cut = 0
        self._after_cr = False
        self._window_started: float | None = None
        self._logged = 0
        self._logged_bytes = 0
        self._dropped = 0
        self._dropped_bytes = 0

    def feed(self, chunk: bytes, now: float) -> list[Event]:
        events: list[Event] = self.tick(now)
        if self._after_cr and chunk[:1] == b"\n":
            chunk = chunk[1:]  # the \n of a \r\n split across two reads
        if not chunk:
            return events
        self._after_cr = chunk[-1:] == b"\r"
        pieces = _BREAK.split(chunk)
        rest = pieces.pop()
        for piece in pieces:
            self._keep(piece)
            events.extend(self._finish(now))
        self._keep(rest)
        return events

    def tick(self, now: float) -> list[Event]:
        """The closing window's drops, once it has closed."""
        if self._window_started is None or now - self._window_started < self.window_s:
            return []
        dropped = self._take_dropped()
        return [dropped] if dropped.lines else []

    def end(self, now: float) -> list[Event]:
        """At EOF: the unterminated last line, then whatever the last window dropped."""
        events = self._finish(now) if self._size or self._cut else []
        dropped = self._take_dropped()
        return events + [dropped] if dropped.lines else events

    def _take_dropped(self) -> Dropped:
        """The window's drops; a new window starts with the next line."""
        dropped = Dropped(self._dropped, self.window_s, self._dropped_bytes)
        self._dropped = self._dropped_bytes = self._logged = self._logged_bytes = 0
        self._window_started = None
        return dropped

    def report_due(self) -> float | None:
        """When the current window closes, if it has drops to report; else None."""
        return None if not self._dropped or self._window_started is None else self._window_started + self.window_s

    def _keep(self, piece: bytes) -> None:
        room = max(0, self.max_line_bytes - self._size)
        if len(piece) > room:
            self._cut += len(piece) - room
            piece = piece[:room]
        if piece:
            self._parts.append(piece)
            self._size += len(piece)

    def _finish(self, now: float) -> list[Event]:
        raw, cut = b"".join(self._parts), self._cut
        self._parts, self._size, self._cut = [], 0, 0
        text = raw.decode("utf-8", "replace").rstrip()
        if not text:
            return []
        events: list[Event] = self.tick(now)
        if self._window_started is None:
            self._window_started = now
        size = len(raw)
        logged = ((not self.lines_per_window or self._logged < self.lines_per_window)
                  and (not self.bytes_per_window or self._logged_bytes + size <= self.bytes_per_window))
        if logged:
            self._logged += 1
            self._logged_bytes += size
        else:
            self._dropped += 1
            self._dropped_bytes += size
        events.append(Line(text, cut, logged))
        return events


__all__ = ["Dropped", "Line", "StderrLines", "BYTES_PER_WINDOW", "LINES_PER_WINDOW", "MAX_LINE_BYTES", "WINDOW_S"]

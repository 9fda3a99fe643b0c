"""A processor child's stdout as the daemon reads it: its messages queued in order for
the exchange that awaits them, and a ``StdoutNote`` kept for every line Java would not
take as the child meant (skipped, a second message on one line, a message nobody asked
for), so a report can name the line and the reason (the conformance kit's does).

Java reads the child's stdout only while it awaits a status (PROTOCOL.md 2): a message
written after a status, before the next action, is read in the next action's exchange.
kcl-mp reads all the time (a full pipe must not block the child) and queues, to the same
effect; what it keeps apart is *when* a message came. ``expect(action)`` is called before
an action is written and a status read ends the wait, so a message read while nothing was
awaited is LATE, and its note says which status it followed.

The driver's stdout thread calls ``line``; its calling thread calls ``expect``, ``take``s
the queued messages and asks ``silence`` why a wait timed out.

Bounds, since this runs in the pool process every shard of it shares: a line longer than any
message (``child_lines.MAX_MESSAGE_BYTES``) is skipped before it is decoded; the messages nobody has
taken yet are bounded in count and in bytes of their lines (``max_queued``,
``max_queued_bytes``). Past either, further messages are dropped and ``overflow`` names the
limit: the driver fails the processor with it at its next wait (a child that floods stdout
with messages nobody asked for is broken).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from typing import Any

from kcl_mp.multilang.child_lines import LineSplitter, Message, Skip, Status, oversized, parse_line
from kcl_mp.multilang.stdout_notes import DRAINED, IGNORED, LATE, NOTE_CHARS, SKIPPED, TEXT, StdoutNote, silence

EOF = object()  # the last item of ``messages``
NOTES_KEPT = 50  # the latest notes not yet taken

LogEntry = tuple[int, str, tuple[Any, ...]]


class ChildStdout:
    def __init__(self, shard_id: str, max_queued: int, max_queued_bytes: int):
        self.shard_id = shard_id
        self.splitter = LineSplitter()
        self.messages: queue.Queue[Any] = queue.Queue()  # (Message, its LATE note or None, bytes), then EOF
        self.overflow: str | None = None  # why messages were dropped: a broken child
        self.lines = 0
        self._max_queued = max_queued
        self._max_queued_bytes = max_queued_bytes
        self._queued_bytes = 0
        self._bytes_lock = threading.Lock()
        self._awaited: str | None = None
        self._after: str | None = None  # the responseFor of the last status read
        self._notes: deque[StdoutNote] = deque(maxlen=NOTES_KEPT)
        self._last: StdoutNote | None = None  # about the last line, if Java would not take it as meant

    def expect(self, action: str) -> None:
        """``action`` is about to be written: what comes from now on answers it."""
        self._awaited = action

    def line(self, raw: bytes) -> LogEntry | None:
        """One line from the child, in the stdout thread; what to log about it, if anything."""
        self.lines += 1
        skipped = oversized(raw)
        message: Message | Skip | None
        if skipped is None:
            text = raw.decode("utf-8", "replace")
            message = parse_line(text)
        else:
            text, message = skipped.line, skipped  # its head: the rest was never decoded
        if message is None:
            return None  # an empty line: Java ignores it silently
        self._last = None
        if isinstance(message, Skip):
            self._last = self._note(SKIPPED if message.meant else TEXT, message.reason, text, len(raw))
            return (logging.INFO, "Skipping unexpected line on STDOUT for shard %s: %s [%s]",
                    (self.shard_id, text[:NOTE_CHARS], message.reason))
        said = None
        if message.ignored:
            self._last = self._note(IGNORED, message.ignored, text, len(raw))
            said = (logging.WARNING, "processor for %s: %s: %s", (self.shard_id, message.ignored,
                                                                    text[:NOTE_CHARS]))
        late = None
        if self._awaited is None:
            where = f"after the status for {self._after}" if self._after else "before the first action"
            late = self._note(LATE, f"{message.action} sent {where}, before the next action", text, len(raw),
                              self._after)
        if isinstance(message, Status):
            self._awaited, self._after = None, message.response_for
        with self._bytes_lock:
            if self.messages.qsize() >= self._max_queued:
                self.overflow = f"more than {self._max_queued} messages nobody asked for"
            elif self._queued_bytes + len(raw) > self._max_queued_bytes:
                self.overflow = (f"more than {self._max_queued_bytes} bytes of messages nobody asked for "
                                 "(kcl-mp's bound on a processor's unread stdout messages)")
            else:
                self._queued_bytes += len(raw)
                self.messages.put((message, late, len(raw)))
        return said

    def take(self, timeout: float | None) -> Any:
        """The next queued item, (message, LATE note or None), or EOF; waits up to ``timeout``
        (None: not at all) and raises ``queue.Empty`` if none came."""
        item = self.messages.get(timeout=timeout) if timeout is not None else self.messages.get_nowait()
        if item is EOF:
            return item
        message, late, size = item
        with self._bytes_lock:
            self._queued_bytes -= size
        return message, late

    def drained(self, message: Message, late: StdoutNote | None) -> None:
        """``message`` was still queued when the child's stdin was closed: Java drains it unread."""
        if late is None:  # a late one was noted when it was read
            self._note(DRAINED, "read only after the processor's stdin was closed: Java drains it unread",
                       message.line, len(message.line.encode("utf-8", "replace")))

    def silence(self, lines_before: int) -> StdoutNote | None:
        """Why no message came since ``lines`` was ``lines_before`` (kept as a note if new)."""
        why = silence(self.lines - lines_before, self.splitter.pending, self._last)
        if why is not None and why is not self._last:
            self._notes.append(why)
        return why

    def take_notes(self) -> list[StdoutNote]:
        """The notes kept since the last call (at most NOTES_KEPT, the latest)."""
        notes = []
        while self._notes:
            notes.append(self._notes.popleft())
        return notes

    def _note(self, kind: str, reason: str, text: str, size: int, after: str | None = None) -> StdoutNote:
        note = StdoutNote(kind, reason, text[:NOTE_CHARS], size, after)
        self._notes.append(note)
        return note


__all__ = ["EOF", "ChildStdout", "NOTES_KEPT"]

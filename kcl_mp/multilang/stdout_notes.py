"""What the daemon notes about a processor's stdout for reports (the conformance kit's, the
driver's timeout errors): a line Java would not take as its writer meant, or no line at all.
Pure. ``child_stdout`` keeps the notes; ``silence`` explains a wait that timed out.
"""

from __future__ import annotations

from dataclasses import dataclass

# What became of a stdout line Java would not take as its writer meant (StdoutNote.kind).
SKIPPED = "skipped"  # meant as a message (it has an action), skipped by Java
TEXT = "text"  # plain text or a JSON log line: skipped, as it should be
IGNORED = "ignored"  # a second message on the line of another: Java reads only the first
LATE = "late"  # a message written after a status, before the next action was sent
DRAINED = "drained"  # read only after the child's stdin was closed: Java logs it, unread
UNREAD = "unread"  # the last line has no line break: Java waits for its end
SILENT = "silent"  # nothing written while a message was awaited
NOTE_CHARS = 2000


@dataclass(frozen=True)
class StdoutNote:
    """A stdout line (or its absence) Java would not take as the child meant, for reports
    such as the conformance kit's: ``line`` cut at NOTE_CHARS, ``size`` its bytes,
    ``after`` the status a LATE message followed (None: sent before the first action)."""

    kind: str
    reason: str
    line: str = ""
    size: int = 0
    after: str | None = None

    def summary(self) -> str:
        """One line for a log or an error: the reason, and the line if there is one."""
        if not self.line:
            return self.reason
        return f"{self.reason}: {self.line[:200]!r}{'...' if self.size > 200 else ''} ({self.size} bytes)"


def silence(lines_read: int, pending: bytes, last: StdoutNote | None) -> StdoutNote | None:
    """Why no message came, as far as the child's stdout shows: an unfinished last line
    (Java reads a line only once it ends), a last line Java skipped or read only in part,
    or nothing at all since ``lines_read`` was counted (only inferred: a write left in the
    child's own buffer looks the same). None: it wrote messages, then nothing.

    >>> import textwrap
    >>> print(textwrap.fill(silence(0, b"", None).reason, 80))
    nothing was written to stdout: was stdout flushed? (inferred: a write left in
    the processor's buffer looks the same as a processor still at work)
    """
    if pending:
        return StdoutNote(UNREAD, "the last line has no newline: it was never read",
                          pending[:NOTE_CHARS * 4].decode("utf-8", "replace")[:NOTE_CHARS], len(pending))
    if last is not None and last.kind in (SKIPPED, TEXT, IGNORED):
        return last  # the last line it wrote: what it meant by it is the likely cause
    if lines_read == 0:
        return StdoutNote(SILENT, "nothing was written to stdout: was stdout flushed? (inferred: a write left in "
                                  "the processor's buffer looks the same as a processor still at work)")
    return None

"""The conformance kit's verdicts, pure: from what a scenario saw (its failure, if any, and
the driver's notes on the processor's stdout, by step) to PASS, WARN or FAIL and the lines
that explain it.

The rule (multilang/PROTOCOL.md): FAIL where the Java daemon would break or a shard would
stall (the driver's errors; no checkpoint at shard end, a late one included, PROTOCOL.md 6);
WARN where Java carries on but not as the processor meant: a line meant as a message that
Java skips, a second message on one line, a message written after a status (Java reads it
only while it awaits the next action's status, PROTOCOL.md 2). Plain text on stdout is
skipped as it should be and only shown beside a failure, as a possible cause.

>>> from kcl_mp.multilang.stdout_notes import LATE, StdoutNote
>>> late = StdoutNote(LATE, "checkpoint sent after the status for processRecords, before the next action",
...                   '{"action":"checkpoint"}', 23, "processRecords")
>>> verdict(None, [Seen(2, "processRecords", "processRecords", late)])[0]
'WARN'
"""

from __future__ import annotations

from dataclasses import dataclass

from kcl_mp.multilang.child_lines import CheckpointRequest, Status, parse_line
from kcl_mp.multilang.stdout_notes import DRAINED, IGNORED, LATE, SILENT, SKIPPED, TEXT, UNREAD, StdoutNote
from kcl_mp.multilang.wire import LEASE_LOST, PROCESS_RECORDS, SHARD_ENDED

LINE_SHOWN = 160  # longer lines are shown cut, with their length

_WHAT = {
    SKIPPED: "a line Java skips",
    TEXT: "a line Java skips (not a message)",
    IGNORED: "a line Java reads only in part",
    UNREAD: "a line Java never reads",
    SILENT: "nothing written",
    DRAINED: "a line read only after stdin was closed",
}
_WARNS = frozenset({SKIPPED, IGNORED, LATE})


@dataclass(frozen=True)
class Seen:
    """A note, with the step it was taken at and the step that followed (None: the last)."""

    step: int
    what: str
    next_action: str | None
    note: StdoutNote


def verdict(failure: str | None, seen: list[Seen]) -> tuple[str, list[str]]:
    """PASS, WARN or FAIL, and the report lines for the notes worth showing."""
    unread = {s.note.line for s in seen if s.note.kind == UNREAD}
    shown = [s for s in seen if (s.note.kind in _WARNS or failure is not None)
             and not (s.note.kind == DRAINED and s.note.line in unread)]  # said already
    lines: list[str] = []
    for s in shown:
        lines.extend(_explain(s, any(o.note.kind == SILENT for o in seen)))
    if failure is not None:
        return "FAIL", lines
    return ("WARN" if shown else "PASS"), lines


def late_shard_end(seen: list[Seen]) -> Seen | None:
    """A checkpoint written after the status for shardEnded: Java drains it unread."""
    return next((s for s in seen if s.note.kind == LATE and s.note.after == SHARD_ENDED
                 and isinstance(parse_line(s.note.line), CheckpointRequest)), None)


def _explain(seen: Seen, was_silent: bool) -> list[str]:
    note = seen.note
    if note.kind == LATE:
        what = note.reason.split(",")[0]  # "checkpoint sent after the status for X"
        why = _late_consequence(note, seen.next_action)
    else:
        what, why = _WHAT[note.kind], note.reason
        if note.kind == DRAINED and was_silent:
            why += " (so it was written, but reached stdout only when the processor exited: never flushed)"
    return [f"step {seen.step} ({seen.what}): {what}",
            f"  line: {shorten(note.line, note.size)}" if note.line else "  line: none",
            f"  why:  {why}"]


def _late_consequence(note: StdoutNote, next_action: str | None) -> str:
    message = parse_line(note.line)
    kind = "checkpoint" if isinstance(message, CheckpointRequest) else "message"
    if next_action is None:
        return (f"Java closes stdin after the last status and drains this line unread: the {kind} is never "
                "acted on (PROTOCOL.md 5.4)")
    why = (f"Java reads it only once the next action ({next_action}) is sent, and takes it as part of that "
           "exchange (PROTOCOL.md 2)")
    if isinstance(message, CheckpointRequest):
        if next_action == LEASE_LOST:
            why += ": refused then (InvalidStateException: no checkpoint during leaseLost, PROTOCOL.md 5.2)"
        elif message.sequence_number is None and next_action == PROCESS_RECORDS:
            why += ": with no sequence number it checkpoints the end of the next batch before the processor has seen it"
        elif message.sequence_number is None and next_action == SHARD_ENDED:
            why += ": with no sequence number it checkpoints SHARD_END before the processor has seen shardEnded"
    elif isinstance(message, Status):
        why += f": it is taken as the status for {next_action}"
    return why


def shorten(line: str, size: int) -> str:
    """The line as shown: control characters escaped; a long one cut, with its length."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in line)
    whole = len(line.encode("utf-8", "replace")) >= size  # not already cut by the driver
    if whole and len(text) <= LINE_SHOWN:
        return f"{text}  ({size} bytes)"
    return f"{text[:LINE_SHOWN - 40]} ...{' ' + text[-30:] if whole else ''}  ({size} bytes, shown cut)"

"""The conformance kit's verdicts, pure: which notes on a processor's stdout make a WARN,
what a FAIL shows beside its reason, and how a line is shown."""

from __future__ import annotations

from kcl_mp.cli.check_report import Seen, late_shard_end, shorten, verdict
from kcl_mp.multilang.stdout_notes import DRAINED, LATE, SILENT, SKIPPED, TEXT, UNREAD, StdoutNote

CHECKPOINT = '{"action":"checkpoint","sequenceNumber":null}'


def late(after: str, line: str = CHECKPOINT) -> StdoutNote:
    return StdoutNote(LATE, f"checkpoint sent after the status for {after}, before the next action", line, len(line),
                      after)


def test_plain_text_alone_passes_and_is_shown_only_beside_a_failure():
    text = Seen(2, "processRecords", "leaseLost", StdoutNote(TEXT, "not JSON (Expecting value at column 1)", "hi", 2))
    assert verdict(None, [text]) == ("PASS", [])
    result, lines = verdict("sent no message", [text])
    assert result == "FAIL" and lines == ["step 2 (processRecords): a line Java skips (not a message)",
                                          "  line: hi  (2 bytes)",
                                          "  why:  not JSON (Expecting value at column 1)"]


def test_a_skipped_message_or_a_late_one_is_a_warning():
    skipped = StdoutNote(SKIPPED, "checkpoint with an extra key 'x' (Java skips it)",
                         '{"action":"checkpoint","x":1}', 29)
    assert verdict(None, [Seen(2, "processRecords", "leaseLost", skipped)])[0] == "WARN"
    result, lines = verdict(None, [Seen(2, "processRecords", "leaseLost", late("processRecords"))])
    assert result == "WARN"
    assert lines[0] == "step 2 (processRecords): checkpoint sent after the status for processRecords"
    assert lines[2].endswith("refused then (InvalidStateException: no checkpoint during leaseLost, PROTOCOL.md 5.2)")
    _, lines = verdict(None, [Seen(3, "leaseLost", None, late("leaseLost"))])
    assert "drains this line unread" in lines[2]


def test_a_late_checkpoint_after_shard_end_is_found():
    seen = [Seen(2, "processRecords", "shardEnded", late("processRecords")),
            Seen(3, "shardEnded", None, late("shardEnded"))]
    assert late_shard_end(seen) is seen[1]
    assert late_shard_end(seen[:1]) is None


def test_a_status_drained_after_silence_confirms_it_was_never_flushed():
    status = '{"action":"status","responseFor":"processRecords"}'
    seen = [Seen(2, "processRecords", "leaseLost", StdoutNote(SILENT, "nothing was written to stdout")),
            Seen(2, "processRecords", "leaseLost", StdoutNote(DRAINED, "read only after stdin was closed", status, 51))]
    _, lines = verdict("sent no message", seen)
    assert lines[1] == "  line: none" and lines[5].endswith("never flushed)")
    unread = [Seen(2, "processRecords", "leaseLost", StdoutNote(UNREAD, "the last line has no newline", status, 51)),
              seen[1]]
    assert len(verdict("sent no message", unread)[1]) == 3  # the same line drained later is not said twice


def test_shorten():
    assert shorten("a\tb", 3) == "a\\tb  (3 bytes)"
    long = '{"action":"status","responseFor":"processRecords","x":"' + "y" * 20_000 + '"}'
    shown = shorten(long, len(long))
    assert shown.startswith(long[:120] + " ... ") and shown.endswith('yyy"}  (20057 bytes, shown cut)')
    assert len(shown) < 200
    assert shorten(long[:2000], 20_057).endswith(" ...  (20057 bytes, shown cut)")  # the driver kept only its head

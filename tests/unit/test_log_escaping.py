"""What a hostile lease key or processor line can do to the log: nothing. Text lines escape
control characters (one record, one line; no terminal escapes), JSON lines too, and every
form of a known credential is removed, whole, escaped, encoded or cut."""

from __future__ import annotations

import json
import logging
from urllib.parse import quote

import pytest

from kcl_mp import logs

FORGED = "2026-11-25T15:00:00.000 ERROR   worker=host-sec shard=- AccessDenied: stream deleted, exiting"
HOSTILE = "a\x1b[31mred\x1b]0;title\x07 \x7f\x85\x9b31m \u2028\u2029 tab\there\r\n" + FORGED
SECRET = "uNiTlOgSeCrEt/K7MDENG/bPxRfiCY+EXAMPLEKEY="
TOKEN = "IQoJb3JpZ2luX2VjEDoaCXVzLWVhc3QtMSJIMEYCIQD/unit+token/0123456789abcdefghijklmnopqrstuvwxyz=="


@pytest.fixture
def log_text(capsys):
    """Log one record in a format; what reached stderr."""
    def emit(fmt: str, message: str, shard: str = "-", exc: BaseException | None = None) -> str:
        logs.setup("INFO", fmt, "w-1")
        log = logs.ShardLog(logging.getLogger("kcl_mp.test"), "w-1", shard)
        if exc is None:
            log.error("processor stderr: %s", message)
        else:
            try:
                raise exc
            except type(exc):
                log.exception("failed: %s", message)
        return capsys.readouterr().err

    yield emit
    logs.setup("WARNING", "text")


def test_text_lines_escape_every_control_character_in_message_and_shard(log_text):
    err = log_text("text", HOSTILE, shard="shardId-7\n" + FORGED)
    assert err.count("\n") == 1 and err.endswith("\n"), "one record, one line"
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 or c in "\u2028\u2029" for c in err[:-1])
    assert "shard=shardId-7\\n2026-11-25T15:00:00.000 ERROR" in err
    assert "a\\x1b[31mred\\x1b]0;title\\x07 \\x7f\\x85\\x9b31m \\u2028\\u2029 tab\\there\\r\\n2026" in err


def test_a_traceback_keeps_its_lines_but_none_can_pass_for_a_record(log_text):
    err = log_text("text", "x", exc=ValueError("bad row\n" + FORGED + "\x1b[2K"))
    lines = err.rstrip("\n").split("\n")
    assert lines[0].endswith("failed: x") and len(lines) > 3
    assert all(line.startswith("  ") for line in lines[1:]), lines  # only a record's first line starts a line
    assert lines[-1] == "  " + FORGED + "\\x1b[2K"


def test_json_lines_escape_del_c1_and_line_separators_and_read_back_the_same(log_text):
    err = log_text("json", HOSTILE, shard="shardId-7\n" + FORGED)
    assert err.count("\n") == 1
    assert all(ord(c) < 0x7F and c != "\x1b" for c in err[:-1] if not c.isalnum()), "a raw control in JSON"
    entry = json.loads(err)
    assert entry["msg"] == "processor stderr: " + HOSTILE and entry["shard"] == "shardId-7\n" + FORGED


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_every_form_of_a_resolved_credential_is_removed(log_text, fmt):
    logs.add_secrets("AKIAUNITLOGSCRUB0001", SECRET, TOKEN)  # as aws.clients does when it signs
    lower_hex = quote(SECRET, safe="").replace("%2F", "%2f").replace("%2B", "%2b").replace("%3D", "%3d")
    forms = [SECRET, SECRET.replace("/", "\\/"), quote(SECRET, safe=""), lower_hex,
             json.dumps({"t": TOKEN.replace("/", "\\/")}), quote(TOKEN, safe=""), "AKIAUNITLOGSCRUB0001",
             SECRET[:12] + " (a start of it, cut short)"]
    for form in forms:
        err = log_text(fmt, f"key={form}!")
        for leak in (SECRET[:12], TOKEN[:12], "AKIAUNITLOGS", quote(SECRET, safe="")[:12]):
            assert leak not in err, (form, err)
        assert logs.REDACTED in err


def test_a_line_cut_by_a_limit_loses_any_start_of_a_secret_at_its_end(monkeypatch):
    # only this test's secret: one an earlier test of this process left (a credential starting
    # with "e") would take the "e" that ends the last line
    monkeypatch.setattr(logs, "_SECRETS", logs._Secrets())
    logs.add_secrets(SECRET)
    for size in (1, 5, 11, 12, 30):
        cut = "y" * 100 + SECRET[:size]
        assert logs.redact_cut(cut) == "y" * 100 + logs.REDACTED, size
    assert logs.redact_cut("nothing secret here") == "nothing secret here"


def test_short_values_are_not_secrets_and_the_newest_are_kept():
    logs.add_secrets("x", "short", None)
    assert logs.redact("x short", logs._SECRETS.forms) == "x short"
    for n in range(logs.MAX_SECRETS + 5):  # refreshed credentials, each set new
        logs.add_secrets(f"{n:04d}-rotated-credential")
    forms = logs._SECRETS.forms
    assert logs.redact("0000-rotated-credential", forms) == "0000-rotated-credential", "the oldest made room"
    assert logs.redact(f"{logs.MAX_SECRETS + 4:04d}-rotated-credential", forms) == logs.REDACTED


def test_a_lease_event_is_a_json_field_and_leaves_the_text_line_as_it_was(capsys):
    """The stable name a program keys on is in the JSON line only; the text line is unchanged."""
    lines = {}
    for fmt in ("text", "json"):
        logs.setup("INFO", fmt, "w-1")
        logs.ShardLog(logging.getLogger("kcl_mp.supervisor"), "w-1").info(
            "lost lease %s: %s", "shardId-7", "taken", extra=logs.lease_event(logs.LeaseEvent.LOST, "shardId-7"))
        logs.ShardLog(logging.getLogger("kcl_mp.supervisor"), "w-1").info("starting")
        lines[fmt] = capsys.readouterr().err.splitlines()
    logs.setup("WARNING", "text")
    lost, starting = (json.loads(line) for line in lines["json"])
    assert (lost["event"], lost["lease"], lost["msg"]) == ("lease_lost", "shardId-7", "lost lease shardId-7: taken")
    assert "event" not in starting and "lease" not in starting
    assert lines["text"][0].endswith("worker=w-1 shard=- lost lease shardId-7: taken"), lines["text"]

"""The multilang protocol, pure: golden vectors replayed byte for byte, then edge cases."""

from __future__ import annotations

import base64
import json
import time
from collections import deque
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcl_mp.errors import ProtocolError
from kcl_mp.multilang.child_lines import (
    MAX_MESSAGE_BYTES,
    CheckpointRequest,
    LineSplitter,
    Other,
    Skip,
    Status,
    oversized,
    parse_line,
)
from kcl_mp.multilang.child_stdout import ChildStdout
from kcl_mp.multilang.protocol import AWAIT, SEND, ChildState, Conversation, Done, Ignored, Reply, Store
from kcl_mp.multilang.stdout_notes import NOTE_CHARS, SILENT, SKIPPED, UNREAD, StdoutNote, silence
from kcl_mp.multilang.wire import Batch, encode, encode_checkpoint_reply, make_batch
from kcl_mp.sequence import SHARD_END, ExtendedSequenceNumber

VECTORS = Path(__file__).resolve().parents[2] / "multilang" / "vectors"
VECTOR_FILES = sorted(VECTORS.glob("*.jsonl"))
# Errors only the lease table can produce: the fake checkpointer returns them when the
# vector says so. Everything else must come from the state machine itself.
STORE_ERRORS = {"ShutdownException", "ThrottlingException", "KinesisClientLibDependencyException"}
# Where a vector contradicts PROTOCOL.md, (file, line) -> the line we write instead, and why.
# checkpoint_error.jsonl illustrates DynamoDB-side failures with checkpoint(null) right after
# a checkpoint at the last delivered record. That value equals the last successful
# checkpoint, which 5.3 (Java's advancePosition) answers with success and no write, so
# no lease-table error can occur there. The store-error path is tested separately below.
_NOOP = '{"action":"checkpoint","sequenceNumber":null,"subSequenceNumber":null,"error":null}'
VECTOR_DEVIATIONS = {("checkpoint_error.jsonl", 19): _NOOP, ("checkpoint_error.jsonl", 21): _NOOP}


def test_vectors_are_there():
    assert len(VECTOR_FILES) >= 15, f"golden vectors missing under {VECTORS}"


def _next_reply_error(entries: list[dict], index: int) -> str | None:
    for entry in entries[index + 1 :]:
        if entry["dir"] == "to_processor":
            error = entry["msg"].get("error") if entry["msg"]["action"] == "checkpoint" else None
            return error if error in STORE_ERRORS else None
    return None


def _users(records: list[dict]) -> list[tuple]:
    return [(r["data"], r["partitionKey"], r["sequenceNumber"], r["approximateArrivalTimestamp"],
             r["subSequenceNumber"]) for r in records]


def _daemon_line(conv: Conversation | None, msg: dict) -> tuple[Conversation, bytes]:
    action = msg["action"]
    if action == "initialize":
        conv = Conversation(msg["shardId"])  # every initialize is a fresh child
        seq = msg["sequenceNumber"]
        position = None if seq is None else ExtendedSequenceNumber(seq, msg["subSequenceNumber"])
        return conv, conv.initialize(position)
    assert conv is not None
    if action == "processRecords":
        return conv, conv.process_records(make_batch(_users(msg["records"]), msg["millisBehindLatest"]))
    method = {"leaseLost": conv.lease_lost, "shardEnded": conv.shard_ended,
              "shutdownRequested": conv.shutdown_requested}[action]
    return conv, method()


@pytest.mark.parametrize("terminator", ["\n", "\r\n"], ids=["lf", "crlf"])
@pytest.mark.parametrize("path", VECTOR_FILES, ids=[p.stem for p in VECTOR_FILES])
def test_vector_replay(path: Path, terminator: str):
    """Drive the pure daemon side with the child's lines; it must write exactly ``raw``."""
    entries = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    conv: Conversation | None = None
    outbox: deque[bytes] = deque()
    stored: list[ExtendedSequenceNumber] = []
    failure: ProtocolError | None = None
    for index, entry in enumerate(entries):
        where = f"{path.name}:{index + 1}"
        if entry["dir"] == "to_processor":
            if entry["msg"]["action"] != "checkpoint":
                assert not outbox, f"{where}: unanswered output {list(outbox)}"
                conv, line = _daemon_line(conv, entry["msg"])
                outbox.append(line)
            assert outbox, f"{where}: the daemon side wrote nothing, expected {entry['raw']}"
            expected = VECTOR_DEVIATIONS.get((path.name, index + 1), entry["raw"])
            assert outbox.popleft() == (expected + "\n").encode("utf-8"), where
        elif entry["dir"] == "from_processor":
            splitter = LineSplitter()
            lines = splitter.feed((entry["raw"] + terminator).encode("utf-8")) + splitter.end()
            for raw in lines:  # a raw may hold several lines: Node writes "\n{json}\n" at once
                message = parse_line(raw.decode("utf-8"))
                if message is None or isinstance(message, Skip):
                    assert "msg" not in entry or not raw.strip() or "extra" in entry["raw"], where
                    continue
                assert conv is not None
                try:
                    outcome = conv.receive(message)
                except ProtocolError as exc:
                    failure = exc
                    continue
                if isinstance(outcome, Reply):
                    outbox.append(outcome.line)
                elif isinstance(outcome, Store):
                    error = _next_reply_error(entries, index)
                    if error is None:
                        stored.append(outcome.position)
                    outbox.append(conv.stored(outcome, error))
        else:
            event = entry["event"]
            if event == "close_stdin":
                assert conv is not None and conv.state is ChildState.FINISHED, where
            elif event == "child_stays_alive":
                assert conv is not None and conv.state is ChildState.SHUTDOWN_REQUESTED, where
            elif event == "lease_checkpoint":
                assert stored and stored[-1] == ExtendedSequenceNumber(entry["value"]), where
            elif event == "shard_end_not_checkpointed":
                assert conv is not None and not conv.checkpointed_shard_end, where
            elif event in ("no_reply", "fatal") or (event == "child_exit" and entry.get("code")):
                # the driver turns these into errors: the conversation must be broken or waiting
                assert failure is not None or (conv is not None and conv.awaiting), where
    assert not outbox, f"{path.name}: output the vector does not have: {list(outbox)}"
    if path.name == "failure_wrong_response.jsonl":
        assert failure is not None and "processRecords" in str(failure)
    else:
        assert failure is None, failure


# -- encoding --------------------------------------------------------------------------


def _jackson_string(text: str) -> str:
    """A reference for Jackson's string escaping, one character at a time."""
    short = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
    out = []
    for ch in text:
        if ch in short:
            out.append(short[ch])
        elif ord(ch) < 0x20:
            out.append(f"\\u{ord(ch):04X}")
        elif 0xD800 <= ord(ch) <= 0xDFFF:
            out.append("?")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def test_control_characters_use_upper_case_hex():
    text = "".join(chr(i) for i in range(0x20)) + "\x7f/\u2028é😀\"\\"
    line = encode({"action": "x", "v": text})
    assert line == ('{"action":"x","v":' + _jackson_string(text) + "}\n").encode("utf-8")
    assert b"\\u001F" in line and b"\\u000B" in line and b"\x7f" in line and "é".encode() in line


def test_backslash_followed_by_u_text_is_not_an_escape():
    # the text is a backslash then "u001f": written as \\u001f, which must stay lower-case
    line = encode({"v": "\\u001f\\\x1f"})
    assert line == b'{"v":"\\\\u001f\\\\\\u001F"}\n'


def test_lone_surrogate_becomes_question_mark():
    assert encode({"v": "a\ud800b"}) == b'{"v":"a?b"}\n'


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF)))
def test_any_partition_key_is_written_as_jackson_would(key: str):
    batch = make_batch([("YQ==", key, "1", 0, 0)], None)
    expected = ('{"action":"processRecords","records":[{"data":"YQ==","partitionKey":' + _jackson_string(key)
                + ',"sequenceNumber":"1","approximateArrivalTimestamp":0,"subSequenceNumber":0,"action":"record"}],'
                '"millisBehindLatest":null}\n')
    assert batch.line == expected.encode("utf-8")
    assert batch.line.count(b"\n") == 1


def test_empty_batch():
    batch = make_batch([], None)
    assert batch == Batch(b'{"action":"processRecords","records":[],"millisBehindLatest":null}\n', 0, None, None)


def test_batch_position_is_its_last_record():
    batch = make_batch([("", "k", "5", 1, 0), ("", "k", "9", 2, 0), ("", "k", "9", 2, 3)], 7)
    assert (batch.count, batch.last, batch.millis_behind_latest) == (3, ExtendedSequenceNumber("9", 3), 7)
    assert json.loads(batch.line)["records"][0]["data"] == ""


def test_checkpoint_reply_echoes_request():
    assert encode_checkpoint_reply("1003", None, "IllegalArgumentException") == (
        b'{"action":"checkpoint","sequenceNumber":"1003","subSequenceNumber":null,"error":"IllegalArgumentException"}\n')


def _typical_users(n: int) -> list[tuple]:
    data = base64.b64encode(bytes(range(100))).decode()
    base = 49590338271490256608559692538361571095921575989136588898
    return [(data, f"partition-key-{i % 97}", str(base + i), 1700000000000 + i, 0) for i in range(n)]


def test_large_batch_is_one_valid_line():
    users = _typical_users(10_000)
    batch = make_batch(users, 0)
    assert batch.line.endswith(b"\n") and batch.line.count(b"\n") == 1
    decoded = json.loads(batch.line)
    assert len(decoded["records"]) == 10_000
    assert decoded["records"][-1]["sequenceNumber"] == users[-1][2]
    assert list(decoded["records"][0]) == ["data", "partitionKey", "sequenceNumber",
                                          "approximateArrivalTimestamp", "subSequenceNumber", "action"]


def test_make_batch_throughput(capsys):
    users = _typical_users(10_000)
    best = float("inf")
    for _ in range(5):  # on this thread's CPU clock: the phase's other tests share the cores
        started = time.thread_time()
        make_batch(users, 0)
        best = min(best, time.thread_time() - started)
    rate = len(users) / best
    with capsys.disabled():
        print(f"\nmake_batch: {rate:,.0f} records per CPU s (10,000 records of 100 bytes in {best * 1000:.2f} ms)")
    assert rate > 200_000  # a generous floor: a regression to per-record json.dumps would fail it


# -- framing and parsing ------------------------------------------------------------------


def test_line_splitter_handles_every_terminator_and_split_crlf():
    splitter = LineSplitter()
    assert splitter.feed(b"a\nb\r") == [b"a", b"b"]
    assert splitter.feed(b"\nc\r\nd") == [b"c"]  # the \n completing b's \r\n is not a line
    assert splitter.feed(b"\r\re") == [b"d", b""]
    assert splitter.end() == [b"e"]


def test_line_splitter_bounds_a_runaway_line():
    splitter = LineSplitter(max_bytes=10)
    assert splitter.feed(b"x" * 6) == []
    assert splitter.feed(b"y" * 19) == [b"xxxxxxyyyy"]  # the rest of that line is dropped
    assert splitter.feed(b"z\n") == [b"z"]


def test_line_splitter_joins_a_line_read_in_many_pieces():
    splitter = LineSplitter()
    pieces = [splitter.feed(b"%d," % i) for i in range(1000)]
    assert not any(pieces)
    assert splitter.feed(b"end\rnext") == [b"".join(b"%d," % i for i in range(1000)) + b"end"]
    assert splitter.end() == [b"next"] and splitter.end() == []


@pytest.mark.parametrize(
    "line, expected",
    [
        ("", None),
        ('{"action":"status","responseFor":"initialize"}', Status("initialize")),
        ('  {"responseFor":"initialize","action":"status"} junk', Status("initialize")),
        ('{"action":"status"}', Status(None)),
        ('{"action":"status","responseFor":5}', Status("5")),
        ('{"action":"status","responseFor":true}', Status("true")),
        ('{"action":"checkpoint","sequenceNumber":12345678901234567890123456789,"subSequenceNumber":"2"}',
         CheckpointRequest("12345678901234567890123456789", 2)),
        ('{"action":"checkpoint","sequenceNumber":1.50,"subSequenceNumber":2.9}', CheckpointRequest("1.50", 2)),
        ('{"action":"checkpoint","error":null,"sequenceNumber":null}', CheckpointRequest(None, None)),
        ('{"action":"checkpoint"}', CheckpointRequest(None, None)),
        ('{"action":"initialize","shardId":"x"}', Other("initialize")),
    ],
)
def test_parse_accepts(line, expected):
    assert parse_line(line) == expected


@pytest.mark.parametrize(
    "line",
    [
        "   ",
        "hello",
        "{'action': 'status'}",
        '["action"]',
        '{"action":"record"}',
        '{"action":"Status","responseFor":"initialize"}',
        '{"action":"status","responseFor":"initialize","extra":1}',
        '{"action":"checkpoint","sequenceNumber":{"a":1}}',
        '{"action":"checkpoint","subSequenceNumber":"abc"}',
        '{"action":"checkpoint","subSequenceNumber":99999999999999999999}',
        '{"action":"checkpoint","sequenceNumber":NaN}',
        '{"action":"leaseLost","x":1}',
    ],
)
def test_parse_skips(line):
    assert isinstance(parse_line(line), Skip)


# Why Java skips a line, as the conformance kit reports it; meant: it has an action, so its
# writer meant a message (plain text and JSON logs are skipped as they should be).
@pytest.mark.parametrize("line, reason, meant", [
    ("   ", "not JSON (a line of blanks)", False),
    ("hello", "not JSON (Expecting value at column 1)", False),
    ("{'action': 'status'}", "not JSON (Expecting property name enclosed in double quotes at column 2)", True),
    ('  {"action":"status","responseFor":"initialize"', "not JSON (Expecting ',' delimiter at column 48)", True),
    ('{"action":"checkpoint","sequenceNumber":NaN}', "not JSON (NaN is not JSON)", True),
    ('["action"]', "an array, not a JSON object", False),
    ('{"level":"info","msg":"hi"}', 'a JSON object without an "action" key', False),
    ('{"action":null}', '"action" is null, not text', True),
    ('{"action":"record"}', "unknown action 'record' (records exist only inside processRecords)", True),
    ('{"action":"Status","responseFor":"initialize"}', "unknown action 'Status' (actions are case-sensitive: 'status')",
     True),
    ('{"action":"status","responseFor":"initialize","foo":1}', "status with an extra key 'foo' (Java skips it)", True),
    ('{"action":"leaseLost","y":1,"x":2}', "leaseLost with extra keys 'x', 'y' (Java skips it)", True),
    ('{"action":"status","responseFor":{}}', "status whose responseFor is an object, not text (Java skips it)", True),
    ('{"action":"checkpoint","sequenceNumber":[1]}',
     "checkpoint whose sequenceNumber is an array, not text or a number (Java skips it)", True),
    ('{"action":"checkpoint","subSequenceNumber":"abc"}',
     "checkpoint whose subSequenceNumber is not a whole number in a Java long's range (Java skips it)", True),
])
def test_parse_says_why_a_line_is_skipped(line, reason, meant):
    assert parse_line(line) == Skip(line, reason, meant)


def test_parse_skips_what_python_cannot_decode_or_convert():
    # Each of these once ended the stdout reader (RecursionError, OverflowError, ValueError).
    for line, reason in [
        ("[" * 2000, "JSON nested too deeply to decode (not a message)"),
        ('{"action":"status","responseFor":' + "[" * 5000, "JSON nested too deeply to decode (not a message)"),
        ('{"action":"checkpoint","sequenceNumber":"1","subSequenceNumber":1e999}',
         "checkpoint whose subSequenceNumber is not a whole number in a Java long's range (Java skips it)"),
        ('{"action":"checkpoint","sequenceNumber":"1","subSequenceNumber":' + "9" * 5000 + "}",
         "checkpoint whose subSequenceNumber is not a whole number in a Java long's range (Java skips it)"),
        ('{"action":"checkpoint","sequenceNumber":"1","subSequenceNumber":"' + "9" * 5000 + '"}',
         "checkpoint whose subSequenceNumber is not a whole number in a Java long's range (Java skips it)"),
    ]:
        skipped = parse_line(line)
        assert isinstance(skipped, Skip) and skipped.reason == reason, line[:80]
    # A second message that cannot be decoded is only ignored, as any trailing text.
    status = parse_line('{"action":"status","responseFor":"initialize"} {' + "[" * 5000)
    assert isinstance(status, Status) and status.ignored.startswith("two JSON messages on one line")


def test_lines_that_cannot_be_messages_are_judged_before_decoding():
    numbers = "[" + "0," * 1000 + "0]"
    assert parse_line(numbers) == Skip(numbers, f"a line of {len(numbers)} characters that does not start with '{{': "
                                                "not a message (not decoded)")
    assert parse_line('["action"]').reason == "an array, not a JSON object"  # short: decoded, for the reason
    huge = b'{"action":"status","responseFor":"' + b"x" * MAX_MESSAGE_BYTES + b'"}'
    skipped = oversized(huge)
    assert skipped is not None and skipped.meant and len(skipped.line) == NOTE_CHARS
    assert skipped.reason == f"a line of {len(huge)} bytes: too long for a message (at most 1048576 bytes), not decoded"
    assert oversized(huge[:MAX_MESSAGE_BYTES]) is None


def test_unread_messages_are_bounded_in_bytes_and_the_bound_is_named():
    stdout = ChildStdout("shardId-1", 100, 1000)
    status = b'{"action":"status","responseFor":"initialize"}' + b" " * 350  # 397 bytes
    for _ in range(3):
        stdout.line(status)
    assert stdout.overflow == ("more than 1000 bytes of messages nobody asked for (kcl-mp's bound on a "
                               "processor's unread stdout messages)") and stdout.messages.qsize() == 2
    stdout.overflow = None
    assert isinstance(stdout.take(0)[0], Status)  # taking gives its bytes back
    stdout.line(status)
    assert stdout.overflow is None and stdout.messages.qsize() == 2
    counted = ChildStdout("shardId-1", 1, 10_000)
    counted.line(status)
    counted.line(status)
    assert counted.overflow == "more than 1 messages nobody asked for"


@pytest.mark.parametrize("line, ignored", [
    ('{"action":"checkpoint"}{"action":"status","responseFor":"processRecords"}',
     "two JSON messages on one line: Java reads only the first (checkpoint); the second (status) is ignored"),
    ('{"action":"status","responseFor":"initialize"} {"x":1}',
     "two JSON messages on one line: Java reads only the first (status); the rest is ignored"),
    ('{"action":"status","responseFor":"initialize"} // done', ""),  # trailing text: nothing meant by it
])
def test_parse_says_when_a_second_message_on_the_line_is_ignored(line, ignored):
    message = parse_line(line)
    assert isinstance(message, (Status, CheckpointRequest)) and message.ignored == ignored


def test_silence_names_the_likeliest_cause():
    skipped = StdoutNote(SKIPPED, "status with an extra key 'foo' (Java skips it)", "{...}", 5)
    unread = silence(3, b'{"action":"status"', skipped)
    assert (unread.kind, unread.line, unread.size) == (UNREAD, '{"action":"status"', 18)
    assert silence(0, b"", skipped) is skipped  # the last line it wrote was skipped: nothing since
    assert silence(0, b"", None).kind == SILENT and "was stdout flushed?" in silence(0, b"", None).reason
    assert silence(2, b"", None) is None  # it wrote messages, then nothing: no guess


# -- the state machine ----------------------------------------------------------------------

ACTIONS = ["initialize", "processRecords", "shutdownRequested", "leaseLost", "shardEnded"]


def _conversation_in(state: ChildState) -> Conversation:
    conv = Conversation("shardId-1")
    conv.state = state
    return conv


def _send(conv: Conversation, action: str) -> bytes:
    if action == "initialize":
        return conv.initialize(ExtendedSequenceNumber("TRIM_HORIZON"))
    if action == "processRecords":
        return conv.process_records(make_batch([], None))
    return {"shutdownRequested": conv.shutdown_requested, "leaseLost": conv.lease_lost,
            "shardEnded": conv.shard_ended}[action]()


@pytest.mark.parametrize("state", list(ChildState), ids=lambda s: s.name)
@pytest.mark.parametrize("action", ACTIONS)
def test_send_transitions(state: ChildState, action: str):
    conv = _conversation_in(state)
    if (state, action) in SEND:
        _send(conv, action)
        assert conv.state is SEND[(state, action)]
        assert conv.awaiting == action
    else:
        with pytest.raises(RuntimeError):
            _send(conv, action)
        assert conv.state is state


@pytest.mark.parametrize("state", list(AWAIT), ids=lambda s: s.name)
def test_status_transitions(state: ChildState):
    expected, after = AWAIT[state]
    conv = _conversation_in(state)
    assert conv.receive(Status(expected)) == Done(expected)
    assert conv.state is after
    for wrong in [None] + [a for a in ACTIONS if a != expected]:
        conv = _conversation_in(state)
        with pytest.raises(ProtocolError, match=expected):
            conv.receive(Status(wrong))
        assert conv.state is ChildState.FAILED


def test_other_messages_are_ignored():
    conv = _conversation_in(ChildState.PROCESSING)
    assert conv.receive(Other("initialize")) == Ignored("initialize")
    assert conv.state is ChildState.PROCESSING


def test_receive_without_outstanding_action_is_a_bug():
    with pytest.raises(RuntimeError):
        _conversation_in(ChildState.READY).receive(Status("initialize"))


def _processing(checkpoint: str = "10", delivered: tuple[str, int] = ("20", 0)) -> Conversation:
    conv = Conversation("shardId-1")
    conv.initialize(ExtendedSequenceNumber(checkpoint))
    conv.receive(Status("initialize"))
    conv.process_records(make_batch([("", "k", delivered[0], 0, delivered[1])], 0))
    return conv


def _error(outcome) -> str | None:
    assert isinstance(outcome, Reply)
    return json.loads(outcome.line)["error"]


@pytest.mark.parametrize(
    "seq, sub, error",
    [
        ("21", None, "IllegalArgumentException"),  # beyond the last delivered record
        ("20", 1, "IllegalArgumentException"),
        ("9", None, "IllegalArgumentException"),  # below the last checkpoint
        ("SHARD_END", None, "IllegalArgumentException"),  # only at shard end
        ("TRIM_HORIZON", None, "IllegalArgumentException"),
        ("", None, "IllegalArgumentException"),
        ("1e3", None, "IllegalArgumentException"),
        ("15", -1, "IllegalArgumentException"),
        ("9" * 5000, 0, "IllegalArgumentException"),  # no Kinesis sequence number (and past int()'s 4,300 digits)
        ("015", None, "IllegalArgumentException"),  # Kinesis writes no leading zero
        ("10", 0, None),  # the current checkpoint again: no write
    ],
)
def test_checkpoint_refusals(seq, sub, error):
    assert _error(_processing().receive(CheckpointRequest(seq, sub))) == error


def test_checkpoint_store_and_failure_keep_last_checkpoint_right():
    conv = _processing()
    store = conv.receive(CheckpointRequest("15", None))
    assert isinstance(store, Store) and store.position == ExtendedSequenceNumber("15")
    with pytest.raises(RuntimeError):
        conv.receive(Status("processRecords"))  # the reply must be written first
    assert json.loads(conv.stored(store, "ThrottlingException"))["error"] == "ThrottlingException"
    assert conv.last_checkpoint == ExtendedSequenceNumber("10")
    store = conv.receive(CheckpointRequest(None, None))
    assert store.position == ExtendedSequenceNumber("20")
    assert conv.stored(store, None) == (b'{"action":"checkpoint","sequenceNumber":null,"subSequenceNumber":null,'
                                        b'"error":null}\n')
    assert conv.last_checkpoint == ExtendedSequenceNumber("20")


def test_shard_end_sentinel_and_final_record_store_shard_end():
    for request in (CheckpointRequest("SHARD_END", None), CheckpointRequest("20", 0), CheckpointRequest(None, None)):
        conv = _processing()
        conv.receive(Status("processRecords"))
        conv.shard_ended()
        store = conv.receive(request)
        assert isinstance(store, Store) and store.position == ExtendedSequenceNumber(SHARD_END)
        conv.stored(store, None)
        assert conv.checkpointed_shard_end
        assert _error(conv.receive(CheckpointRequest(None, None))) is None  # again: no write


def test_shard_end_earlier_checkpoint_is_not_shard_end():
    conv = _processing()
    conv.receive(Status("processRecords"))
    conv.shard_ended()
    store = conv.receive(CheckpointRequest("15", None))
    conv.stored(store, None)
    assert not conv.checkpointed_shard_end


def test_no_checkpointer_during_initialize_and_lease_lost():
    conv = Conversation("s")
    conv.initialize(ExtendedSequenceNumber("5"))
    assert _error(conv.receive(CheckpointRequest("5", 0))) == "InvalidStateException"
    conv.receive(Status("initialize"))
    conv.lease_lost()
    assert _error(conv.receive(CheckpointRequest(None, None))) == "InvalidStateException"


def test_no_checkpoint_at_all_is_a_noop_for_null_and_refused_for_a_value():
    conv = Conversation("s")
    conv.initialize(None)
    conv.receive(Status("initialize"))
    conv.shutdown_requested()
    assert _error(conv.receive(CheckpointRequest(None, None))) is None
    assert _error(conv.receive(CheckpointRequest("1", None))) == "IllegalArgumentException"

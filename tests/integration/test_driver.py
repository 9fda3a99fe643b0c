"""ProcessorChild against real child processes: amazon_kclpy processors, and raw scripts
that crash, hang, stop reading, flood stderr, print garbage or break the protocol.

The checkpointer is a fake that records positions (no AWS here). Every test is bounded.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kcl_mp.errors import (
    CheckpointOutcome,
    ProcessorExitedError,
    ProcessorStartError,
    ProcessorTimeoutError,
    ProtocolError,
)
from kcl_mp.logs import LineBudget
from kcl_mp.multilang.child import ProcessorChild
from kcl_mp.multilang.child_stderr import LINES_PER_WINDOW
from kcl_mp.multilang.wire import make_batch
from kcl_mp.sequence import SHARD_END, TRIM_HORIZON, ExtendedSequenceNumber

pytestmark = [pytest.mark.integration, pytest.mark.timing, pytest.mark.timeout(60)]

SHARD = "shardId-000000000001"
LOG = logging.getLogger("test.driver")

# A raw processor's helpers: kclpy's framing ("\n{json}\n"), one message a line.
PRELUDE = """\
import json, os, signal, subprocess, sys, time
def send(obj):
    sys.stdout.write("\\n" + json.dumps(obj) + "\\n"); sys.stdout.flush()
def recv():
    line = sys.stdin.readline()
    return json.loads(line) if line else None
def status(message):
    send({"action": "status", "responseFor": message["action"]})
"""


class FakeCheckpointer:
    def __init__(self, *errors: CheckpointOutcome | str | None):
        self.errors = list(errors)
        self.calls: list[ExtendedSequenceNumber] = []

    def __call__(self, position: ExtendedSequenceNumber) -> CheckpointOutcome | str | None:
        self.calls.append(position)
        return self.errors.pop(0) if self.errors else None


def users(n: int, start: int = 1, size: int = 100) -> list[tuple]:
    return [(base64.b64encode(f"record-{start + i}".encode().ljust(size, b".")).decode(), f"pk-{i}",
             str(start + i), 1700000000000 + i, 0) for i in range(n)]


def script(tmp_path: Path, body: str) -> tuple[str, ...]:
    path = tmp_path / "processor.py"
    path.write_text(PRELUDE + textwrap.dedent(body))
    return (sys.executable, str(path))


def child_for(command: tuple[str, ...], checkpointer=None, timeout_s: float | None = 20.0) -> ProcessorChild:
    child = ProcessorChild(command, SHARD, checkpointer or FakeCheckpointer(), timeout_s,
                           logging.LoggerAdapter(LOG, {}))
    child.start()
    return child


def messages(caplog, text: str, level: int | None = None) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if text in r.getMessage() and (level is None or r.levelno == level)]


# A kclpy v3 processor that records what it is given into $RECORDER_FILE and checkpoints
# after every $RECORDER_CHECKPOINT_EVERY records, on shutdownRequested and on shardEnded.
# (tests/processors/recorder.py writes kclpy's datetime arrival time with json.dumps, which
# fails with kclpy 3.x, so these tests do not use it.)
KCLPY_RECORDER = """\
from amazon_kclpy import kcl
from amazon_kclpy.v3 import processor

class Recorder(processor.RecordProcessorBase):
    def __init__(self):
        self.out = open(os.environ["RECORDER_FILE"], "a")
        self.every = int(os.environ.get("RECORDER_CHECKPOINT_EVERY", "100"))
        self.since, self.last = 0, None
    def write(self, entry):
        self.out.write(json.dumps(entry) + "\\n"); self.out.flush()
    def checkpoint(self, checkpointer, seq=None, sub=None):
        try:
            checkpointer.checkpoint(seq, sub)
            self.write({"event": "checkpoint", "seq": seq, "error": None})
        except kcl.CheckpointError as e:
            self.write({"event": "checkpoint", "seq": seq, "error": e.value})
    def initialize(self, i):
        self.write({"event": "initialize", "shard": i.shard_id, "seq": i.sequence_number, "sub": i.sub_sequence_number})
    def process_records(self, i):
        for r in i.records:
            self.write({"pk": r.partition_key, "data": r.binary_data.decode(), "seq": r.sequence_number,
                        "sub": r.sub_sequence_number, "ts": r._timestamp_millis})
            self.last = (r.sequence_number, r.sub_sequence_number)
        self.since += len(i.records)
        if self.since >= self.every:
            self.checkpoint(i.checkpointer, *self.last)
            self.since = 0
    def lease_lost(self, i):
        self.write({"event": "leaseLost"})
    def shard_ended(self, i):
        self.write({"event": "shardEnded"})
        self.checkpoint(i.checkpointer)
    def shutdown_requested(self, i):
        self.write({"event": "shutdownRequested"})
        if self.last:
            self.checkpoint(i.checkpointer, *self.last)

kcl.KCLProcess(Recorder()).run()
"""


@pytest.fixture
def recorder(tmp_path, monkeypatch):
    path = tmp_path / "recorded.jsonl"
    monkeypatch.setenv("RECORDER_FILE", str(path))
    return script(tmp_path, KCLPY_RECORDER), path


def recorded(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# -- well-behaved amazon_kclpy processors ------------------------------------------------------


def test_kclpy_processor_full_conversation(recorder, monkeypatch):
    monkeypatch.setenv("RECORDER_CHECKPOINT_EVERY", "3")
    checkpointer = FakeCheckpointer()
    child = child_for(recorder[0], checkpointer)
    try:
        child.initialize(ExtendedSequenceNumber(TRIM_HORIZON))
        child.process_records(make_batch(users(2, start=1), 10))
        assert checkpointer.calls == []
        child.process_records(make_batch(users(2, start=3), 0))
        assert checkpointer.calls == [ExtendedSequenceNumber("4", 0)]
        child.shutdown_requested()  # checkpoints the same record again: no second write
        child.lease_lost()
    finally:
        code = child.close(5.0)
    assert code == 0
    assert checkpointer.calls == [ExtendedSequenceNumber("4", 0)]
    assert child.last_checkpoint == ExtendedSequenceNumber("4")
    lines = recorded(recorder[1])
    assert lines[0] == {"event": "initialize", "shard": SHARD, "seq": TRIM_HORIZON, "sub": 0}
    assert [r["seq"] for r in lines if "pk" in r] == ["1", "2", "3", "4"]
    assert lines[1]["data"].startswith("record-1") and lines[1]["ts"] == 1700000000000
    events = [(r["event"], r.get("error")) for r in lines if "event" in r]
    assert events == [("initialize", None), ("checkpoint", None), ("shutdownRequested", None),
                      ("checkpoint", None), ("leaseLost", None)]


def test_kclpy_processor_shard_end(recorder):
    checkpointer = FakeCheckpointer()
    child = child_for(recorder[0], checkpointer)
    try:
        child.initialize(ExtendedSequenceNumber("7"))
        child.process_records(make_batch(users(1, start=8), 0))
        assert child.shard_ended() is True
    finally:
        assert child.close(5.0) == 0
    assert checkpointer.calls == [ExtendedSequenceNumber(SHARD_END)]
    assert str(child.last_checkpoint) == SHARD_END


def test_lease_table_errors_reach_the_processor(recorder, monkeypatch):
    monkeypatch.setenv("RECORDER_CHECKPOINT_EVERY", "1")
    child = child_for(recorder[0], FakeCheckpointer("ShutdownException"))
    try:
        child.initialize(ExtendedSequenceNumber("7"))
        child.process_records(make_batch(users(2, start=8), 0))
        child.lease_lost()
    finally:
        child.close(5.0)
    assert child.last_checkpoint == ExtendedSequenceNumber("7")
    assert [r["error"] for r in recorded(recorder[1]) if r.get("event") == "checkpoint"] == ["ShutdownException"]


@pytest.mark.parametrize("outcome, moved", [(CheckpointOutcome.LEASE_MOVED, True), ("ShutdownException", False)],
                         ids=["the lease table's outcome", "a scripted name (the conformance kit)"])
def test_only_the_lease_tables_outcome_marks_the_lease_moved(recorder, monkeypatch, outcome, moved):
    """The outcome stays an enum until the reply names it: the processor reads ShutdownException
    either way, and only the lease table saying the lease moved tells the shard driver so."""
    monkeypatch.setenv("RECORDER_CHECKPOINT_EVERY", "1")
    child = child_for(recorder[0], FakeCheckpointer(outcome))
    try:
        child.initialize(ExtendedSequenceNumber("7"))
        child.process_records(make_batch(users(2, start=8), 0))
    finally:
        child.close(5.0)
    assert child.lease_moved is moved
    assert [r["error"] for r in recorded(recorder[1]) if r.get("event") == "checkpoint"] == ["ShutdownException"]


INVALID_CHECKPOINTS = """\
from amazon_kclpy import kcl
from amazon_kclpy.v3 import processor

class Bad(processor.RecordProcessorBase):
    def initialize(self, initialize_input):
        pass
    def process_records(self, process_records_input):
        print("plain noise from the processor")  # stdout, as the kclpy sample does
        last = process_records_input.records[-1].sequence_number
        results = []
        for seq, sub in (("999", None), ("notanumber", None), (last, -1), ("SHARD_END", None), ("1", None),
                         (last, None)):
            try:
                process_records_input.checkpointer.checkpoint(seq, sub)
                results.append(None)
            except kcl.CheckpointError as e:
                results.append(e.value)
        sys.stderr.write("RESULTS " + json.dumps(results) + "\\n")
    def lease_lost(self, lease_lost_input):
        pass
    def shard_ended(self, shard_ended_input):
        pass
    def shutdown_requested(self, shutdown_requested_input):
        pass

kcl.KCLProcess(Bad()).run()
"""


def test_checkpointer_exception_is_answered_and_shard_end_without_checkpoint_is_false(tmp_path, caplog):
    def broken(position):
        raise ConnectionError("DynamoDB is down")

    child = child_for(script(tmp_path, """\
        status(recv())
        message = recv()
        send({"action": "checkpoint", "sequenceNumber": None, "subSequenceNumber": None})
        sys.stderr.write("REPLY " + json.dumps(recv()) + "\\n"); sys.stderr.flush()
        status(message)
        status(recv())  # shardEnded, without checkpointing
    """), broken)
    try:
        child.initialize(ExtendedSequenceNumber("1"))
        child.process_records(make_batch(users(1, start=2), 0))
        assert child.shard_ended() is False
    finally:
        assert child.close(2.0) == 0
    (reply,) = messages(caplog, "REPLY ")
    assert json.loads(reply.split("REPLY ", 1)[1]) == {
        "action": "checkpoint", "sequenceNumber": None, "subSequenceNumber": None,
        "error": "KinesisClientLibDependencyException"}
    assert child.last_checkpoint == ExtendedSequenceNumber("1")


def test_invalid_checkpoints_get_java_error_names(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=LOG.name)
    checkpointer = FakeCheckpointer()
    child = child_for(script(tmp_path, INVALID_CHECKPOINTS), checkpointer)
    try:
        child.initialize(ExtendedSequenceNumber("5"))
        child.process_records(make_batch(users(3, start=6), 0))
        child.lease_lost()
    finally:
        assert child.close(5.0) == 0
    (line,) = [m for m in messages(caplog, "RESULTS")]
    results = json.loads(line.split("RESULTS ", 1)[1])
    assert results == ["IllegalArgumentException"] * 5 + [None]
    assert checkpointer.calls == [ExtendedSequenceNumber("8")]
    assert messages(caplog, "Skipping unexpected line on STDOUT for shard shardId-000000000001: plain noise")


def test_large_batch_through_kclpy(tmp_path, capsys):
    """The data path end to end: 10,000 records of 100 bytes into a kclpy processor."""
    counter = """\
from amazon_kclpy import kcl
from amazon_kclpy.v3 import processor
class Count(processor.RecordProcessorBase):
    def initialize(self, i): pass
    def process_records(self, i): sys.stderr.write("GOT %d\\n" % len(i.records))
    def lease_lost(self, i): pass
    def shard_ended(self, i): pass
    def shutdown_requested(self, i): pass
kcl.KCLProcess(Count()).run()
"""
    child = child_for(script(tmp_path, counter))
    try:
        child.initialize(ExtendedSequenceNumber(TRIM_HORIZON))
        batch = make_batch(users(10_000), 0)
        started = time.perf_counter()
        child.process_records(batch)
        elapsed = time.perf_counter() - started
        child.lease_lost()
    finally:
        assert child.close(5.0) == 0
    with capsys.disabled():
        print(f"\nprocessRecords of 10,000 records ({len(batch.line) / 1e6:.1f} MB) through kclpy: "
              f"{elapsed * 1000:.0f} ms, {10_000 / elapsed:,.0f} records/s")


# -- children that misbehave ----------------------------------------------------------------


def test_crash_reports_exit_status_and_stderr(tmp_path):
    child = child_for(script(tmp_path, """\
        recv()
        sys.stderr.write("boom: the processor broke\\n")
        sys.exit(3)
    """), timeout_s=None)
    try:
        with pytest.raises(ProcessorExitedError, match=r"exited with status 3 while the status for initialize") as err:
            child.initialize(ExtendedSequenceNumber(TRIM_HORIZON))
        assert "boom: the processor broke" in str(err.value) and SHARD in str(err.value)
    finally:
        assert child.close(1.0) == 3


def test_killed_by_signal_mid_batch(tmp_path):
    child = child_for(script(tmp_path, """\
        status(recv())
        recv()
        os.kill(os.getpid(), signal.SIGKILL)
    """))
    try:
        child.initialize(ExtendedSequenceNumber(TRIM_HORIZON))
        with pytest.raises(ProcessorExitedError, match="killed by signal SIGKILL while the status for processRecords"):
            child.process_records(make_batch(users(5), 0))
    finally:
        assert child.close(1.0) == -signal.SIGKILL


def test_silent_child_times_out_and_close_escalates_to_sigkill(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger=LOG.name)
    child = child_for(script(tmp_path, """\
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        recv()
        time.sleep(60)
    """), timeout_s=0.5)
    started = time.monotonic()
    with pytest.raises(ProcessorTimeoutError, match=f"{SHARD} sent no message within 0.5 s while the status for initialize"):
        child.initialize(ExtendedSequenceNumber(TRIM_HORIZON))
    assert time.monotonic() - started < 3
    assert child.close(0.2) == -signal.SIGKILL
    assert messages(caplog, "sending SIGTERM") and messages(caplog, "sending SIGKILL")


def test_timer_restarts_for_every_message(tmp_path):
    checkpointer = FakeCheckpointer()
    child = child_for(script(tmp_path, """\
        status(recv())
        message = recv()
        for _ in range(3):
            time.sleep(0.5)
            send({"action": "checkpoint", "sequenceNumber": None, "subSequenceNumber": None})
            recv()
        time.sleep(0.5)
        status(message)
        status(recv())
    """), checkpointer, timeout_s=1.5)
    try:
        child.initialize(ExtendedSequenceNumber("1"))
        child.process_records(make_batch(users(3, start=2), 0))  # 2 s in all, never 1.5 s silent
        child.lease_lost()
    finally:
        assert child.close(2.0) == 0
    assert checkpointer.calls == [ExtendedSequenceNumber("4")]


def test_child_that_stops_reading_cannot_block_the_writer(tmp_path):
    child = child_for(script(tmp_path, """\
        status(recv())
        time.sleep(60)  # never reads stdin again
    """), timeout_s=1.0)
    batch = make_batch(users(20_000, size=200), 0)  # ~6 MB: far beyond the pipe's buffer
    try:
        child.initialize(ExtendedSequenceNumber(TRIM_HORIZON))
        started = time.monotonic()
        with pytest.raises(ProcessorTimeoutError, match="did not read the processRecords message within 1 s"):
            child.process_records(batch)
        assert time.monotonic() - started < 4
    finally:
        assert child.close(0.2) == -signal.SIGTERM


def test_closed_stdin_is_a_broken_pipe(tmp_path):
    child = child_for(script(tmp_path, """\
        status(recv())
        os.close(0)
        sys.stderr.write("closing my stdin\\n"); sys.stderr.flush()
        time.sleep(60)
    """))
    try:
        child.initialize(ExtendedSequenceNumber(TRIM_HORIZON))
        time.sleep(0.3)
        with pytest.raises(ProcessorExitedError, match="closed its stdin while processRecords was written") as err:
            child.process_records(make_batch(users(5), 0))
        assert "closing my stdin" in str(err.value)
    finally:
        assert child.close(0.2) == -signal.SIGTERM


def test_status_for_the_wrong_action_is_a_protocol_error(tmp_path):
    child = child_for(script(tmp_path, """\
        recv()
        send({"action": "status", "responseFor": "processRecords"})
        recv()
    """))
    try:
        with pytest.raises(ProtocolError, match="status for 'processRecords' while initialize was awaited"):
            child.initialize(ExtendedSequenceNumber(TRIM_HORIZON))
        with pytest.raises(RuntimeError):
            child.process_records(make_batch(users(1), 0))  # nothing more is sent after a failure
    finally:
        assert child.close(2.0) == 0


def test_garbage_and_floods_do_not_block_and_are_rate_limited(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=LOG.name)
    child = child_for(script(tmp_path, """\
        message = recv()
        for i in range(200_000):
            sys.stderr.write("noisy stderr line %d\\n" % i)
        for i in range(5_000):
            print("garbage on stdout %d" % i)
        print("{'action': 'status'}")
        print('{"action": "status", "responseFor": "initialize", "extra": 1}')
        sys.stdout.write('{"action": "status", "responseFor": "initialize"}\\r\\n'); sys.stdout.flush()
        status(recv())
    """))
    try:
        child.initialize(ExtendedSequenceNumber(TRIM_HORIZON))
        child.lease_lost()
    finally:
        assert child.close(5.0) == 0
    assert len(messages(caplog, "garbage on stdout")) <= 200
    assert any("stdout" in m for m in messages(caplog, "lines were not logged"))
    # stderr: kclmp.processorStderrLinesPer10s (default) a window, every drop reported and counted
    stderr_logged = len(messages(caplog, "noisy stderr line", logging.WARNING))  # kclmp.processorStderrLevel
    stderr_dropped = messages(caplog, "wrote more to stderr than")
    assert LINES_PER_WINDOW <= stderr_logged <= LINES_PER_WINDOW * len(stderr_dropped)
    total = sum(int(m.split("allows: ")[1].split()[0]) for m in stderr_dropped)
    assert total + stderr_logged == 200_000 and child.stderr_dropped == total


def test_early_status_is_taken_for_the_next_action_with_a_warning(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger=LOG.name)
    child = child_for(script(tmp_path, """\
        status(recv())
        send({"action": "status", "responseFor": "processRecords"})  # before it was asked
        recv()
        status(recv())
    """))
    try:
        child.initialize(ExtendedSequenceNumber(TRIM_HORIZON))
        time.sleep(0.3)
        child.process_records(make_batch(users(1), 0))
        child.lease_lost()
    finally:
        assert child.close(2.0) == 0
    assert messages(caplog, "before processRecords was sent")


def test_exit_is_noticed_while_a_grandchild_holds_stdout(tmp_path):
    child = child_for(script(tmp_path, """\
        recv()
        grandchild = subprocess.Popen(["sleep", "30"])
        sys.stderr.write("grandchild %d\\n" % grandchild.pid); sys.stderr.flush()
        os._exit(2)
    """), timeout_s=None)
    started = time.monotonic()
    with pytest.raises(ProcessorExitedError, match="exited with status 2") as err:
        child.initialize(ExtendedSequenceNumber(TRIM_HORIZON))
    assert time.monotonic() - started < 5
    grandchild = int(str(err.value).split("grandchild ")[1].split()[0])
    assert child.close(1.0) == 2
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("close() left the grandchild running")


@pytest.mark.parametrize("command", [("./no-such-processor.py",), ("no-such-processor-on-path",)])
def test_start_failure_names_the_executable(command):
    child = ProcessorChild(command, SHARD, FakeCheckpointer(), 1.0, LOG)
    with pytest.raises(ProcessorStartError, match="no-such-processor"):
        child.start()
    assert child.pid is None and child.close(1.0) is None


def test_not_executable_file(tmp_path):
    path = tmp_path / "app.py"
    path.write_text("print('hi')\n")
    child = ProcessorChild((str(path),), SHARD, FakeCheckpointer(), 1.0, LOG)
    with pytest.raises(ProcessorStartError, match="not executable"):
        child.start()


def test_child_environment_and_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KCL_MP_TEST_MARKER", "marker-value")
    child = child_for(script(tmp_path, """\
        message = recv()
        sys.stderr.write("ENV %s CWD %s PGID %d\\n" % (os.environ.get("KCL_MP_TEST_MARKER"), os.getcwd(), os.getpgid(0)))
        sys.stderr.flush()
        sys.exit(0)
    """), timeout_s=5.0)
    with pytest.raises(ProcessorExitedError) as err:
        child.initialize(ExtendedSequenceNumber(TRIM_HORIZON))
    assert f"ENV marker-value CWD {tmp_path} PGID {child.pid}" in str(err.value)
    assert os.getpgid(0) != child.pid
    child.close(1.0)


def test_line_budget_reports_dropped_lines_once_a_window():
    now = [0.0]
    budget = LineBudget(per_window=2, window_s=10.0, clock=lambda: now[0])
    assert [budget.allow() for _ in range(4)] == [(True, 0), (True, 0), (False, 0), (False, 0)]
    now[0] = 10.0
    assert budget.allow() == (True, 2)
    assert budget.allow() == (True, 0)
    assert budget.allow() == (False, 0)
    assert budget.flush() == 1 and budget.flush() == 0

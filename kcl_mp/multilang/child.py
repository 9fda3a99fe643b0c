"""One processor child: start it, talk the multilang protocol with it, stop it.

``protocol.Conversation`` decides; this module does the I/O around it. The Java daemon
reads and writes the child concurrently (PROTOCOL.md 2), and so does this:

- a thread reads the child's stdout, cuts it into lines and hands them to a
  ``ChildStdout``, which queues the messages (lines Java would skip are logged at once and
  never queued) and keeps a note of every line Java would not take as the child meant
  (``take_notes``: what the conformance kit reports);
- a thread reads stderr (``stderr_reader``) and logs each line whole with the shard id,
  within a line budget (``child_stderr``: a cut line says so, dropped lines are reported once a window and
  counted in ``stderr_dropped``), and keeps the last lines for error messages;
- the calling thread writes to the child's stdin (non-blocking, so a child that stops
  reading cannot hold it past ``timeout_s``) and takes queued messages while a status is
  awaited. Messages written after a status, before the next action was sent, are taken
  as part of that action's exchange, as Java does (it only reads while it waits), with a
  warning.

Failures, all ``ProcessorError`` (the shard is restarted; Java would exit the daemon):
stdout EOF or a broken pipe -> ``ProcessorExitedError`` with the exit status or signal and
the last stderr lines; no message within ``timeout_s`` -> ``ProcessorTimeoutError``, with
what stdout shows (a last line without a newline, nothing at all, a skipped line); a
status for the wrong action, or more messages nobody asked for than ``MAX_QUEUED`` or
``MAX_QUEUED_BYTES`` allow -> ``ProtocolError`` (naming the bound). The child runs in its own session, so
``close`` can stop its whole process group: stdin closed, ``grace_s`` to exit, then
SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import fcntl
import logging
import os
import queue
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kcl_mp.errors import (
    CheckpointOutcome,
    ProcessorError,
    ProcessorExitedError,
    ProcessorStartError,
    ProcessorTimeoutError,
    ProtocolError,
)
from kcl_mp.logs import LineBudget
from kcl_mp.multilang.child_lines import Message
from kcl_mp.multilang.child_stderr import BYTES_PER_WINDOW, LINES_PER_WINDOW, StderrLines
from kcl_mp.multilang.child_stdout import EOF, ChildStdout
from kcl_mp.multilang.command import resolve_command
from kcl_mp.multilang.protocol import Conversation, Done, Reply, Store
from kcl_mp.multilang.stderr_reader import StderrReader
from kcl_mp.multilang.stdout_notes import StdoutNote
from kcl_mp.multilang.wire import Batch, checkpoint_error
from kcl_mp.sequence import ExtendedSequenceNumber
from kcl_mp.worker.usage import signal_group, start_time

# None when stored, else why not: the lease table's outcome (the shard driver's checkpointer,
# kcl_mp/worker/shard_worker.py), or a Java error name sent as is (the conformance kit's
# scripted errors). The outcome stays an enum until ``_store`` names it on the wire.
Checkpointer = Callable[[ExtendedSequenceNumber], "CheckpointOutcome | str | None"]

POLL_S = 0.25  # how often a wait looks at the child's exit status
EXIT_GRACE_S = 1.0  # after the child exits, how long its pipes may take to reach EOF
TERM_WAIT_S = 2.0  # between SIGTERM and SIGKILL
MIN_EXIT_WAIT_S = 0.5  # even with grace 0, a child that exits at EOF (all clients do) is not signalled
MAX_QUEUED = 100_000  # protocol messages written without being asked for: a broken child
MAX_QUEUED_BYTES = 16 << 20  # and their lines' bytes (5,000 status lines of 65 KB: 330 MB otherwise)
LOG_LINES_PER_WINDOW = 200
LOG_WINDOW_S = 10.0
_MAX_LOGGED_CHARS = 2000
_PIPE_SIZE = 1 << 20  # fewer wake-ups when writing a 14 MB processRecords line
COALESCE_BYTES = 256 << 10  # more than this left to write to a full pipe: let the reader drain first
COALESCE_S = 0.0002


class ProcessorChild:
    """The processor for one shard. Methods are called from one thread, in protocol order."""

    def __init__(self, command: tuple[str, ...], shard_id: str, checkpointer: Checkpointer,
                 timeout_s: float | None, log: logging.LoggerAdapter | logging.Logger,
                 stderr_lines_per_10s: int = LINES_PER_WINDOW, stderr_bytes_per_10s: int = BYTES_PER_WINDOW,
                 stderr_level: int = logging.WARNING, env: Mapping[str, str] | None = None,
                 stream: Mapping[str, str] | None = None):
        self.command = tuple(command)
        self.env = dict(env or {})  # added to kcl-mp's environment (e.g. KCL_STREAM_NAME)
        self.shard_id = shard_id
        self.checkpointer = checkpointer
        self.timeout_s = timeout_s
        self.log = log
        self._conv = Conversation(shard_id, stream)  # stream: the keys a multi-stream initialize adds
        self._proc: subprocess.Popen[bytes] | None = None
        self.started: int | None = None  # the child's start time (clock ticks since boot)
        self._stdin_fd = -1
        self._stdout = ChildStdout(shard_id, MAX_QUEUED, MAX_QUEUED_BYTES)
        self._stderr = StderrReader(shard_id, log, StderrLines(stderr_lines_per_10s,
                                                               bytes_per_window=stderr_bytes_per_10s), stderr_level)
        self._readers: list[threading.Thread] = []
        self._closed = False
        self.lease_moved = False  # a checkpoint was refused because the lease is another worker's

    # -- life cycle ----------------------------------------------------------------------

    def start(self) -> None:
        if self._proc is not None:
            raise RuntimeError(f"the processor for {self.shard_id} was already started")
        argv = resolve_command(self.command, os.getcwd(), os.environ)
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    bufsize=0, start_new_session=True, close_fds=True,
                                    env={**os.environ, **self.env} if self.env else None)
        except OSError as exc:
            raise ProcessorStartError(
                f"cannot start the processor '{argv[0]}' for {self.shard_id}: {exc.strerror or exc}") from exc
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        self._proc = proc
        self.started = start_time(proc.pid)  # with the pid, names the child: ``usage.signal_group``
        self._stdin_fd = proc.stdin.fileno()
        try:
            fcntl.fcntl(self._stdin_fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), _PIPE_SIZE)
        except OSError:
            pass  # a smaller pipe only means more wake-ups
        os.set_blocking(self._stdin_fd, False)
        for name, target, fd in (("stdout", self._read_stdout, proc.stdout.fileno()),
                                 ("stderr", self._stderr.run, proc.stderr.fileno())):
            thread = threading.Thread(target=target, args=(fd,), daemon=True, name=f"{name}-{self.shard_id}")
            thread.start()
            self._readers.append(thread)

    @property
    def stderr_dropped(self) -> int:
        """Stderr lines not logged so far (over kclmp.processorStderrLinesPer10s / BytesPer10s)."""
        return self._stderr.dropped

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def take_notes(self) -> list[StdoutNote]:
        """What the child wrote that Java would not take as meant, since the last call."""
        return self._stdout.take_notes()

    @property
    def last_checkpoint(self) -> ExtendedSequenceNumber | None:
        """The last checkpoint stored for this child (initially the lease's)."""
        return self._conv.last_checkpoint

    def close(self, grace_s: float) -> int | None:
        """Close stdin, give the child ``grace_s`` to exit, then SIGTERM, then SIGKILL its
        process group. The exit status (negative: the signal), or None if never started."""
        proc = self._proc
        if proc is None:
            return None
        if self._closed:
            return proc.returncode
        self._closed = True
        try:
            assert proc.stdin is not None
            proc.stdin.close()
        except OSError:
            pass
        code = self._wait(max(grace_s, MIN_EXIT_WAIT_S))
        for sig, wait_s in ((signal.SIGTERM, TERM_WAIT_S), (signal.SIGKILL, 5.0)):
            if code is not None:
                break
            self.log.warning("processor pid %d did not exit; sending %s to its process group", proc.pid, sig.name)
            signal_group(proc.pid, self.started, sig)
            code = self._wait(wait_s)
        self._join_readers(proc.pid)
        while True:  # Java logs what the child wrote after its last exchange
            try:
                item = self._stdout.take(None)
            except queue.Empty:
                break
            if item is not EOF:
                self.log.info("Drained line for shard %s: %s", self.shard_id, item[0].line[:_MAX_LOGGED_CHARS])
                self._stdout.drained(*item)
        if not any(thread.is_alive() for thread in self._readers):
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
        return code

    def _join_readers(self, pgid: int) -> None:
        """Wait for the pipes to reach EOF. If the child is gone but they stay open, what
        holds them is something it started in its process group: stop that too."""
        for sig in (None, signal.SIGTERM, signal.SIGKILL):
            if sig is not None:
                self.log.warning("processor pid %d exited but processes it started still hold its pipes; "
                                 "sending %s to its process group", pgid, sig.name)
                signal_group(pgid, self.started, sig, leader_reaped=True)
            deadline = time.monotonic() + EXIT_GRACE_S
            for thread in self._readers:
                thread.join(timeout=max(0.0, deadline - time.monotonic()))
            if not any(thread.is_alive() for thread in self._readers):
                return

    def _wait(self, seconds: float) -> int | None:
        assert self._proc is not None
        try:
            return self._proc.wait(timeout=max(0.0, seconds))
        except subprocess.TimeoutExpired:
            return None

    # -- the actions -----------------------------------------------------------------------

    def initialize(self, checkpoint: ExtendedSequenceNumber | None) -> None:
        self._exchange(self._conv.initialize(checkpoint), "initialize")

    def process_records(self, batch: Batch) -> None:
        self._exchange(self._conv.process_records(batch), "processRecords")

    def shutdown_requested(self) -> None:
        self._exchange(self._conv.shutdown_requested(), "shutdownRequested")

    def lease_lost(self) -> None:
        self._exchange(self._conv.lease_lost(), "leaseLost")

    def shard_ended(self) -> bool:
        """Send shardEnded; True if the child checkpointed SHARD_END (its shard is finished)."""
        self._exchange(self._conv.shard_ended(), "shardEnded")
        return self._conv.checkpointed_shard_end

    def _exchange(self, line: bytes, action: str) -> None:
        """Write ``action`` and serve the child's messages until its status arrives."""
        if self._proc is None or self._closed:
            raise RuntimeError(f"the processor for {self.shard_id} is not running (not started, or closed)")
        self._stdout.expect(action)  # before writing: its answer cannot come sooner
        try:
            self._write(line, action)
            while True:
                message, late = self._next(action)
                if late is not None:
                    after = f"after the status for {late.after}, " if late.after else ""
                    self.log.warning("processor for %s wrote %r %sbefore %s was sent; it is taken as part of the %s "
                                     "exchange, as the Java daemon does", self.shard_id, message.line[:200], after,
                                     action, action)
                outcome = self._conv.receive(message)
                if isinstance(outcome, Done):
                    return
                if isinstance(outcome, Reply):
                    self._write(outcome.line, "checkpoint reply")
                elif isinstance(outcome, Store):
                    self._write(self._conv.stored(outcome, self._store(outcome.position)), "checkpoint reply")
                else:
                    self.log.info("ignoring a %s message from the processor for %s", outcome.action, self.shard_id)
        except ProcessorError:
            self._conv.fail()
            raise

    def _store(self, position: ExtendedSequenceNumber) -> str | None:
        try:
            outcome = self.checkpointer(position)
        except Exception as exc:  # the child must still get an answer
            self.log.exception("checkpointing %s at %s failed", self.shard_id, position)
            return checkpoint_error(exc)
        error = outcome if isinstance(outcome, str) else checkpoint_error(outcome)  # the name on the wire
        if outcome is None:
            self.log.debug("checkpointed %s at %s", self.shard_id, position)
        elif outcome is CheckpointOutcome.LEASE_MOVED:
            self.lease_moved = True
            self.log.warning("checkpoint of %s at %s refused: the lease now belongs to another worker",
                             self.shard_id, position)
        else:
            self.log.warning("checkpoint of %s at %s failed: %s", self.shard_id, position, error)
        return error

    # -- I/O with the child ------------------------------------------------------------------

    def _deadline(self) -> float | None:
        return None if self.timeout_s is None else time.monotonic() + self.timeout_s

    def _write(self, data: bytes, what: str) -> None:
        view = memoryview(data)
        deadline = self._deadline()
        poller: Any = None
        exited_at: float | None = None
        while view:
            try:
                view = view[os.write(self._stdin_fd, view):]
                continue
            except BlockingIOError:
                pass
            except BrokenPipeError:
                raise self._exited(f"while {what} was written to it", "stdin") from None
            # The pipe is full: the child is not reading (yet). Wait, but not forever.
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                raise ProcessorTimeoutError(
                    f"processor for {self.shard_id} did not read the {what} message within {self.timeout_s:g} s")
            assert self._proc is not None
            if self._proc.poll() is not None:
                exited_at = exited_at or now
                if now - exited_at > EXIT_GRACE_S:  # stdin held open by something else
                    raise self._exited(f"while {what} was written to it", "stdin")
            if poller is None:
                poller = select.poll()
                poller.register(self._stdin_fd, select.POLLOUT)
            wait = POLL_S if deadline is None else min(POLL_S, deadline - now)
            if poller.poll(max(1, int(wait * 1000))) and len(view) > COALESCE_BYTES:
                # Writable again means a page or so is free; a reader working through a big
                # line frees it a chunk at a time. Let it drain more, so one write moves a lot
                # instead of waking once per 4 KB (thousands of wake-ups per 14 MB batch).
                time.sleep(COALESCE_S)

    def _next(self, action: str) -> tuple[Message, StdoutNote | None]:
        deadline = self._deadline()
        exited_at: float | None = None
        lines = self._stdout.lines
        assert self._proc is not None
        while True:
            if self._stdout.overflow:
                raise ProtocolError(f"processor for {self.shard_id} wrote {self._stdout.overflow}")
            wait = POLL_S
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    why = self._stdout.silence(lines)
                    raise ProcessorTimeoutError(
                        f"processor for {self.shard_id} sent no message within {self.timeout_s:g} s while the "
                        f"status for {action} was awaited" + ("" if why is None else f"; {why.summary()}"))
                wait = min(wait, remaining)
            try:
                item = self._stdout.take(wait)
            except queue.Empty:
                if self._proc.poll() is not None:  # exited; its stdout may be held open elsewhere
                    exited_at = exited_at or time.monotonic()
                    if time.monotonic() - exited_at > EXIT_GRACE_S:
                        raise self._exited(f"while the status for {action} was awaited") from None
                continue
            if item is EOF:
                self._stdout.messages.put(EOF)  # stays at the end for any later wait
                raise self._exited(f"while the status for {action} was awaited")
            return item

    def _exited(self, when: str, pipe: str = "stdout") -> ProcessorExitedError:
        """The error for a child that went away: its exit status and its last stderr lines."""
        assert self._proc is not None
        code = self._wait(EXIT_GRACE_S)
        if len(self._readers) > 1:  # its last words, if it wrote any; a live child may write more
            self._readers[1].join(timeout=EXIT_GRACE_S if code is not None else 0.2)
        if code is None:
            what = f"closed its {pipe}"
        elif code < 0:
            try:
                what = f"was killed by signal {signal.Signals(-code).name}"
            except ValueError:
                what = f"was killed by signal {-code}"
        else:
            what = f"exited with status {code}"
        tail = self._stderr.tail()
        detail = ("; last stderr lines:\n    " + "\n    ".join(tail)) if tail else "; it wrote nothing to stderr"
        return ProcessorExitedError(f"processor for {self.shard_id} (pid {self._proc.pid}) {what} {when}{detail}")

    # -- reader threads ----------------------------------------------------------------------

    def _read_stdout(self, fd: int) -> None:
        """The stdout reader thread's body: the pipe to EOF, a line at a time. Only the pipe ends
        it: a line it cannot take is logged and skipped (Java skips a line its mapper rejects),
        never taken for the end of the child's stdout."""
        budget = LineBudget(LOG_LINES_PER_WINDOW, LOG_WINDOW_S)
        splitter = self._stdout.splitter
        try:
            while True:
                try:
                    chunk = os.read(fd, 1 << 16)
                except (OSError, ValueError):
                    break  # closed under us during close()
                for raw in splitter.feed(chunk) if chunk else splitter.end():
                    try:
                        if (said := self._stdout.line(raw)) is not None:
                            level, msg, args = said
                            self._log_limited(budget, "stdout", level, msg, *args)
                    except Exception:  # a bug, not the child's: the line is lost, the reader goes on
                        self.log.exception("processor for %s: a %s line of %d bytes could not be read and was "
                                           "skipped", self.shard_id, "stdout", len(raw))
                if not chunk:
                    break
        finally:
            self._report_dropped(budget.flush(), "stdout")
            self._stdout.messages.put(EOF)

    def _log_limited(self, budget: LineBudget, stream: str, level: int, msg: str, *args: Any) -> None:
        allowed, dropped = budget.allow()
        self._report_dropped(dropped, stream)
        if allowed:
            self.log.log(level, msg, *args)

    def _report_dropped(self, dropped: int, stream: str) -> None:
        if dropped:
            self.log.warning("processor for %s wrote too much: %d %s lines were not logged (at most %d every %g s)",
                             self.shard_id, dropped, stream, LOG_LINES_PER_WINDOW, LOG_WINDOW_S)


__all__ = ["Checkpointer", "ProcessorChild"]

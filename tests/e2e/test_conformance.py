"""The conformance kit, ``kcl-mp check-processor -- CMD``: the three ready-made processors
(amazon_kclpy, aws-kcl on Node.js, POSIX shell with jq) pass every scenario; deliberately
broken ones fail (or are warned about) with the step, and for every line Java would not
take as meant, the line, its length and the reason."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kcl_mp.cli.check_processor import load_scenarios

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PROCESSORS = {
    "python": [sys.executable, str(ROOT / "processors" / "python" / "sample_processor.py")],
    "nodejs": ["node", str(ROOT / "processors" / "nodejs" / "sample_processor.js")],
    "shell": ["sh", str(ROOT / "processors" / "shell" / "processor.sh")],
}
BROKEN = [sys.executable, str(ROOT / "tests" / "processors" / "broken.py")]
ALL_PASSED = f"{len(load_scenarios()[0])} passed, 0 warned, 0 failed"


def check(*args: str, timeout_s: float = 10) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kcl_mp", "check-processor", "--timeout", str(timeout_s), *args],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


@pytest.mark.parametrize("name", list(PROCESSORS))
def test_the_ready_made_processors_pass(name):
    run = check("--", *PROCESSORS[name])
    assert run.returncode == 0, run.stdout + run.stderr
    assert ALL_PASSED in run.stdout
    assert "PASS  shard end" in run.stdout and "PASS  a full batch" in run.stdout


@pytest.mark.parametrize("mode,only,status,why", [
    ("no-shard-end-checkpoint", "shard end", "FAIL  shard end",
     "step 3 (shardEnded): the processor answered shardEnded without checkpointing the end of the shard"),
    ("wrong-status", "lease lost", "PASS  lease lost at once", None),  # it only lies about processRecords
    ("wrong-status", "graceful", "FAIL  records, then a graceful shutdown",
     "step 2 (processRecords): processor for shardId-000000000000 sent a status for 'initialize' while "
     "processRecords was awaited"),
    ("stays-alive", "lease lost", "FAIL  lease lost at once",
     "step 3 (stdin closed): after its last message and the end of its stdin the processor did not exit by "
     "itself (expected: exit 0 within 5 s)"),
])
def test_a_broken_processor_fails_precisely(mode, only, status, why):
    run = check("--only", only, "--", *BROKEN, mode)
    assert status in run.stdout, run.stdout
    if why is None:
        assert run.returncode == 0
    else:
        assert run.returncode == 1 and why in run.stdout, run.stdout


# Lines Java skips, reads in part or never reads: the status is lost, so the step times out;
# the report names the line and the reason.
@pytest.mark.parametrize("mode,what,line,why", [
    ("extra-key", "a line Java skips",
     '{"action": "status", "responseFor": "processRecords", "foo": 1}  (63 bytes)',
     "status with an extra key 'foo' (Java skips it)"),
    ("two-on-a-line", "a line Java reads only in part",
     '{"action": "checkpoint", "sequenceNumber": null}{"action": "status", "responseFor": "processRecords"}  '
     "(101 bytes)",
     "two JSON messages on one line: Java reads only the first (checkpoint); the second (status) is ignored"),
    ("no-newline", "a line Java never reads",
     '{"action": "status", "responseFor": "processRecords"}  (53 bytes)',
     "the last line has no newline: it was never read"),
    ("unflushed", "nothing written", "none",
     "nothing was written to stdout: was stdout flushed? (inferred: a write left in the processor's buffer looks "
     "the same as a processor still at work)"),
])
def test_a_lost_status_is_reported_with_the_line_and_the_reason(mode, what, line, why):
    run = check("--only", "graceful", "--", *BROKEN, mode, timeout_s=4)
    assert run.returncode == 1, run.stdout + run.stderr
    report = run.stdout.splitlines()
    assert "FAIL  records, then a graceful shutdown" in report[1], run.stdout
    assert "step 2 (processRecords): processor for shardId-000000000000 sent no message within 4 s" in report[1]
    found = report.index(f"        step 2 (processRecords): {what}")
    assert report[found + 1:found + 3] == [f"          line: {line}", f"          why:  {why}"], run.stdout
    if mode == "unflushed":  # it reached stdout when the processor exited: the inference is confirmed
        assert "(so it was written, but reached stdout only when the processor exited: never flushed)" in run.stdout
    assert report[-1] == "0 passed, 0 warned, 1 failed"


def test_a_checkpoint_after_the_status_is_a_warning():
    run = check("--only", "graceful", "--", *BROKEN, "checkpoint-after-status")
    assert run.returncode == 0, run.stdout + run.stderr  # Java carries on: a CI job passes, unless --strict
    report = run.stdout.splitlines()
    assert "WARN  records, then a graceful shutdown" in report[1], run.stdout
    assert report[2:5] == [
        "        step 2 (processRecords): checkpoint sent after the status for processRecords",
        '          line: {"action": "checkpoint", "sequenceNumber": null}  (48 bytes)',
        "          why:  Java reads it only once the next action (processRecords) is sent, and takes it as part of "
        "that exchange (PROTOCOL.md 2): with no sequence number it checkpoints the end of the next batch before "
        "the processor has seen it"], run.stdout
    assert report[-1] == "0 passed, 1 warned, 0 failed"
    strict = check("--strict", "--only", "graceful", "--", *BROKEN, "checkpoint-after-status")
    assert strict.returncode == 1 and "0 passed, 1 warned, 0 failed" in strict.stdout, strict.stdout


def test_a_checkpoint_after_the_status_for_shard_end_fails():
    run = check("--only", "shard end", "--", *BROKEN, "late-shard-end")
    assert run.returncode == 1, run.stdout + run.stderr  # Java drains it unread: the shard never finishes
    report = run.stdout.splitlines()
    assert ("step 3 (shardEnded): the processor sent its checkpoint after the status for shardEnded: Java closes "
            "stdin after that status and drains the line unread: the shard would never finish") in report[1]
    assert report[2:5] == [
        "        step 3 (shardEnded): checkpoint sent after the status for shardEnded",
        '          line: {"action": "checkpoint", "sequenceNumber": null}  (48 bytes)',
        "          why:  Java closes stdin after the last status and drains this line unread: the checkpoint is "
        "never acted on (PROTOCOL.md 5.4)"], run.stdout


def test_plain_text_on_stdout_is_skipped_without_a_warning():
    run = check("--", *BROKEN, "chatty")
    assert run.returncode == 0 and ALL_PASSED in run.stdout, run.stdout
    assert "got processRecords" not in run.stdout  # skipped, as PROTOCOL.md 2 says it must be


def test_usage_errors():
    run = check()
    assert run.returncode == 2 and "the processor command is missing" in run.stderr
    run = check("--only", "nothing like it", "--", "true")
    assert run.returncode == 1 and "no scenario matches 'nothing like it'" in run.stderr

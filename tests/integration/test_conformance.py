"""The conformance kit, ``kcl-mp check-processor -- CMD``: the three ready-made processors
(amazon_kclpy, aws-kcl on Node.js, POSIX shell with jq) pass every scenario; deliberately
broken ones fail with the step and the reason."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PROCESSORS = {
    "python": [sys.executable, str(ROOT / "processors" / "python" / "sample_processor.py")],
    "nodejs": ["node", str(ROOT / "processors" / "nodejs" / "sample_processor.js")],
    "shell": ["sh", str(ROOT / "processors" / "shell" / "processor.sh")],
}
BROKEN = [sys.executable, str(ROOT / "tests" / "processors" / "broken.py")]


def check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kcl_mp", "check-processor", "--timeout", "10", *args],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


@pytest.mark.parametrize("name", list(PROCESSORS))
def test_the_ready_made_processors_pass(name):
    run = check("--", *PROCESSORS[name])
    assert run.returncode == 0, run.stdout + run.stderr
    assert "7 passed, 0 failed" in run.stdout
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


def test_usage_errors():
    run = check()
    assert run.returncode == 2 and "the processor command is missing" in run.stderr
    run = check("--only", "nothing like it", "--", "true")
    assert run.returncode == 1 and "no scenario matches 'nothing like it'" in run.stderr

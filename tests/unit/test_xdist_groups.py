"""`make test`'s first phase keeps the Java peers' and Spark's tests in xdist groups (tests/conftest.py):
one worker each, so two Spark jobs or two Java fleets of a group never run at once. pytest 9.2
silently dropped the groups (pytest-xdist#1386: the tests were spread over every worker, and a
loaded CI failed Spark's 10 s worker connect-back and a 3.x fleet's leader lock); this runs
pytest as `make test` does over a group's tests and checks they stayed on one worker."""

from __future__ import annotations

import re
import subprocess
import sys

from ..support.harness import ROOT


def test_a_groups_tests_run_on_one_worker():
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup", "-v",
         "tests/integration/test_spark_source.py", "-k", "option_errors"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    ran = re.findall(r"^\[(gw\d+)\] \[ *\d+%\] PASSED (.+?) *$", run.stdout, re.MULTILINE)
    assert len(ran) == 4, run.stdout[-3000:]
    assert all(nodeid.endswith("@spark") for _, nodeid in ran), ran
    assert len({worker for worker, _ in ran}) == 1, ran

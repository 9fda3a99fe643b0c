"""`make`'s installs, as make would run them (``make -n``): each stamp installs its whole set
of extras, each one pyproject.toml defines, and prunes uv's cache after (a ``$(call)`` once cut
the extras at their comma and broke ``make bench`` and ``make spark-demo``)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STAMPS = {".venv/.installed": ["test"], ".venv/.demo-installed": ["demo"],
          ".venv/.spark-installed": ["demo", "sink", "spark-local"], ".venv/.bench-installed": ["test", "bench"]}


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.parametrize("stamp", sorted(STAMPS))
def test_each_install_takes_its_whole_set_of_extras_then_prunes(stamp):
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    defined = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    done = subprocess.run(["make", "-n", "-W", "pyproject.toml", stamp], cwd=ROOT, capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0, done.stderr
    line = [line for line in done.stdout.splitlines() if "uv pip install" in line][-1]  # the stamp's own, last
    extras = re.search(r"-e '\.\[([^\]]*)\]'", line)
    assert extras is not None and extras.group(1).split(",") == STAMPS[stamp], line
    assert set(STAMPS[stamp]) <= set(defined), line
    assert line.endswith("&& .venv/bin/uv cache prune --quiet"), line

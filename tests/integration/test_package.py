"""The wheel, as a user gets it: built from the source, pip-installed into a fresh virtual
environment, then run from a directory with no checkout: ``kcl-mp --version``, ``--help``
and ``check-processor`` on a processor the wheel ships, with the kit the wheel ships.

Offline: the wheel is built without build isolation (setuptools and wheel come with the
test extra) and installed with ``--no-index --no-deps``; its dependencies (boto3 ...
and amazon_kclpy, the ``processors`` extra) are the ones this environment has, made
visible to the new one by a path file, never kcl_mp itself.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

import kcl_mp
from kcl_mp.cli.check_processor import load_scenarios

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PROCESSOR = "kcl_mp.processors.python.sample_processor"


def run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{' '.join(argv)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result


def test_the_wheel_installs_into_a_fresh_venv_and_works_without_a_checkout(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # the source as a checkout holds it (links resolved), outside the repository
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "kcl_mp", src / "kcl_mp", ignore=shutil.ignore_patterns("node_modules", "__pycache__"))
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
         "-w", str(dist), str(src)], tmp_path, dict(os.environ))  # built with this environment's setuptools
    (wheel,) = dist.glob("kcl_mp-*.whl")
    assert wheel.name.startswith(f"kcl_mp-{kcl_mp.__version__}-")
    names = set(zipfile.ZipFile(wheel).namelist())
    for shipped in ("kcl_mp/kit/conformance/scenarios.json", "kcl_mp/kit/schema/multilang.schema.json",
                    "kcl_mp/kit/vectors/basic.jsonl", "kcl_mp/processors/python/sample_processor.py",
                    "kcl_mp/processors/python/parquet_sink.py", "kcl_mp/processors/nodejs/sample_processor.js",
                    "kcl_mp/processors/nodejs/package-lock.json", "kcl_mp/processors/shell/processor.sh",
                    "kcl_mp/spark/sink.py", "kcl_mp/spark/source.py"):
        assert shipped in names, f"{shipped} is not in {wheel.name}"
    vectors = {p.name for p in (ROOT / "kcl_mp" / "kit" / "vectors").glob("*.jsonl")}
    shipped_vectors = {n.rsplit("/", 1)[1] for n in names if n.startswith("kcl_mp/kit/vectors/")}
    assert {n for n in shipped_vectors if n.endswith(".jsonl")} == vectors
    assert not [n for n in names if "node_modules" in n or n.startswith("tests/")]

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path, env)
    python = venv / "bin" / "python"
    site = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                    tmp_path, env).stdout.strip())
    # this environment's packages serve as the dependencies; kcl_mp must come from the wheel
    (site / "dependencies.pth").write_text("\n".join(sorted({sysconfig.get_paths()["purelib"],
                                                             sysconfig.get_paths()["platlib"]})) + "\n")
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-index", "--no-deps",
         "--ignore-installed", str(wheel)], tmp_path, env)

    elsewhere = tmp_path / "elsewhere"  # no checkout here, nor above
    elsewhere.mkdir()
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    where = run(["python", "-c", "import kcl_mp; print(kcl_mp.__file__)"], elsewhere, env).stdout.strip()
    assert Path(where).is_relative_to(venv), where
    assert run(["kcl-mp", "--version"], elsewhere, env).stdout.strip() == f"kcl-mp {kcl_mp.__version__}"
    usage = run(["kcl-mp", "--help"], elsewhere, env).stdout
    for command in ("leases", "check-processor", "--properties", "--version", "examples:"):
        assert command in usage, f"kcl-mp --help does not mention {command}:\n{usage}"
    for command in ("leases", "check-processor"):
        assert "examples:\n  kcl-mp " + command in run(["kcl-mp", command, "--help"], elsewhere, env).stdout

    checked = run(["kcl-mp", "check-processor", "--", "python", "-m", PROCESSOR], elsewhere, env)
    scenarios, _ = load_scenarios()
    assert f"{len(scenarios)} passed, 0 warned, 0 failed" in checked.stdout, checked.stdout
    print(f"\n{wheel.name}: installed in a fresh venv; from {elsewhere}:\n{checked.stdout}")

"""resolve_command on real files: PATH lookup, paths, #! lines and the /bin/sh fallback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kcl_mp.errors import ProcessorStartError
from kcl_mp.multilang.command import resolve_command


def make(path: Path, text: str, mode: int = 0o755) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


@pytest.fixture
def app(tmp_path: Path) -> Path:
    return make(tmp_path / "app" / "run.py", f"#!{sys.executable}\nprint('hi')\n")


def env_with(path: str) -> dict[str, str]:
    return {"PATH": path}


def test_relative_path_from_cwd(app: Path) -> None:
    assert resolve_command(("./run.py", "--x"), str(app.parent), env_with("")) == [str(app), "--x"]
    assert resolve_command(("app/run.py",), str(app.parent.parent), env_with("")) == [str(app)]


def test_absolute_path(app: Path, tmp_path: Path) -> None:
    assert resolve_command((str(app),), str(tmp_path), env_with("/nowhere")) == [str(app)]


def test_bare_name_found_on_path(app: Path, tmp_path: Path) -> None:
    assert resolve_command(("run.py", "a"), str(tmp_path), env_with(f"/nowhere:{app.parent}")) == [str(app), "a"]


def test_first_executable_on_path_wins_and_non_executables_are_skipped(tmp_path: Path) -> None:
    make(tmp_path / "a" / "tool", "#!/bin/sh\n", 0o644)
    second = make(tmp_path / "b" / "tool", "#!/bin/sh\n")
    make(tmp_path / "c" / "tool", "#!/bin/sh\n")
    path = f"{tmp_path / 'a'}:{tmp_path / 'b'}:{tmp_path / 'c'}"
    assert resolve_command(("tool",), str(tmp_path), env_with(path)) == [str(second)]


def test_interpreter_on_path(tmp_path: Path) -> None:
    sh = shutil.which("sh")
    assert sh is not None
    assert resolve_command(("sh", "-c", "true"), str(tmp_path), env_with(os.path.dirname(sh))) == [sh, "-c", "true"]


def test_bare_name_in_cwd_is_not_found_unless_path_says_so(app: Path) -> None:
    cwd = str(app.parent)
    with pytest.raises(ProcessorStartError) as info:
        resolve_command(("run.py",), cwd, env_with("/nowhere"))
    message = str(info.value)
    assert message.startswith("'run.py' not found on PATH (PATH=/nowhere)")
    assert "never looked up in the working directory" in message and "./run.py" in message
    # '.' and an empty PATH entry both mean the working directory, as for execvp.
    assert resolve_command(("run.py",), cwd, env_with("/nowhere:.")) == [str(app)]
    assert resolve_command(("run.py",), cwd, env_with("/nowhere:")) == [str(app)]


def test_nonexistent_bare_name_message(tmp_path: Path) -> None:
    with pytest.raises(ProcessorStartError) as info:
        resolve_command(("sample.py",), str(tmp_path), env_with("/usr/bin:/bin"))
    assert str(info.value) == ("'sample.py' not found on PATH (PATH=/usr/bin:/bin); "
                               "use a path like ./sample.py or 'python3 sample.py'")


@pytest.mark.parametrize(
    "setup,program,expected",
    [
        (None, "./missing.py", "'./missing.py' not found (looked at {tmp}/missing.py"),
        ("dir", "./d", "'./d' is a directory"),
        ("plain", "./p.py", "'./p.py' is not executable; run 'chmod +x {tmp}/p.py' or name its "
                            "interpreter, e.g. 'python3 ./p.py'"),
        ("bad-interpreter", "./b.py", "its #! interpreter /no/such/python does not exist"),
        ("crlf", "./w.py", "carriage return (Windows line endings)"),
        ("env-missing", "./e.py", "runs 'no-such-interpreter-xyz' through env"),
    ],
)
def test_unstartable(tmp_path: Path, setup: str | None, program: str, expected: str) -> None:
    if setup == "dir":
        (tmp_path / "d").mkdir()
    elif setup == "plain":
        make(tmp_path / "p.py", "print(1)\n", 0o644)
    elif setup == "bad-interpreter":
        make(tmp_path / "b.py", "#!/no/such/python\n")
    elif setup == "crlf":
        make(tmp_path / "w.py", f"#!{sys.executable}\r\nprint(1)\r\n")
    elif setup == "env-missing":
        make(tmp_path / "e.py", "#!/usr/bin/env no-such-interpreter-xyz\n")
    with pytest.raises(ProcessorStartError) as info:
        resolve_command((program,), str(tmp_path), env_with("/usr/bin:/bin"))
    assert expected.format(tmp=tmp_path) in str(info.value)


def test_non_executable_on_path_says_chmod(tmp_path: Path) -> None:
    make(tmp_path / "bin" / "tool", "#!/bin/sh\n", 0o644)
    with pytest.raises(ProcessorStartError, match="not executable; run 'chmod \\+x"):
        resolve_command(("tool",), str(tmp_path), env_with(str(tmp_path / "bin")))


def test_script_without_shebang_runs_with_sh(tmp_path: Path) -> None:
    script = make(tmp_path / "job", "echo \"ran $1\"\n")
    argv = resolve_command(("./job", "x"), str(tmp_path), env_with("/usr/bin:/bin"))
    assert argv == ["/bin/sh", str(script), "x"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert done.stdout == "ran x\n"


def test_binary_runs_directly(tmp_path: Path) -> None:
    true = shutil.which("true")
    assert true is not None
    assert resolve_command((true,), str(tmp_path), env_with("")) == [true]


def test_resolved_script_really_starts(app: Path) -> None:
    argv = resolve_command(("./run.py",), str(app.parent), env_with(""))
    assert subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout == "hi\n"


def test_empty_command() -> None:
    with pytest.raises(ProcessorStartError, match="executableName is empty"):
        resolve_command((), "/", {})

"""Turn ``executableName`` into the argv a processor child is started with.

The Java daemon hands the split command to ``ProcessBuilder`` (CONFIG.md section 4,
PROTOCOL.md section 1), so kcl-mp resolves the program the same way, but up front and
with a message that says what to do instead of a bare ``error=2``:

- a program containing ``/`` is a path, relative to the working directory;
- a bare name is looked up on ``PATH`` only, never in the working directory (Java does
  the same: ``sample.py`` next to the properties file is found only if ``PATH`` holds
  ``.`` or an empty entry, which both mean the working directory);
- the file must be a regular, executable file; a script's ``#!`` interpreter must exist;
- an executable text file without ``#!`` is run by ``/bin/sh``, as execvp's ENOEXEC
  fallback (and so the Java daemon) does.

Worked example, with ``app.py`` an executable ``#!/usr/bin/env python3`` script::

    resolve_command(("./app.py", "--fast"), "/srv", env)  ->  ["/srv/app.py", "--fast"]
    resolve_command(("python3", "app.py"), "/srv", env)   ->  ["/usr/bin/python3", "app.py"]
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping

from kcl_mp.errors import ProcessorStartError

_DEFAULT_PATH = "/bin:/usr/bin"  # what a search uses when PATH is not set at all
_SH = "/bin/sh"
_ELF = b"\x7fELF"
_INTERPRETERS = {".py": "python3", ".js": "node", ".mjs": "node", ".rb": "ruby", ".sh": "sh", ".pl": "perl"}


def _candidates(name: str, cwd: str, env: Mapping[str, str]) -> list[str]:
    directories = env.get("PATH", _DEFAULT_PATH).split(os.pathsep)
    # An empty PATH entry means the working directory, as '.' does.
    return [os.path.join(cwd, directory or ".", name) for directory in directories]


def _is_file(path: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def _executable(path: str) -> bool:
    return _is_file(path) and os.access(path, os.X_OK)


def _find(name: str, cwd: str, env: Mapping[str, str]) -> str:
    found = [path for path in _candidates(name, cwd, env) if _is_file(path)]
    for path in found:
        if os.access(path, os.X_OK):
            return os.path.abspath(path)
    if found:
        raise ProcessorStartError(
            f"'{name}' was found on PATH at {os.path.abspath(found[0])} but it is not executable; "
            f"run 'chmod +x {os.path.abspath(found[0])}'"
        )
    path_value = env.get("PATH", f"unset, so {_DEFAULT_PATH}")
    shown = path_value if len(path_value) <= 300 else path_value[:300] + "..."
    local = os.path.join(cwd, name)
    if os.path.exists(local):
        hint = (f"{local} exists, but a name without '/' is never looked up in the working directory; "
                f"use ./{name} or {_with_interpreter(name)}")
    else:
        hint = f"use a path like ./{name} or {_with_interpreter(name)}"
    raise ProcessorStartError(f"'{name}' not found on PATH (PATH={shown}); {hint}")


def _with_interpreter(name: str) -> str:
    interpreter = _INTERPRETERS.get(os.path.splitext(name)[1])
    return f"'{interpreter} {name}'" if interpreter else "the full path of the program"


def _check_path(program: str, cwd: str) -> str:
    path = os.path.normpath(os.path.join(cwd, program))
    if not os.path.exists(path):
        raise ProcessorStartError(f"'{program}' not found (looked at {path}; relative paths start "
                                  f"from the working directory {cwd})")
    if os.path.isdir(path):
        raise ProcessorStartError(f"'{program}' is a directory ({path}), not a program")
    if not _is_file(path):
        raise ProcessorStartError(f"'{program}' is not a regular file ({path})")
    if not os.access(path, os.X_OK):
        raise ProcessorStartError(f"'{program}' is not executable; run 'chmod +x {path}' or name "
                                  f"its interpreter, e.g. {_with_interpreter(program)}")
    return path


def _interpreter_problem(path: str, cwd: str, env: Mapping[str, str]) -> str | None:
    """Why the ``#!`` line of ``path`` cannot work, or None."""
    with open(path, "rb") as f:
        first = f.readline(256)
    words = first[2:].decode("utf-8", "replace").rstrip("\n").split()
    if first.rstrip(b"\n").endswith(b"\r"):
        return "its #! line ends with a carriage return (Windows line endings); convert it with dos2unix"
    if not words:
        return "its #! line names no interpreter"
    interpreter = words[0]
    if not _executable(interpreter):
        return f"its #! interpreter {interpreter} does not exist or is not executable"
    if os.path.basename(interpreter) == "env" and len(words) == 2 and "/" not in words[1]:
        if not any(_executable(p) for p in _candidates(words[1], cwd, env)):
            return f"its #! line runs '{words[1]}' through env, and '{words[1]}' is not on PATH"
    return None


def resolve_command(command: tuple[str, ...], cwd: str, env: Mapping[str, str]) -> list[str]:
    """The argv to exec for ``command`` (executableName split on spaces).

    Raises ProcessorStartError naming the executable and what to do when it cannot start.
    """
    if not command:
        raise ProcessorStartError("executableName is empty; set it to the processor's command line")
    program, *args = command
    path = _check_path(program, cwd) if "/" in program else _find(program, cwd, env)
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as exc:
        raise ProcessorStartError(f"'{program}' cannot be read ({path}): {exc.strerror or exc}") from None
    if head.startswith(b"#!"):
        problem = _interpreter_problem(path, cwd, env)
        if problem:
            raise ProcessorStartError(f"'{program}' ({path}) cannot start: {problem}")
        return [path, *args]
    if head == _ELF:
        return [path, *args]
    # No #! and not a binary: execve fails with ENOEXEC and execvp (Java's launcher too)
    # retries the file as a /bin/sh script.
    return [_SH, path, *args]

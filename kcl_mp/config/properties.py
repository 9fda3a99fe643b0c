"""java.util.Properties text, parsed the way the Java MultiLangDaemon reads it.

The daemon loads its file with ``Properties.load(InputStream)``, so kcl-mp follows the
same grammar (CONFIG.md section 2) rather than an INI or ``key=value`` approximation:

- logical lines end at ``\\n``, ``\\r`` or ``\\r\\n``; a line ending in an odd number of
  backslashes continues on the next one, whose leading blanks are dropped;
- a line whose first non-blank character is ``#`` or ``!`` is a comment (a comment never
  continues, even if it ends in a backslash);
- the key ends at the first unescaped ``=``, ``:`` or blank (space, tab, form feed);
  blanks around one ``=``/``:`` separator are skipped;
- escapes ``\\t \\n \\r \\f \\uXXXX`` give those characters, ``\\<c>`` gives ``c``;
- duplicate keys: the last one wins (``last_wins`` says which entries were overridden).

Worked example::

    >>> [(e.key, e.value, e.line) for e in parse("a = 1\\n# c\\nb:x\\\\\\n   y\\nc\\\\ d  \\\\u00e9 ")]
    [('a', '1', 1), ('b', 'xy', 3), ('c d', 'é ', 5)]

Encoding: like Java, a file is read as ISO-8859-1 (every byte is one character), so a
kcl-mp worker derives exactly the same names (table, worker id) from a file as a Java
worker would. Non-ASCII text should be written as ``\\uXXXX``. When a file contains
UTF-8 sequences, ``read_properties`` still decodes ISO-8859-1 (as Java does) and adds a
warning pointing at the first such line, rather than silently guessing.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from kcl_mp.errors import ConfigError

_BLANKS = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_NEWLINE = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class Entry:
    """One ``key = value`` pair and the 1-based line where its logical line started."""

    key: str
    value: str
    line: int


@dataclass(frozen=True)
class PropertiesFile:
    """A parsed file: every entry in file order (duplicates included) and read warnings."""

    path: str
    entries: tuple[Entry, ...]
    warnings: tuple[str, ...] = ()


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Join continuation lines; drop blank and comment lines. Returns (first line no., text)."""
    physical = _NEWLINE.split(text)
    out: list[tuple[int, str]] = []
    i = 0
    while i < len(physical):
        start = i + 1
        line = physical[i].lstrip(_BLANKS)
        i += 1
        if not line or line[0] in "#!":
            continue
        parts: list[str] = []
        while True:
            trailing = len(line) - len(line.rstrip("\\"))
            if trailing % 2 == 0:
                parts.append(line)
                break
            parts.append(line[:-1])  # the continuation backslash itself
            if i >= len(physical):  # Java drops a final lone backslash at end of file
                break
            line = physical[i].lstrip(_BLANKS)
            i += 1
        out.append((start, "".join(parts)))
    return out


def _unescape(text: str, source: str, line: int) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        i += 1
        if c != "\\" or i >= len(text):
            out.append(c)
            continue
        c = text[i]
        i += 1
        if c == "u":
            digits = text[i : i + 4]
            if len(digits) != 4 or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise ConfigError(f"{source} line {line}: malformed \\uXXXX escape '\\u{digits}'")
            out.append(chr(int(digits, 16)))
            i += 4
        else:
            out.append(_ESCAPES.get(c, c))
    return "".join(out)


def _split(line: str) -> tuple[str, str]:
    """The raw (still escaped) key and value of one logical line, as Properties.load0 does."""
    key_end = 0
    has_sep = False
    backslash = False
    while key_end < len(line):
        c = line[key_end]
        if not backslash and c in "=:":
            has_sep = True
            break
        if not backslash and c in _BLANKS:
            break
        backslash = c == "\\" and not backslash
        key_end += 1
    value_start = key_end + 1 if has_sep else key_end
    while value_start < len(line):
        c = line[value_start]
        if c in _BLANKS:
            value_start += 1
        elif not has_sep and c in "=:":
            has_sep = True
            value_start += 1
        else:
            break
    return line[:key_end], line[value_start:]


def parse(text: str, source: str = "<properties>") -> list[Entry]:
    """Every entry of ``text`` in file order, duplicates included. ``source`` names it in errors."""
    entries = []
    for number, line in _logical_lines(text):
        raw_key, raw_value = _split(line)
        entries.append(Entry(_unescape(raw_key, source, number), _unescape(raw_value, source, number), number))
    return entries


def last_wins(entries: list[Entry] | tuple[Entry, ...]) -> tuple[dict[str, Entry], list[tuple[Entry, Entry]]]:
    """The effective entry per key (the last), and each (overridden, overriding) pair."""
    final: dict[str, Entry] = {}
    replaced: list[tuple[Entry, Entry]] = []
    for entry in entries:
        if entry.key in final:
            replaced.append((final[entry.key], entry))
        final[entry.key] = entry
    return final, replaced


def _utf8_line(raw: bytes) -> int | None:
    """The line of the first non-ASCII byte if the file is valid UTF-8 with non-ASCII text."""
    if raw.isascii():
        return None
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return None  # genuinely ISO-8859-1: nothing to say
    first = next(i for i, b in enumerate(raw) if b > 0x7F)
    return raw.count(b"\n", 0, first) + 1


def read_properties(path: str | os.PathLike[str]) -> PropertiesFile:
    """Read and parse a properties file; any problem opening it is a ConfigError naming it."""
    name = os.fspath(path)
    if os.path.isdir(name):
        raise ConfigError(f"{name}: is a directory, not a properties file")
    try:
        with open(name, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise ConfigError(
            f"{name}: properties file not found (working directory {os.getcwd()})"
        ) from None
    except OSError as exc:
        raise ConfigError(f"{name}: cannot read the properties file: {exc.strerror or exc}") from None
    warnings = []
    line = _utf8_line(raw)
    if line is not None:
        warnings.append(
            f"{name} line {line}: non-ASCII text read as ISO-8859-1, as the Java daemon reads it; "
            "write such characters as \\uXXXX escapes to get them as intended"
        )
    return PropertiesFile(name, tuple(parse(raw.decode("iso-8859-1"), name)), tuple(warnings))

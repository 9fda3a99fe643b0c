"""java.util.Properties grammar: one row per rule of CONFIG.md section 2."""

from __future__ import annotations

import pytest

from kcl_mp.config.properties import Entry, last_wins, parse, read_properties
from kcl_mp.errors import ConfigError

# (why, text, expected [(key, value, line)])
CASES = [
    ("equals", "a=b", [("a", "b", 1)]),
    ("colon", "a:b", [("a", "b", 1)]),
    ("whitespace separator", "a b", [("a", "b", 1)]),
    ("blanks around separator dropped, trailing blanks kept", "a  =  b  ", [("a", "b  ", 1)]),
    ("tab and form feed are blanks", "a\t=\fb", [("a", "b", 1)]),
    ("only the first separator counts", "a = b = c", [("a", "b = c", 1)]),
    ("whitespace then colon is one separator", "a : b", [("a", "b", 1)]),
    ("key without value", "a", [("a", "", 1)]),
    ("empty key", "=b", [("", "b", 1)]),
    ("leading blanks of a line ignored", "   a=b", [("a", "b", 1)]),
    ("hash comment", "# a=b\nc=d", [("c", "d", 2)]),
    ("bang comment after blanks", "  ! a=b\nc=d", [("c", "d", 2)]),
    ("hash inside a value is literal", "a = b # c", [("a", "b # c", 1)]),
    ("blank lines skipped", "\n\n  \na=b", [("a", "b", 4)]),
    ("CRLF and CR line ends", "a=1\r\nb=2\rc=3", [("a", "1", 1), ("b", "2", 2), ("c", "3", 3)]),
    ("continuation, leading blanks dropped", "a = x\\\n    y\nb=2", [("a", "xy", 1), ("b", "2", 3)]),
    ("continuation over several lines", "a = 1,\\\n 2,\\\n 3", [("a", "1,2,3", 1)]),
    ("even backslashes do not continue", "a = x\\\\\nb = y", [("a", "x\\", 1), ("b", "y", 2)]),
    ("three backslashes continue", "a = x\\\\\\\n y", [("a", "x\\y", 1)]),
    ("comment does not continue", "# c\\\na=b", [("a", "b", 2)]),
    ("continued line may look like a comment", "a = x\\\n  # y", [("a", "x# y", 1)]),
    ("empty continuation ends the line", "a = x\\\n\nb", [("a", "x", 1), ("b", "", 3)]),
    ("backslash at end of file dropped", "a = x\\", [("a", "x", 1)]),
    ("escapes", "a = \\t\\n\\r\\f\\\\", [("a", "\t\n\r\f\\", 1)]),
    ("unicode escapes", "a = caf\\u00e9 \\u20AC", [("a", "café €", 1)]),
    ("unicode escape in key", "\\u0061 = 1", [("a", "1", 1)]),
    ("escaped separators in key", "a\\=b\\:c\\ d = v", [("a=b:c d", "v", 1)]),
    ("other escaped characters are themselves", "a = \\q\\#", [("a", "q#", 1)]),
    ("quotes are literal", 'workerId = "w"', [("workerId", '"w"', 1)]),
    ("duplicates all returned", "a=1\na=2", [("a", "1", 1), ("a", "2", 2)]),
]


@pytest.mark.parametrize("why,text,expected", CASES, ids=[c[0] for c in CASES])
def test_parse(why: str, text: str, expected: list[tuple[str, str, int]]) -> None:
    assert [(e.key, e.value, e.line) for e in parse(text)] == expected


@pytest.mark.parametrize("text", ["a = \\u12", "a = \\uZZZZ", "a = x\\u00"])
def test_malformed_unicode_escape_names_line(text: str) -> None:
    with pytest.raises(ConfigError, match=r"app.properties line 1: malformed \\uXXXX"):
        parse(text, "app.properties")


def test_malformed_escape_line_is_the_logical_line_start() -> None:
    with pytest.raises(ConfigError, match="line 2"):
        parse("a=1\nb = x\\\n  \\uQQQQ", "f")


def test_last_wins_records_overridden_entries() -> None:
    final, replaced = last_wins(parse("a=1\nb=2\na=3"))
    assert final["a"] == Entry("a", "3", 3)
    assert replaced == [(Entry("a", "1", 1), Entry("a", "3", 3))]


def test_read_properties_iso_8859_1(tmp_path) -> None:
    path = tmp_path / "app.properties"
    path.write_bytes(b"name = caf\xe9\n")
    props = read_properties(path)
    assert props.entries == (Entry("name", "café", 1),)
    assert props.warnings == ()


def test_read_properties_utf8_bytes_read_as_java_does_with_warning(tmp_path) -> None:
    path = tmp_path / "app.properties"
    path.write_bytes("a = 1\nname = café\n".encode())
    props = read_properties(path)
    assert props.entries[1].value == "cafÃ©"  # what the Java daemon sees too
    assert len(props.warnings) == 1 and "line 2" in props.warnings[0] and "\\uXXXX" in props.warnings[0]


def test_missing_file(tmp_path) -> None:
    missing = tmp_path / "nope.properties"
    with pytest.raises(ConfigError, match=f"{missing}: properties file not found"):
        read_properties(missing)


def test_directory(tmp_path) -> None:
    with pytest.raises(ConfigError, match="is a directory"):
        read_properties(tmp_path)


def test_unreadable_path(tmp_path) -> None:
    # A path through a regular file fails with ENOTDIR for every user, root included.
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="cannot read the properties file"):
        read_properties(tmp_path / "file" / "app.properties")

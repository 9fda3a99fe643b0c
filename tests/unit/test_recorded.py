"""The recorder files' reader (tests/support/harness.py ``recorded``): read again and again
while processors append, it returns every whole line once, in order, and a partial last
line only once it is whole."""

from __future__ import annotations

import json

from tests.support.harness import recorded


def test_lines_appended_between_reads_come_once_and_a_partial_line_waits_until_whole(tmp_path):
    path = tmp_path / "shardId-000000000001.4242.jsonl"
    with open(path, "wb") as f:
        f.write(b'{"n": 1}\n{"n": 2}\n{"n": ')
        f.flush()
        assert [e["n"] for e in recorded(tmp_path)] == [1, 2]
        f.write(b'3}\n\n{"n": 4}\n')
        f.flush()
        got = recorded(tmp_path)
    assert [e["n"] for e in got] == [1, 2, 3, 4]
    assert {(e["_shard"], e["_pid"]) for e in got} == {("shardId-000000000001", 4242)}
    other = tmp_path / "shardId-000000000000.7.jsonl"
    other.write_text(json.dumps({"event": "initialize"}) + "\n")
    assert [e.get("n", e.get("event")) for e in recorded(tmp_path)] == ["initialize", 1, 2, 3, 4]


def test_a_file_written_anew_shorter_is_read_from_its_start(tmp_path):
    path = tmp_path / "shardId-000000000001.1.jsonl"
    path.write_text('{"n": 1}\n{"n": 2}\n')
    assert len(recorded(tmp_path)) == 2
    path.write_text('{"n": 9}\n')
    assert [e["n"] for e in recorded(tmp_path)] == [9]

"""The decision table of kcl_mp/spark/checkpoint.py: which files of a query's checkpoint a kill
before its first logged batch left, that Spark 4.3+ would refuse to start on."""

from __future__ import annotations

import pytest

from kcl_mp.spark.checkpoint import leftovers

CASES = [
    # (comment, offsets/ names, commits/ names, removed)
    ("killed while renaming the first offset entry into place (local or HDFS: with its checksum)",
     [".0.1b2c.tmp", "..0.1b2c.tmp.crc"], [], ["offsets/..0.1b2c.tmp.crc", "offsets/.0.1b2c.tmp"]),
    ("an orphaned checksum of an entry that never landed", [".0.crc"], [], ["offsets/.0.crc"]),
    ("a fresh checkpoint: nothing to remove", [], [], []),
    ("the first batch was logged: Spark resumes from it, nothing touched",
     ["0", ".0.crc", ".1.9d.tmp"], [".0.7f.tmp"], []),
    ("a file Spark did not write (not hidden) is left for Spark to name", ["notes.txt"], [], []),
    ("a commit's leftover before any offset entry", [], [".0.7f.tmp"], ["commits/.0.7f.tmp"]),
]


@pytest.mark.parametrize("comment,offsets,commits,removed", CASES, ids=[c[0] for c in CASES])
def test_leftovers(comment, offsets, commits, removed):
    assert leftovers({"offsets": offsets, "commits": commits}) == removed

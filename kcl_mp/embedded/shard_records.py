"""moto's Kinesis shards find their records by key instead of scanning them all.

A moto shard keeps its records in an OrderedDict keyed by sequence numbers 1, 2, 3 ... (a put
is the last key + 1), yet every GetRecords scans it from its first record, and every put lists
all its keys to find the last: each O(the shard's records). Measured in the Spark source's
latency bench (8 shards, 1,000 puts a second): the longer it ran, the slower moto answered
the puts, until the producers fell behind the records they were due to put. Here a read
looks up the keys after its iterator's, and the first and last keys are read from the ends
of the dict. Where the keys are not consecutive (nothing moto makes does that), moto's own
scan answers. tests/unit/test_moto_answers.py holds moto's own answers against these.
"""

from __future__ import annotations

from typing import Any


def install() -> None:
    """Once per process: moto's Kinesis shards read and put by key."""
    from moto.kinesis.models import Shard

    scan = Shard.get_records
    if getattr(scan, "by_key", False):
        return

    def get_records(self: Any, last_sequence_id: str, limit: int | None) -> tuple[list[Any], int, int]:
        records = self.records
        after = int(last_sequence_id)
        if not records:
            return [], after, 0
        first, last = next(iter(records)), next(reversed(records))
        if last - first + 1 != len(records):
            return scan(self, last_sequence_id, limit)
        start = max(after + 1, first)
        stop = last + 1 if not limit else min(last + 1, start + limit)  # moto's scan: Limit 0 as no limit
        taken = [records[key] for key in range(start, stop)]
        if not taken:
            return [], after, 0
        return taken, stop - 1, int((records[last].created_at - taken[-1].created_at) * 1000)

    def first_key(self: Any) -> int:
        return next(iter(self.records)) if self.records else 0

    def last_key(self: Any) -> int:
        return next(reversed(self.records)) if self.records else 0

    get_records.by_key = True  # type: ignore[attr-defined]
    Shard.get_records = get_records  # type: ignore[method-assign]
    Shard.get_min_sequence_number = first_key  # type: ignore[method-assign]
    Shard.get_max_sequence_number = last_key  # type: ignore[method-assign]

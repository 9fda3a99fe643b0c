"""A position in a shard: the extended sequence number and its sentinels.

Shared by leases (the checkpoint), retrieval (where a read starts) and multilang (what a
processor may checkpoint), so none of them needs another's module for it. Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TRIM_HORIZON = "TRIM_HORIZON"
LATEST = "LATEST"
AT_TIMESTAMP = "AT_TIMESTAMP"
SHARD_END = "SHARD_END"

# Java's ExtendedSequenceNumber orders sentinels by these values; SHARD_END is above every
# real sequence number (they are < 2**128).
_SENTINEL_ORDER = {AT_TIMESTAMP: -3, TRIM_HORIZON: -2, LATEST: -1, SHARD_END: 2**200}


@dataclass(frozen=True, order=False)
class ExtendedSequenceNumber:
    """A position in a shard: a sequence number (or sentinel) plus the KPL sub-sequence.

    >>> ExtendedSequenceNumber("5", 1) > ExtendedSequenceNumber("5", 0)
    True
    >>> ExtendedSequenceNumber(SHARD_END) > ExtendedSequenceNumber("99999")
    True
    """

    sequence_number: str
    sub_sequence_number: int = 0

    @property
    def is_sentinel(self) -> bool:
        return self.sequence_number in _SENTINEL_ORDER

    def sort_key(self) -> tuple[int, int]:
        seq = self.sequence_number
        value = _SENTINEL_ORDER.get(seq)
        if value is None:
            value = int(seq)  # ValueError for garbage: callers validate first
        return (value, self.sub_sequence_number)

    def __lt__(self, other: ExtendedSequenceNumber) -> bool:
        return self.sort_key() < other.sort_key()

    def __le__(self, other: ExtendedSequenceNumber) -> bool:
        return self.sort_key() <= other.sort_key()

    def __gt__(self, other: ExtendedSequenceNumber) -> bool:
        return self.sort_key() > other.sort_key()

    def __ge__(self, other: ExtendedSequenceNumber) -> bool:
        return self.sort_key() >= other.sort_key()

    def __str__(self) -> str:
        if self.sub_sequence_number:
            return f"{self.sequence_number}/{self.sub_sequence_number}"
        return self.sequence_number


# Kinesis's SequenceNumber shape (the API's pattern): at most 129 digits, no leading zero.
_KINESIS_SEQUENCE = re.compile(r"0|[1-9][0-9]{0,128}")


def is_valid_sequence_number(text: str) -> bool:
    """A Kinesis sequence number or a sentinel: what a checkpoint may hold.

    >>> [is_valid_sequence_number(text) for text in ("4959033827149025660855969253836", "9" * 130, "SHARD_END")]
    [True, False, True]
    """
    return text in _SENTINEL_ORDER or _KINESIS_SEQUENCE.fullmatch(text) is not None

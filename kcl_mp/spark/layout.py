"""The landing area's layout and its chain rule: pure, no I/O (decision table:
tests/decisions/landing_chain_cases.json).

Where a file goes, relative to the landing root::

    <stream>/<shardId>/<first>-<last>-<writer>-<n>.parquet
    each position <sequence number, 56 digits>.<sub-sequence number, 5 digits>, zero-padded

Names sort by the first (sequence, sub-sequence) they hold, so a reader lists only what is new
with ``StartAfter``. The writer part is unique to each sink process and ``n`` counts its files,
so a range landed again is a new file, never an overwritten one.

Each file records in its Parquet key-value metadata (``kclmp.*``):

- ``from``: the position it continues from: the last position its writer landed before it,
  or, for a writer's first file, where the processor was initialized (its lease's checkpoint,
  or ``start`` for the shard's start). Every record after ``from`` up to ``last`` is in it or
  was never delivered to this consumer.
- ``last``: its own last position.
- ``checkpointed``: the writer's last checkpoint when it wrote the file. Checkpoints only move
  forward and a new writer starts at one, so no file landed later can begin before it: a
  reader lists a shard from there (:func:`floor_key`) and still sees a failover writer's
  re-landed range, which can begin before the last file the reader saw.
- ``ended``: the file is the shard's last (the processor was told the shard ended).

The chain rule (:func:`plan_shard`): given what a reader emitted of a shard (``covered``, the
last position emitted, or None before anything) and the files it listed, emit each position
in ``(covered, end]`` once: repeatedly take, among the files that continue from at or before
``covered`` and end after it, the one that ends last, and emit its rows after ``covered``.
Files wholly at or below ``covered`` are duplicates (re-landed ranges), whenever they landed.
Files that all continue from past ``covered`` are a **gap**: their predecessor has not
landed (or was lost). The reader waits for it and logs the shard and both positions; nothing
past a gap is emitted, so nothing is ever skipped silently.

Worked example: ``covered`` = 10; files A (from 10, last 20), B (from 5, last 25, a failover
writer's re-landing), C (from 25, last 30), D (from 40, last 50). A and B continue from at or
before 10; B ends later: take B's rows in (10, 25]. Then C continues from 25: take (25, 30].
D continues from 40 > 30: a gap, wait. A is never read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

Position = tuple[int, int]  # (sequence number, sub-sequence number)
START: Position = (-1, 0)  # before every record of a shard: a processor initialized at the shard's start
SEQ_DIGITS = 56  # Kinesis sequence numbers have up to 56 digits
SUB_DIGITS = 5
SUFFIX = ".parquet"

META_STREAM = "kclmp.stream"
META_SHARD = "kclmp.shard"
META_FROM = "kclmp.from"
META_LAST = "kclmp.last"
META_CHECKPOINTED = "kclmp.checkpointed"
META_ENDED = "kclmp.ended"


class LayoutError(ValueError):
    """A name or a metadata value that is not the landing layout's."""


def format_position(position: Position) -> str:
    """``start`` or ``<seq>.<sub>``: ``format_position((42, 3)) == "42.3"``."""
    return "start" if position == START else f"{position[0]}.{position[1]}"


def parse_position(text: str) -> Position:
    """The inverse of :func:`format_position`; a bare sequence number has sub-sequence 0."""
    if text == "start":
        return START
    seq, _, sub = text.partition(".")
    if not seq.isdigit() or not (sub or "0").isdigit():
        raise LayoutError(f"not a position: {text!r} (expected 'start' or '<sequence>.<sub-sequence>')")
    return int(seq), int(sub or "0")


def _padded(position: Position) -> str:
    return f"{position[0]:0{SEQ_DIGITS}d}.{position[1]:0{SUB_DIGITS}d}"


@dataclass(frozen=True)
class FileName:
    """What a landed file's name says."""

    first: Position
    last: Position
    writer: str
    n: int

    def __str__(self) -> str:
        return f"{_padded(self.first)}-{_padded(self.last)}-{self.writer}-{self.n}{SUFFIX}"


def parse_name(name: str) -> FileName:
    """``parse_name(str(FileName((1, 0), (9, 2), "ab12", 3))) == FileName((1, 0), (9, 2), "ab12", 3)``."""
    if not name.endswith(SUFFIX):
        raise LayoutError(f"not a landed file: {name!r} (no {SUFFIX})")
    parts = name[: -len(SUFFIX)].split("-")
    if len(parts) != 4 or not parts[3].isdigit() or not parts[2]:
        raise LayoutError(f"not a landed file: {name!r} (expected <first>-<last>-<writer>-<n>{SUFFIX})")
    return FileName(parse_position(parts[0]), parse_position(parts[1]), parts[2], int(parts[3]))


def shard_prefix(stream: str, shard: str) -> str:
    """A shard's directory (or S3 prefix) under the landing root, with its trailing slash."""
    for what, value in (("stream", stream), ("shard", shard)):
        if not value or "/" in value:
            raise LayoutError(f"{what} {value!r} cannot name a landing directory")
    return f"{stream}/{shard}/"


def floor_key(position: Position) -> str:
    """The ``StartAfter`` name that lists every file beginning at or after ``position``'s
    sequence number (a re-delivery after a checkpoint at (s, k) begins at (s, k+1))."""
    return "" if position == START else f"{position[0]:0{SEQ_DIGITS}d}"


@dataclass(frozen=True)
class Landed:
    """One listed file, as the planner knows it (name and metadata)."""

    name: str
    first: Position
    last: Position
    after: Position  # kclmp.from: the position the file continues from
    checkpointed: Position
    rows: int
    ended: bool


def landed(name: str, metadata: Mapping[bytes, bytes], rows: int) -> Landed:
    """A listed file from its name and Parquet key-value metadata; the error names the file."""
    parsed = parse_name(name)
    try:
        after = parse_position(metadata[META_FROM.encode()].decode())
        checkpointed = parse_position(metadata.get(META_CHECKPOINTED.encode(), b"start").decode())
    except (KeyError, LayoutError) as exc:
        raise LayoutError(f"{name}: no valid {META_FROM} in its Parquet metadata ({exc})") from exc
    ended = metadata.get(META_ENDED.encode(), b"false") == b"true"
    return Landed(name, parsed.first, parsed.last, after, checkpointed, rows, ended)


@dataclass(frozen=True)
class Take:
    """Emit the rows of file ``name`` whose position is after ``after`` (up to its last)."""

    name: str
    after: Position | None  # None: all its rows (the shard's first file a reader sees)


@dataclass(frozen=True)
class Gap:
    """The files past ``covered`` all continue from later: the first of them from ``waiting_from``."""

    covered: Position | None
    waiting_from: Position


@dataclass(frozen=True)
class ShardPlan:
    takes: tuple[Take, ...]
    covered: Position | None  # the last position emitted once the takes are read
    ended: bool  # the shard's last file is emitted: nothing more will land
    gap: Gap | None
    start_after: str  # where the next listing starts: below the writers' last checkpoint and every file still needed


def plan_shard(covered: Position | None, files: Iterable[Landed], start_after: str = "",
               max_files: int | None = None, max_rows: int | None = None) -> ShardPlan:
    """The chain rule (module docstring), capped by whole files: at most ``max_files`` files
    and, past the first file, at most ``max_rows`` rows. ``files`` are what a listing from
    ``start_after`` found."""
    listed = list(files)
    floor = max((f.checkpointed for f in listed), default=START)
    ended = any(f.ended and covered is not None and f.last <= covered for f in listed)
    if covered is None and listed:
        covered_now: Position | None = min(f.after for f in listed)  # the earliest file a reader sees starts it
        first_take = True
    else:
        covered_now, first_take = covered, False
    takes: list[Take] = []
    rows = 0
    gap = None
    while covered_now is not None:
        c = covered_now
        ahead = [f for f in listed if f.last > c]
        if not ahead:
            break
        joining = [f for f in ahead if f.after <= c]
        if not joining:
            gap = Gap(c, min(f.after for f in ahead))
            break
        best = max(joining, key=lambda f: (f.last, f.name))
        if takes and ((max_files is not None and len(takes) >= max_files)
                      or (max_rows is not None and rows + best.rows > max_rows)):
            break
        takes.append(Take(best.name, None if first_take else c))
        first_take = False
        rows += best.rows
        covered_now = best.last
        ended = ended or best.ended
    end = covered_now if takes else covered
    needed = [f.name[:SEQ_DIGITS] for f in listed if end is None or f.last > end]
    return ShardPlan(tuple(takes), end, ended, gap, min([max(start_after, floor_key(floor)), *needed]))


def cleanable(covered: Position | None, files: Iterable[Landed]) -> list[str]:
    """The files wholly at or below ``covered``: what a committed reader no longer needs."""
    if covered is None:
        return []
    return sorted(f.name for f in files if f.last <= covered)


def admitted(hold: Mapping[str, Position], covered: Mapping[str, Position | None]) -> bool:
    """Lineage: a shard that appeared after the query started waits until every shard known
    before it had emitted what was landed when it appeared (``hold``). A child's first file
    lands only after its parents' last (the KCL starts a child once its parents' leases are
    checkpointed at SHARD_END, which the sink does only after its last file is committed),
    so its parents' last rows are in an earlier batch than its first."""
    return all((emitted := covered.get(shard)) is not None and emitted >= position
               for shard, position in hold.items())

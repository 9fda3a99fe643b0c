"""The ``kclmp_kinesis`` source's offsets and its planning rule: pure, no I/O.

Kinesis cannot say where a shard ends now without reading it, so the planner never knows a
batch's last sequence numbers. An offset names an *epoch* instead: the batch that ends at
epoch ``k`` reads each of its ``active`` shards from that shard's ``pos``, and where it stops
is decided by the first executor that reads it and recorded in the shard's manifest for
epoch ``k`` (:mod:`kcl_mp.spark.kinesis_read`). Planning the next batch turns those
manifests into positions (:func:`resolve`), adds the shards that appeared, and asks which
shards have records past their position (the planner's probes); when none has, the offset
does not change and Spark runs no batch.

    {"v": 1, "epoch": 7,
     "shards": {"<stream>/<shardId>": {"pos": <position>, "ended": false}, ...},
     "active": ["<stream>/<shardId>", ...],
     "cap": 2500 | null,          # user records each active shard may read in this batch
     "until": 1764200000000 | null,   # availableNow: nothing that arrived after (epoch ms)
     "since": 1764100000000 | null,   # LATEST or AT_TIMESTAMP: the shards listed are those open then
     "closing": [...]}                # active shards found read to their end: their batch records it

A position is ``{"after": "<seq>"}`` (a record read), ``{"at": "TRIM_HORIZON"}``,
``{"at": "AT_TIMESTAMP", "ts": <epoch ms>}`` or ``{"at": "AT_SEQUENCE_NUMBER", "seq": "<seq>"}``.

Probing: a trigger probes the shards not known to be idle first, then the idle ones, least
recently probed first (:func:`probe_order`); the planner stops starting probes of idle shards
when its budget is spent, and those left over go first next time.

Lineage: a shard is read only once every parent the offsets know has ended (read to its
end), and a shard that appears while the query runs (a split's or a merge's child) is read
from TRIM_HORIZON. Parents the offsets do not know (expired, or closed before the query's
initial position) do not hold a child back.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

VERSION = 1
TRIM_HORIZON: dict[str, Any] = {"at": "TRIM_HORIZON"}
# An idle shard is probed again no sooner than this: Kinesis allows 5 GetRecords a second a shard,
# shared by every consumer of the stream, and an idle query's triggers can come every 10 ms.
IDLE_PROBE_GAP_S = 1.0


def shard_key(stream: str, shard_id: str) -> str:
    return f"{stream}/{shard_id}"


def split_key(key: str) -> tuple[str, str]:
    """``(stream, shardId)`` of a key (a stream ARN holds slashes; a shard id never does)."""
    stream, _, shard = key.rpartition("/")
    return stream, shard


@dataclass(frozen=True)
class Listed:
    """A shard as ListShards showed it: its key, its parents' keys and its hash key range."""

    key: str
    parents: tuple[str, ...]
    hash_range: tuple[int, int]


@dataclass(frozen=True)
class Manifest:
    """Where the batch of one epoch stopped on one shard: after ``end`` (None: it read no
    record), and whether that is the shard's end."""

    end: str | None
    ended: bool


@dataclass(frozen=True)
class Probe:
    """What a planner's probe of a shard found past its position: a record (with its arrival
    time, epoch ms), the shard's end, records further on than its reads went (Kinesis'
    MillisBehindLatest above 0 after empty pages), or nothing yet."""

    record_arrival_ms: int | None = None
    at_end: bool = False
    behind: bool = False

    def moves(self, until: int | None) -> bool:
        """Whether a batch has something to do on the shard (read a record, or record its end).
        Under availableNow a record that arrived after ``until`` is not for this run. A shard
        behind moves: its batch reads on past the empty pages (the next probe goes on from
        where this one stopped), so it comes to a record or the tip."""
        if self.record_arrival_ms is not None:
            return until is None or self.record_arrival_ms <= until
        return self.at_end or self.behind


def empty_offset() -> dict[str, Any]:
    return {"v": VERSION, "epoch": 0, "shards": {}, "active": [], "cap": None, "until": None, "since": None}


def initial_offset(listed: Iterable[Listed], position: Mapping[str, Any], since: int | None,
                   sequence_numbers: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Epoch 0: every shard listed at the initial position starts there (or, for
    AT_SEQUENCE_NUMBER, at its own sequence number: a shard not named starts at TRIM_HORIZON).
    ``since``: LATEST's start time or AT_TIMESTAMP's time (epoch ms), which every later listing
    filters at, so a shard closed before it is never read."""
    offset = empty_offset()
    offset["since"] = since
    for shard in listed:
        if sequence_numbers is not None:
            seq = sequence_numbers.get(split_key(shard.key)[1])
            pos = {"at": "AT_SEQUENCE_NUMBER", "seq": seq} if seq is not None else dict(TRIM_HORIZON)
        else:
            pos = dict(position)
        offset["shards"][shard.key] = {"pos": pos, "ended": False}
    return offset


def check_offset(offset: Mapping[str, Any]) -> None:
    """A clear error for an offset this version cannot read (a checkpoint of another source)."""
    if not isinstance(offset, Mapping) or offset.get("v") != VERSION or "shards" not in offset:
        shown = str(dict(offset) if isinstance(offset, Mapping) else offset)[:200]
        raise ValueError(f"kclmp_kinesis: the checkpoint's offset {shown} is not this source's (version {VERSION}); "
                         "start the query with a new checkpoint")


def resolve(offset: Mapping[str, Any], manifests: Mapping[str, Manifest]) -> dict[str, dict[str, Any]]:
    """Each shard's position once the batch ending at ``offset`` is done: an active shard's
    from its manifest (``manifests`` has one for each), the others' as the offset says."""
    shards = {key: dict(entry) for key, entry in offset["shards"].items()}
    for key in offset["active"]:
        manifest = manifests[key]
        entry = shards[key]
        if manifest.end is not None:
            entry["pos"] = {"after": manifest.end}
        entry["ended"] = entry["ended"] or manifest.ended
    return shards


def admit(shards: Mapping[str, dict[str, Any]],
          listed: Iterable[Listed]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Add the shards that appeared (from TRIM_HORIZON); drop ended shards no longer listed.
    Returns the shards and, sorted, those to probe: not ended, every known parent ended."""
    out = {key: dict(entry) for key, entry in shards.items()}
    listed = list(listed)
    present = {shard.key for shard in listed}
    for shard in listed:
        if shard.key not in out:
            out[shard.key] = {"pos": dict(TRIM_HORIZON), "ended": False}
    for key in [k for k, entry in out.items() if entry["ended"] and k not in present]:
        del out[key]
    parents = {shard.key: shard.parents for shard in listed}
    ready = sorted(key for key, entry in out.items() if not entry["ended"]
                   and all(out[p]["ended"] for p in parents.get(key, ()) if p in out))
    return out, ready


def next_offset(start: Mapping[str, Any], shards: Mapping[str, dict[str, Any]], moving: Iterable[str],
                max_rows: int | None, until: int | None, closing: Iterable[str] = ()) -> dict[str, Any]:
    """The end offset of the next batch: a new epoch over the shards with something to do,
    ``max_rows`` shared among them; ``start`` itself when none has (no batch runs).
    ``closing``: shards found read to their end, whose batch only records it (by GetRecords,
    whose last page says so, even with enhanced fan-out)."""
    active = sorted(set(moving))
    if not active:
        return dict(start)
    cap = None if max_rows is None else max(1, max_rows // len(active))
    return {"v": VERSION, "epoch": int(start["epoch"]) + 1, "shards": {k: shards[k] for k in sorted(shards)},
            "active": active, "cap": cap, "until": until, "since": start.get("since"),
            "closing": sorted(set(closing) & set(active))}


def probe_order(ready: Iterable[str], probed_at: Mapping[str, float], idle: Collection[str], now: float,
                defer: bool) -> list[str]:
    """The shards a trigger probes, in the order it starts them: those not known to be idle
    (moved, or never probed) first, then the ``idle`` ones (nothing found at their last probe),
    each group least recently probed (``probed_at``, monotonic seconds) first. With ``defer``,
    an idle shard probed less than IDLE_PROBE_GAP_S before ``now`` waits; without it
    (availableNow: a run ends at the first trigger that finds nothing) every shard is asked."""
    order = sorted(ready, key=lambda key: (key in idle, probed_at.get(key, -math.inf), key))
    if not defer:
        return order
    return [key for key in order if key not in idle or now - probed_at.get(key, -math.inf) >= IDLE_PROBE_GAP_S]

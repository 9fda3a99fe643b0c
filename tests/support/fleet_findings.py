"""What a KCL 3.x fleet run left, turned into findings a test can assert on (pure: reads
the run's result.json, the recorders' files and the hosts' logs; tests/support/kcl3_fleet.py
runs the fleet).

- ``compare_snapshots``: every item of the lease, coordinator-state and worker-metrics
  tables at one phase boundary against the next; which attributes may change is below;
- ``holdings`` / ``moved_back``: who held each shard when, and leases that went A -> B -> A;
- ``processing_overlap``: the longest time two hosts processed one shard at once (from the
  recorder's per-record stamps);
- ``resumes``: each processor that started on a shard another host ran before, with the
  first record it got against the record after the checkpoint it inherited;
- ``self_acquired``: the leases a kcl-mp host says in its log it took, stole or asked for;
- ``java_assigned`` / ``kclmp_assigned``: the moves a Java or a kcl-mp leader logged;
  ``java_logged``: when a Java daemon logged a given line (its rounds as leader, say).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

from kcl_mp.logs import LeaseEvent
from kcl_mp.sequence import ExtendedSequenceNumber

from .harness import log_lines, recorded, records_only

Item = dict[str, dict[str, Any]]
Snapshot = dict[str, "dict[str, Item] | None"]  # table -> key -> item (None: no such table)

# Lease items: what a worker's normal work changes (take, assign, renew, handoff,
# checkpoint, throughput, a kcl-mp host's measured cost); every other attribute (leaseKey,
# hash range, parents...) is fixed.
LEASE_MUTABLE = frozenset({
    "leaseOwner", "leaseCounter", "checkpoint", "checkpointSubSequenceNumber", "ownerSwitchesSinceCheckpoint",
    "checkpointOwner", "pendingCheckpoint", "pendingCheckpointSubSequenceNumber", "pendingCheckpointState",
    "throughputKBps", "kclmpCpuPercent"})
# ... and of those, what may go away: a finished handoff's checkpointOwner, a consumed
# pending checkpoint, a released lease's owner.
LEASE_MAY_DROP = frozenset({
    "leaseOwner", "checkpointOwner", "pendingCheckpoint", "pendingCheckpointSubSequenceNumber",
    "pendingCheckpointState"})
# The lock item: every write gives it a new version, the owner changes with the leader,
# and the lock client deletes it on release; an item of one version never changes.
LOCK_MUTABLE = frozenset({"ownerName", "leaseDuration", "recordVersionNumber", "isReleased", "data"})
LOCK_SHAPE = {"ownerName": "S", "leaseDuration": "S", "recordVersionNumber": "S"}
# Worker metrics: the reporter rewrites lut, sts and opr; nothing else.
METRICS_MUTABLE = frozenset({"lut", "sts", "opr", "slu"})


def table_kind(name: str) -> str:
    if name.endswith("-CoordinatorState"):
        return "coordinator"
    if name.endswith("-WorkerMetricStats"):
        return "metrics"
    return "leases"


def compare_snapshots(before: Snapshot, after: Snapshot) -> list[str]:
    """Every way ``after`` lost or corrupted something ``before`` held: an item gone (only the
    lock and an INIT table-migration state may go: ``may_go``), an attribute gone or retyped, a fixed attribute changed, leaseCounter or a
    checkpoint or a metrics item's lut gone backwards, a lock item of the wrong shape (one
    holder, a duration in ms, a version) or changed without a new version. Nothing else is
    said of new items."""
    problems = lock_problems(after)
    for table, items in before.items():
        if items is None:
            continue
        now = after.get(table)
        if now is None:
            problems.append(f"{table}: the table is gone")
            continue
        kind = table_kind(table)
        for key, old in items.items():
            new = now.get(key)
            where = f"{table} {key}"
            if new is None:
                if not (kind == "coordinator" and may_go(key, old)):
                    problems.append(f"{where}: the item is gone")
                continue
            mutable, may_drop = _rules(kind, key)
            for name, value in old.items():
                if name not in new:
                    if name not in may_drop:
                        problems.append(f"{where}: {name} dropped (was {_show(value)})")
                    continue
                if list(new[name]) != list(value):
                    problems.append(f"{where}: {name} retyped {list(value)} -> {list(new[name])}")
                elif name not in mutable and new[name] != value:
                    problems.append(f"{where}: {name} changed {_show(value)} -> {_show(new[name])}")
            problems.extend(f"{where}: {what}" for what in _backwards(kind, old, new))
            if kind == "coordinator" and key == "Leader" and new.get("recordVersionNumber") == \
                    old.get("recordVersionNumber") and new != old:
                problems.append(f"{where}: changed without a new recordVersionNumber")
    return problems


def may_go(key: str, item: Item) -> bool:
    """The coordinator items a worker deletes by protocol: the lock on release, and a
    ``TableMigration3.5`` still at INIT, which a 3.5 leader (kcl-mp or Java) deletes when a lease
    owner appears that does not report support for the single table (a Java 3.1.3 worker)."""
    return key == "Leader" or (key == "TableMigration3.5"
                               and item.get("tm", {}).get("S") == "TABLE_MIGRATION_STATUS_INIT")


def lock_problems(shot: Snapshot) -> list[str]:
    """``lock_shape`` of the lock item in each coordinator-state table of one snapshot."""
    return [f"{table} Leader: {what}" for table, items in shot.items()
            if table_kind(table) == "coordinator" and items and "Leader" in items
            for what in lock_shape(items["Leader"])]


def lock_shape(item: Item) -> list[str]:
    """What is wrong with a lock item: an attribute of LOCK_SHAPE missing or of another type,
    a leaseDuration that is not a whole number of ms."""
    found = [f"{name} missing or not {typ} ({_show(item.get(name, {}))})"
             for name, typ in LOCK_SHAPE.items() if set(item.get(name, {})) != {typ}]
    duration = item.get("leaseDuration", {}).get("S", "0")
    if not (isinstance(duration, str) and duration.isdigit() and int(duration) > 0):
        found.append(f"leaseDuration {duration!r} is not a duration in ms")
    return found


def _rules(kind: str, key: str) -> tuple[frozenset[str], frozenset[str]]:
    """(attributes that may change, attributes that may go away) for one item."""
    if kind == "leases":
        return LEASE_MUTABLE, LEASE_MAY_DROP
    if kind == "metrics":
        return METRICS_MUTABLE, frozenset()
    if key == "Leader":
        return LOCK_MUTABLE, frozenset({"isReleased", "data"})
    return frozenset(), frozenset()  # Migration3.0 and the rest: nobody flips in this fleet


def _backwards(kind: str, old: Item, new: Item) -> list[str]:
    """Counters and positions that went back (a retyped one is reported as retyped)."""
    def both(name: str, typ: str) -> bool:
        return typ in old.get(name, {}) and typ in new.get(name, {})

    found = []
    if kind == "leases":
        if both("leaseCounter", "N") and int(new["leaseCounter"]["N"]) < int(old["leaseCounter"]["N"]):
            found.append(f"leaseCounter went back {old['leaseCounter']['N']} -> {new['leaseCounter']['N']}")
        if both("checkpoint", "S") and _checkpoint(new) < _checkpoint(old):
            found.append(f"checkpoint went back {_checkpoint(old)} -> {_checkpoint(new)}")
    if kind == "metrics" and both("lut", "N") and float(new["lut"]["N"]) < float(old["lut"]["N"]):
        found.append(f"lut went back {old['lut']['N']} -> {new['lut']['N']}")
    return found


def _checkpoint(item: Item) -> ExtendedSequenceNumber:
    return ExtendedSequenceNumber(item["checkpoint"]["S"], int(item.get("checkpointSubSequenceNumber", {"N": "0"})["N"]))


def _show(value: dict[str, Any]) -> str:
    return json.dumps(value, sort_keys=True)[:120]


# -- the lease timeline --------------------------------------------------------------------


def holdings(history: dict[str, list], end: float) -> dict[str, list[tuple[float, float, str | None]]]:
    """Per shard, (from, to, owner) for each stretch one owner held it (None: nobody)."""
    spans: dict[str, list[tuple[float, float, str | None]]] = {}
    for shard, changes in history.items():
        owners = [(at, owner) for at, owner, _ in changes]
        merged = [c for i, c in enumerate(owners) if i == 0 or c[1] != owners[i - 1][1]]
        spans[shard] = [(at, merged[i + 1][0] if i + 1 < len(merged) else end, owner)
                        for i, (at, owner) in enumerate(merged)]
    return spans


def owners_at(history: dict[str, list], at: float) -> dict[str, str | None]:
    """Who held each shard at ``at`` as the monitor saw it."""
    return {shard: ([o for t, o, _ in changes if t <= at] or [None])[-1] for shard, changes in history.items()}


def moved_back(history: dict[str, list], since: float, until: float, within_s: float) -> list[str]:
    """Leases that went from A to B and back to A within ``within_s``, the return in [since, until]."""
    found = []
    for shard, spans in holdings(history, until).items():
        held = [(at, owner) for at, _, owner in spans if owner is not None]
        for (_, a), (left_at, b), (back_at, c) in zip(held, held[1:], held[2:]):
            if a == c != b and since <= back_at <= until and back_at - left_at <= within_s:
                found.append(f"{shard}: {a} -> {b} -> {a} ({back_at - left_at:.1f} s apart)")
    return found


def moves(history: dict[str, list], since: float, until: float) -> list[str]:
    """Every change of a lease's owner to another worker in [since, until]."""
    found: list[str] = []
    for shard, spans in holdings(history, until).items():
        held = [(at, owner) for at, _, owner in spans if owner is not None]
        found.extend(f"{shard}: {a} -> {b}" for (_, a), (at, b) in pairwise(held) if a != b and since <= at <= until)
    return found


# -- what the processors recorded ----------------------------------------------------------


def processors(entries: list[dict]) -> dict[int, dict]:
    """Per recorder child: its shard, host, initialize time and position (None: a sentinel or
    none), and its records' (seq, sub) and stamps."""
    found: dict[int, dict] = {}
    for e in entries:
        child = found.setdefault(e["_pid"], {"shard": e["_shard"], "host": None, "at": None, "start": None,
                                             "records": [], "stamps": []})
        if e.get("event") == "initialize":
            seq = e["seq"]
            child.update(host=e["host"], at=e["at"],
                         start=ExtendedSequenceNumber(seq, int(e.get("sub") or 0)) if str(seq).isdigit() else None)
        elif "event" not in e:
            child["records"].append(ExtendedSequenceNumber(e["seq"], int(e["sub"] or 0)))
            child["stamps"].append(e["at"])
    return found


def processing_overlap(entries: list[dict]) -> tuple[float, str]:
    """The longest time two hosts both processed records of one shard, and the shard."""
    spans = defaultdict(list)
    for child in processors(entries).values():
        if child["stamps"]:
            spans[child["shard"]].append((min(child["stamps"]), max(child["stamps"]), child["host"]))
    worst, where = 0.0, "none"
    for shard, runs in spans.items():
        for i, (a0, a1, ha) in enumerate(runs):
            for b0, b1, hb in runs[i + 1:]:
                if ha != hb and min(a1, b1) - max(a0, b0) > worst:
                    worst, where = min(a1, b1) - max(a0, b0), shard
    return worst, where


@dataclass(frozen=True)
class Resume:
    """A processor that started on a shard another host ran before it."""
    shard: str
    previous: str
    host: str
    at: float
    checkpoint: str  # the newest checkpoint any processor of the shard had written by then
    first: str | None  # the first record it got
    next_put: str | None  # the first record put after that checkpoint

    @property
    def ok(self) -> bool:
        """Nothing skipped: its first record is at or before the record after the checkpoint."""
        if self.first is None or self.next_put is None:
            return True
        return _esn(self.first) <= _esn(self.next_put)


def _esn(text: str) -> ExtendedSequenceNumber:
    seq, _, sub = text.partition("/")
    return ExtendedSequenceNumber(seq, int(sub or 0))


def resumes(entries: list[dict], puts: list[list]) -> list[Resume]:
    children = sorted((c for c in processors(entries).values() if c["at"] is not None), key=lambda c: c["at"])
    checkpoints = defaultdict(list)  # shard -> (at, position) of each successful checkpoint
    for e in entries:
        if e.get("event") == "checkpoint" and e["error"] is None and e["seq"] is not None:
            checkpoints[e["_shard"]].append((e["at"], ExtendedSequenceNumber(e["seq"], int(e["sub"] or 0))))
    put_at = defaultdict(list)
    for _, shard, seq, sub in puts:
        put_at[shard].append(ExtendedSequenceNumber(seq, int(sub)))
    found = []
    last_host: dict[str, str] = {}
    reached: dict[str, ExtendedSequenceNumber] = {}  # shard -> the newest record an earlier processor got
    for child in children:
        shard, previous = child["shard"], last_host.get(child["shard"])
        last_host[shard] = child["host"]
        before = reached.get(shard)
        if child["records"]:
            reached[shard] = max(child["records"] + ([before] if before else []))
        if previous is None or previous == child["host"]:
            continue
        done = [p for at, p in checkpoints[shard] if at <= child["at"]]
        mark = max(done) if done else None
        begun = child["start"]  # the lease's checkpoint when it started
        if begun is not None and before is not None and (mark is None or begun > mark) and begun <= before:
            # a checkpoint the previous daemon wrote but its processor never heard back about (the
            # daemon was killed after the write): a position a processor had reached, so it counts
            mark = begun
        after = [p for p in put_at[shard] if mark is None or p > mark]
        first = min(child["records"]) if child["records"] else None
        found.append(Resume(shard, previous, child["host"], child["at"], _text(mark) if mark else "TRIM_HORIZON",
                            _text(first) if first else None, _text(min(after)) if after else None))
    return found


def redelivered(entries: list[dict]) -> list[str]:
    """Each record delivered more than once that at-least-once does not excuse: every delivery but
    the last must be by a processor that never checkpointed at or past the record (it was killed,
    or lost its lease, before it did), so a record checkpointed is never delivered again.

    E.g. record 5 of shard s delivered by processor 1 and then by processor 2 is excused if 1 never
    wrote a checkpoint at 5 or beyond (nor SHARD_END); a finding otherwise.
    """
    reached: dict[int, ExtendedSequenceNumber | None] = {}  # pid -> its furthest checkpoint (None: SHARD_END)
    for e in entries:
        if e.get("event") == "checkpoint" and e["error"] is None:
            at = None if e["seq"] is None else ExtendedSequenceNumber(e["seq"], int(e["sub"] or 0))
            before = reached.get(e["_pid"], ExtendedSequenceNumber("0", 0))
            reached[e["_pid"]] = None if at is None or before is None else max(at, before)
    deliveries = defaultdict(list)
    for e in sorted(records_only(entries), key=lambda e: e["at"]):
        deliveries[e["_shard"], e["seq"], int(e["sub"] or 0)].append(e["_pid"])
    found = []
    for (shard, seq, sub), pids in deliveries.items():
        for pid in pids[:-1]:
            if pid in reached and (reached[pid] is None or reached[pid] >= ExtendedSequenceNumber(seq, sub)):
                found.append(f"{shard} {seq}/{sub}: delivered again after processor {pid} checkpointed it")
    return found


def _text(position: ExtendedSequenceNumber) -> str:
    return f"{position.sequence_number}/{position.sub_sequence_number}"


def delivered_by(entries: list[dict]) -> dict[str, int]:
    """Records each host's processors got."""
    counts: dict[str, int] = defaultdict(int)
    for child in processors(entries).values():
        counts[child["host"]] += len(child["records"])
    return dict(counts)


# -- the hosts' logs -----------------------------------------------------------------------

# The kcl-mp hosts log JSON (``--log-format json``); these read their lease events
# (kcl_mp/logs.py ``LeaseEvent``). A 3.x follower writes none of a 2.x taker's own acquisitions
# (taken, stolen, asked for; a rescue counts too). One taking by force what the leader handed it
# when the old owner died (``lease_forced``) takes what it was given, not what it chose.
SELF_ACQUIRED = {e.value for e in (LeaseEvent.TAKEN, LeaseEvent.RESCUED, LeaseEvent.STOLEN, LeaseEvent.ASKED)}


def _events(log: str, kinds: set[str], since: float, until: float) -> list[tuple[float, dict]]:
    return [(at, entry) for at, entry in log_lines(log) if entry.get("event") in kinds and since <= at <= until]


def self_acquired(log: str, since: float, until: float) -> list[str]:
    """The leases a kcl-mp log says the host took, stole or asked for in [since, until]."""
    return [entry["lease"] for _, entry in _events(log, SELF_ACQUIRED, since, until)]


def rescues(log: str, since: float, until: float) -> list[str]:
    """The leases a kcl-mp follower took from a dead owner in [since, until]: rescued
    (``FleetRole.rescues``: nobody renewed or assigned them for failover + one assignment
    interval while the lock it reads is a long one) or forced (a dying leader had just handed
    them to it and their old owner never let go: ``supervisor/handoffs.py``)."""
    kinds = {LeaseEvent.RESCUED.value, LeaseEvent.FORCED.value}
    return [entry["lease"] for _, entry in _events(log, kinds, since, until)]


def kclmp_assigned(log: str, since: float, until: float) -> list[tuple[float, str, str | None, str]]:
    """(time, lease, from or None, to) for each move a kcl-mp leader logged in [since, until]
    (fleet/role.py ``_write``: an assignment or a handoff started)."""
    moves = {LeaseEvent.ASSIGNED.value, LeaseEvent.HANDOFF_STARTED.value}
    return [(at, entry["lease"], entry.get("from"), entry["to"]) for at, entry in _events(log, moves, since, until)]


# The Java lease refresher's lines for a lease assigned outright and for a graceful handoff
# started. A worker finishing a handoff it was asked for also "assigns" the lease, from the
# new owner to the new owner: only a change of owner is a leader's assignment.
JAVA_ASSIGNED = re.compile(r"Assigned lease (\S+) ownership from (\S+) to (\S+) with"
                           r"|Initiated graceful lease handoff for lease (\S+) from (\S+) to (\S+?)\.")
# The Java follower's lease discoverer: the leases it found assigned to it.
JAVA_DISCOVERED = re.compile(r"New leases assigned to worker : (\S+), count : (\d+)")


def java_assigned(log: str) -> list[tuple[str, str, str]]:
    """(lease, from, to) for each assignment or handoff a Java leader wrote ("null": from nobody)."""
    found = []
    for match in JAVA_ASSIGNED.finditer(log):
        lease, old, new = match.group(1, 2, 3) if match.group(1) else match.group(4, 5, 6)
        if old != new:
            found.append((lease, old, new))
    return found


def java_discovered(log: str) -> int:
    """How many leases a Java worker found assigned to it by a leader, over its whole log."""
    return sum(int(count) for _, count in JAVA_DISCOVERED.findall(log))


JAVA_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+) (.*)$", re.MULTILINE)


def java_logged(log: str, text: str, since: float, until: float) -> list[float]:
    """When a Java daemon's log has a line containing ``text``, in [since, until]."""
    found = []
    for stamp, line in JAVA_LINE.findall(log):
        at = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()
        if text in line and since <= at <= until:
            found.append(at)
    return found


# -- all of it -----------------------------------------------------------------------------


@dataclass
class Findings:
    """One run's evidence: the runner's raw result and what the functions above make of it."""
    result: dict[str, Any]
    out: Path
    entries: list[dict] = field(repr=False)

    @property
    def failure(self) -> str | None:
        return self.result["failure"]

    @property
    def phases(self) -> dict[str, float]:
        return self.result["phases"]

    @property
    def history(self) -> dict[str, list]:
        return self.result["history"]

    def leaders(self) -> list[tuple[float, str | None]]:
        return [(at, owner) for at, owner in self.result["leaders"]]

    def leader_at(self, at: float) -> str | None:
        return ([o for t, o in self.leaders() if t <= at] or [None])[-1]

    def owners_at(self, at: float) -> dict[str, str | None]:
        return owners_at(self.history, at)

    def count_at(self, at: float, worker: str) -> int:
        return sum(1 for owner in self.owners_at(at).values() if owner == worker)

    def undelivered(self) -> int:
        got = {(e["_shard"], e["seq"], e["sub"]) for e in self.entries if "event" not in e}
        return len({(shard, seq, sub) for _, shard, seq, sub in self.result["puts"]} - got)

    def snapshot_problems(self) -> dict[str, list[str]]:
        """Each pair of consecutive snapshots (phase boundaries, in order) and what was lost."""
        shots = self.result["snapshots"]
        names = list(shots)
        first = {f"{names[0]} (the lock)": lock_problems(shots[names[0]])} if names else {}
        return first | {f"{a} -> {b}": compare_snapshots(shots[a], shots[b]) for a, b in pairwise(names)}

    def log(self, name: str) -> str:
        path = self.out / name
        return path.read_text(errors="replace") if path.exists() else ""

    def tails(self, chars: int = 2500) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-chars:]}"
                         for p in sorted(self.out.glob("*.log")) if p.name != "moto.log")


def findings(out: Path) -> Findings:
    return Findings(json.loads((out / "result.json").read_text()), out, recorded(out / "records"))

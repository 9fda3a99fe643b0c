"""``kcl-mp leases``: the lease table as an operator wants to read it.

    kcl-mp leases --properties app.properties [--json] [--wait SECONDS]

Leases per worker and the spread; each lease's owner, counter, checkpoint, parents and
state. The table holds no timestamps, so (like a worker) the command times the counters
itself: it scans twice, failoverTimeMillis apart by default, and calls a lease expired
when its counter did not move in between. ``--wait 0`` scans once and says that expiry
was not measured. ``summarize`` is pure; ``main`` does the I/O.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Sequence

import orjson

from .config import load_config
from .credentials import client as aws_client
from .errors import KclMpError
from .lease import Lease
from .lease_table import LeaseTable
from .shard_sync import unfinished_parents


@dataclass(frozen=True)
class LeaseRow:
    key: str
    owner: str | None
    counter: int
    checkpoint: str | None
    parents: tuple[str, ...]
    state: str  # held (maybe waiting for its parents), unowned, expired, finished (SHARD_END), handoff


@dataclass(frozen=True)
class Report:
    table: str
    watched_s: float  # 0: expiry not measured
    workers: dict[str, int]  # owner -> active leases (expired ones excluded), most loaded first
    spread: int | None
    unowned: int
    expired: int
    finished: int
    handoffs: int
    leases: tuple[LeaseRow, ...]


def summarize(table: str, before: Sequence[Lease], after: Sequence[Lease], watched_s: float,
              failover_s: float) -> Report:
    """One report from two scans ``watched_s`` apart (the same scan twice when 0)."""
    counters = {lease.key: lease.counter for lease in before}
    measured = watched_s >= failover_s
    by_key = {lease.key: lease for lease in after}
    rows = []
    for lease in sorted(after, key=lambda item: item.key):
        if lease.is_shard_end:
            state = "finished"
        elif not lease.owner:
            state = "unowned"
        elif measured and counters.get(lease.key) == lease.counter:
            state = "expired"
        elif lease.checkpoint_owner:
            state = f"handoff {lease.checkpoint_owner} -> {lease.owner}"
        elif unfinished_parents(lease, by_key):
            state = "held, waits for its parents"
        else:
            state = "held"
        rows.append(LeaseRow(lease.key, lease.owner, lease.counter,
                             None if lease.checkpoint is None else str(lease.checkpoint),
                             lease.parent_shard_ids, state))
    counts = Counter(row.owner for row in rows if row.owner and row.state not in ("finished", "expired"))
    workers = dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))
    states = Counter("handoff" if row.state.startswith("handoff") else row.state for row in rows)
    return Report(
        table=table,
        watched_s=watched_s if measured else 0.0,
        workers=workers,
        spread=(max(counts.values()) - min(counts.values())) if counts else None,
        unowned=states["unowned"],
        expired=states["expired"],
        finished=states["finished"],
        handoffs=states["handoff"],
        leases=tuple(rows),
    )


def render(report: Report) -> str:
    active = len(report.leases) - report.finished
    spread = "-" if report.spread is None else str(report.spread)
    lines = [f"lease table {report.table}: {len(report.leases)} leases ({active} active, {report.finished} "
             f"finished) on {len(report.workers)} workers; spread {spread}"]
    if report.workers:
        lines.append(f"{'worker':<40} {'leases':>6}")
        lines.extend(f"{owner:<40} {count:>6}" for owner, count in report.workers.items())
    expired = str(report.expired) if report.watched_s else "not measured (--wait 0)"
    lines.append(f"unowned: {report.unowned}   expired: {expired}   handoffs in progress: {report.handoffs}")
    lines.append(f"{'lease':<28} {'owner':<28} {'counter':>8}  {'checkpoint':<28} {'parents':<28} state")
    for row in report.leases:
        lines.append(f"{row.key:<28} {row.owner or '-':<28} {row.counter:>8}  {row.checkpoint or '-':<28} "
                     f"{','.join(row.parents) or '-':<28} {row.state}")
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="kcl-mp leases", description="Show an application's lease table.")
    p.add_argument("--properties", "--properties-file", "-p", dest="properties", metavar="FILE", required=True)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--wait", type=float, metavar="SECONDS",
                   help="watch the counters this long to find expired leases (default: failoverTimeMillis; 0: do not)")
    args = p.parse_args(argv)
    try:
        config = load_config(args.properties)
        table = LeaseTable(aws_client("dynamodb", config.dynamodb), config.lease.table_name)
        failover_s = config.lease.failover_time_ms / 1000.0
        wait_s = failover_s + 0.1 if args.wait is None else max(0.0, args.wait)
        before = table.list_leases()
        after = before
        if wait_s > 0:
            print(f"watching lease counters for {wait_s:.1f} s to find expired leases (--wait 0 skips this)",
                  file=sys.stderr, flush=True)
            time.sleep(wait_s)
            after = table.list_leases()
        report = summarize(config.lease.table_name, before, after, wait_s, failover_s)
    except KclMpError as exc:
        from .cli import fail

        return fail(exc)
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(asdict(report), option=orjson.OPT_INDENT_2) + b"\n")
    else:
        print(render(report))
    return 0

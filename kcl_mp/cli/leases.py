"""``kcl-mp leases``: the lease table as an operator wants to read it.

    kcl-mp leases --properties app.properties [--json] [--wait SECONDS]
    kcl-mp leases --properties app.properties --watch [SECONDS] [--count N]
    kcl-mp leases --properties app.properties --embedded      (a running kcl-mp --embedded)
    kcl-mp leases --properties app.properties --endpoint URL  (any emulator: moto, kinesis-mock)

Leases per worker and the spread; each lease's owner, counter, checkpoint, parents and
state (a lease a host gave up after kclmp.processorMaxRestarts failures says by whom and
until when it is left alone). It prints at once. The table holds no timestamps, so (like a
worker) the command times the counters itself to find expired leases: ``--wait SECONDS``
scans twice that far apart (failoverTimeMillis is enough) and calls a lease expired when
its counter did not move; without it, expiry is not measured. ``--embedded`` reads the
endpoint a running ``kcl-mp --embedded`` of the same application wrote
(``embedded.endpoint_file``). ``--watch`` redraws the view every few seconds for a person at a
terminal, marking what changed since the last view (a new owner, a checkpoint that moved);
expiry is measured once it has watched for failoverTimeMillis. Rows of the table that are
not leases (KCL 3.5's leader lock, client version, table migration and worker metrics)
are listed apart, never counted as leases (``others``, in JSON too), each with why it is not
one (a value kcl-mp cannot read, a key that names no shard). Every text line is shown with
its control characters escaped as ``repr`` writes them (``logs.escape``, as in text logs):
a key or owner holding a newline or an ESC sequence cannot forge a line or reach the
terminal. A multi-stream table (Java's ``account:stream:epoch:shardId`` keys) gets a line per stream:
its leases, finished ones, and its active leases per worker. ``summarize`` and ``changes`` are pure;
``main`` does the I/O.
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from urllib.parse import urlsplit

import orjson

from kcl_mp import embedded
from kcl_mp.aws.clients import client as aws_client
from kcl_mp.config import Config, load_config
from kcl_mp.errors import EXIT_OK, ConfigError, KclMpError
from kcl_mp.leases.balance import is_expired, observe
from kcl_mp.leases.lease import RELEASED_UNTIL, Lease, released_by
from kcl_mp.leases.multi_stream import split_key
from kcl_mp.leases.rows import OtherRow
from kcl_mp.leases.shard_sync import unfinished_parents
from kcl_mp.leases.table import LeaseTable
from kcl_mp.logs import escape


@dataclass(frozen=True)
class LeaseRow:
    key: str
    owner: str | None
    counter: int
    checkpoint: str | None
    parents: tuple[str, ...]
    state: str  # held (maybe waiting for its parents), unowned, expired, finished (SHARD_END), handoff


@dataclass(frozen=True)
class OtherLine:
    """A row that is not a lease: its key, its entityType, what it holds."""

    key: str
    entity_type: str | None
    summary: str
    why: str  # why it is not a lease (lease.not_a_lease)


@dataclass(frozen=True)
class StreamLine:
    """A multi-stream table's leases of one stream (its rows are its keys: account:name:epoch:shardId)."""

    name: str
    leases: int
    finished: int
    workers: dict[str, int]  # owner -> its active leases of this stream, most first


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
    others: tuple[OtherLine, ...] = ()
    streams: tuple[StreamLine, ...] = ()  # a multi-stream table's, by name; () for one stream

    def as_json(self) -> dict:
        """The report as JSON-ready data (``streams`` only for a multi-stream table)."""
        data = asdict(self)
        if not self.streams:
            del data["streams"]
        return data


def summarize(table: str, before: Sequence[Lease], after: Sequence[Lease], watched_s: float,
              failover_s: float, others: Sequence[OtherRow] = (), now_ms: int | None = None) -> Report:
    """One report from two scans ``watched_s`` apart (the same scan twice when 0)."""
    counters = {lease.key: lease.counter for lease in before}
    measured = watched_s >= failover_s
    stale = {lease.key for lease in after if measured and counters.get(lease.key) == lease.counter}
    return report(table, after, stale, watched_s if measured else 0.0, others, now_ms)


def report(table: str, leases: Sequence[Lease], expired: set[str], watched_s: float,
           others: Sequence[OtherRow] = (), now_ms: int | None = None) -> Report:
    """The report of one scan; ``expired``: owned leases whose counter stood still for
    failoverTimeMillis (``watched_s`` 0: not measured); ``others``: its rows that are not leases;
    ``now_ms``: the wall clock, to show which unowned leases a host gave up and leaves alone."""
    by_key = {lease.key: lease for lease in leases}
    rows = []
    for lease in sorted(leases, key=lambda item: item.key):
        if lease.is_shard_end:
            state = "finished"
        elif not lease.owner:
            by = None if now_ms is None else released_by(lease, now_ms)
            state = "unowned" if by is None else (
                f"unowned, released by {by} after repeated processor failures, left alone by it until "
                f"{datetime.fromtimestamp(int(lease.extra[RELEASED_UNTIL]['N']) / 1000):%H:%M:%S}")
        elif lease.key in expired:
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
    workers = _most_first(counts)
    states = Counter(row.state.split(" ")[0].rstrip(",") for row in rows)
    return Report(
        table=table,
        watched_s=watched_s,
        workers=workers,
        spread=(max(counts.values()) - min(counts.values())) if counts else None,
        unowned=states["unowned"],
        expired=states["expired"],
        finished=states["finished"],
        handoffs=states["handoff"],
        leases=tuple(rows),
        others=tuple(OtherLine(row.key, row.entity_type, row.summary(), row.why)
                     for row in sorted(others, key=lambda row: row.key)),
        streams=_streams(rows),
    )


def _most_first(counts: Counter) -> dict[str, int]:
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def _streams(rows: Sequence[LeaseRow]) -> tuple[StreamLine, ...]:
    """Each stream's leases in a multi-stream table (``leases.multi_stream`` keys); () for one stream."""
    by_stream: dict[str, list[LeaseRow]] = {}
    for row in rows:
        if (split := split_key(row.key)) is not None:
            by_stream.setdefault(split[0].name, []).append(row)
    return tuple(StreamLine(name, len(mine), sum(row.state == "finished" for row in mine),
                            _most_first(Counter(row.owner for row in mine
                                                if row.owner and row.state not in ("finished", "expired"))))
                 for name, mine in sorted(by_stream.items()))


def changes(before: Report | None, after: Report) -> dict[str, str]:
    """What moved between two views, per lease: for the ``--watch`` display."""
    if before is None:
        return {}
    rows = {row.key: row for row in before.leases}
    out = {}
    for row in after.leases:
        old = rows.get(row.key)
        if old is None:
            out[row.key] = "new lease"
        elif old.owner != row.owner:
            out[row.key] = f"owner was {old.owner or '-'}"
        elif old.state != row.state:
            out[row.key] = f"was {old.state}"
        elif old.checkpoint != row.checkpoint:
            out[row.key] = "checkpointed"
    for key in rows.keys() - {row.key for row in after.leases}:
        out[key] = "deleted"
    return out


STATES = ("states: held (its owner renews it; 'waits for its parents' until they reach SHARD_END), unowned "
          "(released, or never taken; 'released by' a host after repeated processor failures), expired (its counter "
          "stood still for failoverTimeMillis), finished (SHARD_END), handoff old -> new")


def render(report: Report, moved: Mapping[str, str] | None = None) -> str:
    active = len(report.leases) - report.finished
    spread = "-" if report.spread is None else str(report.spread)
    lines = [f"lease table {report.table}: {len(report.leases)} leases ({active} active, {report.finished} "
             f"finished) on {len(report.workers)} workers; spread {spread}"]
    if report.workers:
        lines.append(f"{'worker':<40} {'leases':>6}")
        lines.extend(f"{owner:<40} {count:>6}" for owner, count in report.workers.items())
    if report.streams:
        lines.append(f"{'stream':<40} {'leases':>6} {'finished':>8}  workers (active leases)")
        lines.extend(f"{line.name:<40} {line.leases:>6} {line.finished:>8}  "
                     + (", ".join(f"{owner} {count}" for owner, count in line.workers.items()) or "-")
                     for line in report.streams)
    expired = str(report.expired) if report.watched_s else "not measured (--wait SECONDS measures it)"
    lines.append(f"unowned: {report.unowned}   expired: {expired}   handoffs in progress: {report.handoffs}")
    lines.append(STATES)
    lines.append(f"{'lease':<28} {'owner':<28} {'counter':>8}  {'checkpoint':<28} {'parents':<28} state")
    for row in report.leases:
        note = f"   <- {moved[row.key]}" if moved and row.key in moved else ""
        lines.append(f"{row.key:<28} {row.owner or '-':<28} {row.counter:>8}  {row.checkpoint or '-':<28} "
                     f"{','.join(row.parents) or '-':<28} {row.state}{note}")
    for key in sorted(k for k, why in (moved or {}).items() if why == "deleted"):
        lines.append(f"{key:<28} (deleted since the last view)")
    if report.others:
        lines.append(f"{len(report.others)} rows that are not leases (left alone):")
        lines.append(f"{'key':<28} {'entityType':<28} what")
        lines.extend(f"{row.key:<28} {row.entity_type or '-':<28} {row.summary}" for row in report.others)
    return "\n".join(map(escape, lines))



def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="kcl-mp leases", description="Show an application's lease table.",
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="examples:\n  kcl-mp leases -p app.properties\n"
                                       "  kcl-mp leases -p app.properties --json --wait 10\n"
                                       "  kcl-mp leases -p app.properties --watch 5\n"
                                       "  kcl-mp leases -p examples/demo/app.properties --embedded --watch")
    p.add_argument("--properties", "--properties-file", "-p", dest="properties", metavar="FILE", required=True)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                   help="watch the counters this long to find expired leases (failoverTimeMillis is enough; "
                        "default 0: print at once, expiry not measured)")
    p.add_argument("--watch", type=float, nargs="?", const=2.0, metavar="SECONDS",
                   help="redraw the view every SECONDS (default 2) until Ctrl-C, marking what changed")
    p.add_argument("--count", type=int, metavar="N", help="with --watch: stop after N views")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--embedded", action="store_true",
                       help="read the table of the running 'kcl-mp --embedded' of this application")
    where.add_argument("--endpoint", metavar="URL",
                       help="read the table at this emulator (DynamoDB endpoint URL), with throwaway credentials")
    args = p.parse_args(argv)
    if args.watch is not None and args.watch <= 0:
        p.error("--watch: the interval must be more than 0 seconds")
    config = load_config(args.properties, overrides=_emulator(args))
    table = LeaseTable(aws_client("dynamodb", config.dynamodb), config.lease.table_name, config.stream_names)
    if args.watch is not None:
        return watch(config, table, args.watch, args.count, args.json)
    failover_s = config.lease.failover_time_ms / 1000.0
    wait_s = max(0.0, args.wait)
    before = table.scan()
    after = before
    if wait_s > 0:
        print(f"watching lease counters for {wait_s:.1f} s to find expired leases",
              file=sys.stderr, flush=True)
        time.sleep(wait_s)
        after = table.scan()
    shown = summarize(config.lease.table_name, before.leases, after.leases, wait_s, failover_s, after.others,
                      int(time.time() * 1000))
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(shown.as_json(), option=orjson.OPT_INDENT_2) + b"\n")
    else:
        print(render(shown))
    return EXIT_OK


def _emulator(args: argparse.Namespace) -> dict[str, str]:
    """The overrides that point the command at an emulator (``--embedded``, ``--endpoint``), or none."""
    if not (args.embedded or args.endpoint):
        return {}
    url = args.endpoint
    if args.embedded:
        name = load_config(args.properties).application_name
        path = embedded.endpoint_file(name)
        try:
            url = path.read_text().strip()
        except FileNotFoundError:
            raise ConfigError(f"--embedded: no kcl-mp --embedded is running for applicationName {name} "
                              f"(it writes its endpoint to {path}); start it, or pass --endpoint URL") from None
        parsed = urlsplit(url)
        try:
            socket.create_connection((parsed.hostname or embedded.LOOPBACK, parsed.port or 80), timeout=2).close()
        except OSError:
            raise ConfigError(f"--embedded: {path} names {url}, which does not answer: the kcl-mp --embedded that "
                              "wrote it was killed; start it again, or pass --endpoint URL") from None
    return embedded.embedded_overrides(url)


def watch(config: Config, table: LeaseTable, every_s: float, count: int | None, as_json: bool) -> int:
    """Redraw the view every ``every_s`` (clearing a terminal; one view after another
    otherwise) until Ctrl-C or ``count`` views. A failed scan is shown and retried."""
    failover_s = config.lease.failover_time_ms / 1000.0
    clear = sys.stdout.isatty() and not as_json
    observations: dict = {}
    started = time.monotonic()
    previous: Report | None = None
    views = 0
    try:
        while count is None or views < count:  # ends with Ctrl-C, or after --count views
            if views:
                time.sleep(every_s)
            views += 1
            now = time.monotonic()
            try:
                found = table.scan()
            except KclMpError as exc:
                print(f"{datetime.now():%H:%M:%S} scan failed: {exc}; retrying in {every_s:.0f} s", flush=True)
                continue
            leases = found.leases
            observations = observe(observations, leases, now)
            watched = now - started
            measured = watched >= failover_s
            expired = {lease.key for lease in leases if lease.owner and measured
                       and is_expired(lease, observations.get(lease.key), now, failover_s)}
            current = report(config.lease.table_name, leases, expired, watched if measured else 0.0, found.others,
                             int(time.time() * 1000))
            moved = changes(previous, current)
            previous = current
            if as_json:
                sys.stdout.buffer.write(orjson.dumps({**current.as_json(), "changes": moved}) + b"\n")
                sys.stdout.flush()
                continue
            header = (f"{datetime.now():%H:%M:%S}  every {every_s:g} s, Ctrl-C to stop"
                      + ("" if measured else f"  (expiry measured after {failover_s:.0f} s of watching)"))
            print(("\x1b[H\x1b[2J" if clear else "\n") + header + "\n" + render(current, moved), flush=True)
    except KeyboardInterrupt:
        pass
    return EXIT_OK

"""One host at many shards: kcl-mp beside the Java MultiLangDaemon, what each costs per shard.

    make bench-scale        (= .venv/bin/python bench/scale.py)
    options: --shards 4,16,64,256, --java-max-shards 64, --only kcl-mp|java, --rate 100 (records/s),
             --idle-ms 1000, --slow-idle-ms 3000 --slow-from 128, --settle-s 10, --window-s 30,
             --start-timeout-s 240, --kinesis moto|fast|dynamodb, --records-per-shard 20, --streams 1,
             --out scale.json

Per shard count and daemon: a fresh moto (h2c, in the loopback namespace as bench/daemons.py),
a stream of that many shards holding one record per shard, one host started with the same
properties for both (failoverTimeMillis 10000, idleTimeBetweenReadsInMillis as chosen,
polling, TRIM_HORIZON) and the bench processor (bench/noop_processor.py). Then:

    first record     seconds from the start until every shard's processor got its first record
    idle window      --window-s with no producer: CPU of the daemon's own processes (cores)
    load window      --window-s with a producer at --rate records/s spread over all shards
    delivered        every produced record reached a processor (counted after a drain)
    memory           the peak over both windows, summed over the daemon's own processes
                     (kcl-mp: supervisor, metrics process, shard workers; Java: the JVM): PSS,
                     USS and RSS from /proc/<pid>/smaps_rollup; the processors' PSS apart
    renewals         the largest gap between two changes of a held lease's leaseCounter, as a
                     scan of the lease table every 0.5 s saw them (so +-0.5 s): in the windows
                     (the one still open at the end included), and apart the start-up's (from a
                     take, or Java 3.x's assignment, to the first renewal); and in each how many
                     leases went longer than failoverTimeMillis / 2 unchanged ("late")
    emulator CPU     moto's own CPU in each window: near one core, moto is the bound, not the
                     daemon; sizes from --slow-from up poll every --slow-idle-ms for that reason

With ``--kinesis fast`` (every size) the stream is served by kcl_mp.devtools.fast_kinesis
instead, --records-per-shard records in each shard and no more; the leases stay on moto, which
then serves only DynamoDB (takes and renewals), not every shard's GetRecords. There is no
producer: the source's records are the load, read at start-up; delivered counts them (shards x
records-per-shard), and the "load" window is a second idle one. The source's CPU is printed
beside moto's. The polling schedule stays as on moto (--slow-from), so the sizes compare.

With ``--kinesis dynamodb`` (kcl-mp only: the Java MultiLangDaemon reads no DynamoDB stream)
the stream is a DynamoDB table's, served by the embedded emulator's DynamoDB Streams with that
many open shards; ``--records-per-shard`` items are written at start (keys spread over the
shards by their hash, so every shard gets some), and the producer writes --rate items/s
(BatchWriteItem, 25 a call). The figures compare with the Kinesis ones at the same size.

With ``--streams N`` (kcl-mp only, Kinesis on moto: the Java MultiLangDaemon reads one stream)
the host is one multi-stream application (``streamNames``) of N streams of shards/N shards
each, the producer spreading its records over every shard of every stream; the figures compare
with a single stream of as many shards (issue 32: 50 streams of 4 shards against 200 shards).

It prints a table, then kcl-mp / Java per shard count and per shard (marginal memory between
sizes, idle CPU per shard), and writes the figures as JSON to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import procs
from common import (
    PROCESSOR,
    bench_environment,
    command,
    deliveries,
    enter_namespace,
    properties,
    start_fast_kinesis,
    stop,
    wait_for,
)

FAILOVER_MS = 10_000
SCAN_EVERY_S = 0.5
EMULATOR_BOUND = 0.9  # cores: a busier moto limits what the daemon can do
MB = 1 << 20


@dataclass
class Size:
    daemon: str
    shards: int
    idle_ms: int
    kinesis: str = "moto"  # or "fast": kcl_mp.devtools.fast_kinesis, bounded shards, no producer
    streams: int = 1  # the shards in this many streams of one multi-stream application
    own_processes: int = 0
    pss_mb: float = 0.0
    uss_mb: float = 0.0
    rss_mb: float = 0.0
    processors: int = 0
    processors_pss_mb: float = 0.0
    cpu_idle: float = 0.0  # cores
    cpu_load: float = 0.0
    emulator_idle: float = 0.0
    emulator_load: float = 0.0
    source_idle: float | None = None  # fast_kinesis' CPU (None: Kinesis on moto)
    source_load: float | None = None
    first_record_s: float | None = None  # None: not every shard within --start-timeout-s
    shards_started: int = 0
    produced: int = 0
    load_rate: float = 0.0  # records/s the producer reached in the load window
    delivered: int = 0
    renewal_gap_s: float = 0.0  # the largest gap that ended in the windows (or was open at the end)
    scan_s: float = 0.0  # the longest lease scan in the windows: a gap's uncertainty (moto answers late when busy)
    startup_gap_s: float = 0.0  # the largest that ended before (the takes, and Java 3.x's assignments)
    late_leases: int = 0  # leases unchanged longer than failoverTimeMillis / 2 in the windows
    late_startup: int = 0  # ... at start-up
    leases_held: int = 0
    notes: list[str] = field(default_factory=list)
    failed: bool = False  # no figures: see notes


class LeaseWatch(threading.Thread):
    """Scans the lease table every SCAN_EVERY_S; per held lease, the longest time its
    leaseCounter stayed the same (from its take, or the last change, to the next change)."""

    def __init__(self, dynamodb: Any, table: str):
        super().__init__(daemon=True)
        self.dynamodb, self.table = dynamodb, table
        self.stop = threading.Event()
        self.seen: dict[str, tuple[str, float, bool]] = {}  # lease -> (counter, since, held)
        self.gaps: list[tuple[float, str, float]] = []  # (when it ended, lease, seconds unchanged)
        self.scans: list[tuple[float, float]] = []  # (when a scan ended, how long it took)

    def run(self) -> None:
        for _ in range(10_000_000):  # bounded by stop
            if self.stop.wait(SCAN_EVERY_S):
                return
            began = time.time()
            try:
                items = self._scan()
            except Exception:
                continue  # the table may not exist yet
            now = time.time()
            self.scans.append((now, now - began))
            for item in items:
                if "leaseKey" not in item or "leaseCounter" not in item:
                    continue
                key, counter = item["leaseKey"]["S"], item["leaseCounter"]["N"]
                held = bool(item.get("leaseOwner", {}).get("S"))
                last = self.seen.get(key)
                if last is None or last[0] != counter or last[2] != held:
                    if last is not None and last[2]:
                        self.gaps.append((now, key, now - last[1]))
                    self.seen[key] = (counter, now, held)

    def _scan(self) -> list[dict]:
        items, start = [], None
        for _ in range(1000):  # pages
            page = self.dynamodb.scan(TableName=self.table, ConsistentRead=True,
                                      **({"ExclusiveStartKey": start} if start else {}))
            items.extend(page["Items"])
            start = page.get("LastEvaluatedKey")
            if not start:
                break
        return items

    def finish(self) -> list[tuple[float, str, float]]:
        """Stop; every gap of a held lease, those still open at the end included."""
        self.stop.set()
        self.join(30)
        now = time.time()
        return self.gaps + [(now, key, now - since) for key, (_, since, held) in self.seen.items() if held]


class Producer(threading.Thread):
    """Calls ``put(first, count)`` for ``rate`` records/s, in a batch every 0.1 s; counts what
    the service accepted (``put`` returns it)."""

    def __init__(self, put: Callable[[int, int], int], rate: int):
        super().__init__(daemon=True)
        self._put, self.rate = put, rate
        self.stop = threading.Event()
        self.put = 0
        self.errors: list[BaseException] = []

    def run(self) -> None:
        began = time.monotonic()
        for tick in range(10_000_000):  # bounded by stop
            due = round(self.rate * (tick + 1) / 10) - round(self.rate * tick / 10)
            try:
                self.put += self._put(self.put, due)
            except Exception as exc:  # reported by the run
                self.errors.append(exc)
                return
            if self.stop.wait(max(0.0, began + (tick + 1) / 10 - time.monotonic())):
                return


def put_spread(kinesis: Any, targets: list[tuple[str, str]], first: int, count: int) -> int:
    """Put ``count`` 100-byte records, record n to the shard ``targets[n mod len(targets)]``
    names (its stream and starting hash key), one PutRecords a stream; retries the entries
    Kinesis refused (at most 20 times)."""
    for stream in dict.fromkeys(stream for stream, _ in targets):
        entries = [{"Data": b"x" * 100, "PartitionKey": str(n), "ExplicitHashKey": targets[n % len(targets)][1]}
                   for n in range(first, first + count) if targets[n % len(targets)][0] == stream]
        for _ in range(20):
            if not entries:
                break
            response = kinesis.put_records(StreamName=stream, Records=entries)
            entries = [e for e, r in zip(entries, response["Records"]) if "ErrorCode" in r]
        else:
            raise RuntimeError(f"put_records kept failing on {stream}")
    return count


def dynamodb_table(url: str, dynamodb: Any, name: str, shards: int) -> str:
    """A table whose stream starts with ``shards`` open shards (the emulator's admin action); its ARN."""
    import urllib.request

    request = urllib.request.Request(url + "/_kclmp/dynamodb-streams", json.dumps(
        {"action": "configure", "shards": shards}).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=30) as answer:
        answer.read()
    table = dynamodb.create_table(
        TableName=name, BillingMode="PAY_PER_REQUEST", KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"})
    return str(table["TableDescription"]["LatestStreamArn"])


def put_items(dynamodb: Any, table: str, first: int, count: int) -> int:
    """Write ``count`` items of 100 bytes (keys first.. first+count-1), 25 a call; retries what
    DynamoDB left unprocessed (at most 20 times a call)."""
    for start in range(first, first + count, 25):
        requests = [{"PutRequest": {"Item": {"pk": {"S": f"item-{n}"}, "data": {"S": "x" * 100}}}}
                    for n in range(start, min(start + 25, first + count))]
        for _ in range(20):
            left = dynamodb.batch_write_item(RequestItems={table: requests}).get("UnprocessedItems", {})
            requests = left.get(table, [])
            if not requests:
                break
        else:
            raise RuntimeError(f"batch_write_item kept leaving items of {table} unprocessed")
    return count


def run_size(daemon: str, shards: int, idle_ms: int, args: argparse.Namespace, work: Path) -> Size:
    import boto3

    from kcl_mp.embedded import ensure_stream, free_port, start_emulator

    name = f"scale-{daemon}-{shards}" + (f"-in-{args.streams}" if args.streams > 1 else "")
    size = Size(daemon, shards, idle_ms, args.kinesis, args.streams)
    out = work / name
    out.mkdir()
    emulator = start_emulator(http2=True, log_path=str(work / f"{name}.moto.log"))
    log = open(work / f"{name}.log", "wb")
    process = watch = source = None
    try:
        kinesis = boto3.client("kinesis", endpoint_url=emulator.url)
        dynamodb = boto3.client("dynamodb", endpoint_url=emulator.url)
        kinesis_url = emulator.url
        stream_keys: dict[str, str | None] = {}
        if args.kinesis == "dynamodb":
            data = f"{name}-data"  # the application's name is the lease table's
            stream_keys = {"streamArn": dynamodb_table(emulator.url, dynamodb, data, shards), "streamName": None}
            size.produced = put_items(dynamodb, data, 0, shards * args.records_per_shard)
        elif args.kinesis == "fast":
            port = free_port()
            source = start_fast_kinesis(port, name, shards, work / f"{name}.source.log",
                                        page_records=min(args.records_per_shard, 10_000),
                                        records_per_shard=args.records_per_shard)
            kinesis_url = f"http://127.0.0.1:{port}"
            size.produced = shards * args.records_per_shard
        else:
            names = [name] if args.streams == 1 else [f"{name}-{i:02d}" for i in range(args.streams)]
            targets = []  # (stream, starting hash key) of every shard
            for stream in names:
                ensure_stream(kinesis, stream, shards // args.streams)
                listed = kinesis.list_shards(StreamName=stream)["Shards"]  # at most 1,000: enough here
                targets += [(stream, s["HashKeyRange"]["StartingHashKey"])
                            for s in sorted(listed, key=lambda s: s["ShardId"])]
            size.produced = put_spread(kinesis, targets, 0, shards)  # one record per shard to start
            if args.streams > 1:  # one multi-stream application
                stream_keys = {"streamName": None, "streamNames": ",".join(names)}
        path = properties(work / f"{name}.properties", emulator.url, name, name, kinesisEndpoint=kinesis_url,
                          retrievalMode="POLLING", failoverTimeMillis=FAILOVER_MS,
                          idleTimeBetweenReadsInMillis=idle_ms, maxRecords=1000, **stream_keys)
        watch = LeaseWatch(dynamodb, name)
        watch.start()
        env = {**os.environ, "BENCH_OUT": str(out), "BENCH_CHECKPOINT_EVERY": "50"}
        started = time.time()
        process = subprocess.Popen(command(daemon, path), stdout=log, stderr=subprocess.STDOUT, env=env,
                                   stdin=subprocess.DEVNULL, cwd=str(work), start_new_session=True)
        meter = procs.Meter(process.pid, (emulator.process.pid, *([source.pid] if source else [])), str(PROCESSOR))

        def all_started() -> bool:
            return len(deliveries(out)) == shards

        if wait_for(all_started, args.start_timeout_s, process, f"{name}: first records"):
            size.first_record_s = max(d.first for d in deliveries(out).values()) - started
        size.shards_started = len(deliveries(out))
        print(f"  {name}: {size.shards_started}/{shards} shards delivered their first record"
              + (f" after {size.first_record_s:.1f} s" if size.first_record_s is not None else
                 f" within {args.start_timeout_s:.0f} s"), flush=True)
        time.sleep(args.settle_s)
        windows_began = time.time()
        size.cpu_idle, size.emulator_idle, *fast = meter.window(args.window_s)
        size.source_idle = fast[0] if fast else None
        producer = (Producer(lambda first, n: put_items(dynamodb, f"{name}-data", first + 1_000_000, n), args.rate)
                    if args.kinesis == "dynamodb" else
                    Producer(lambda first, n: put_spread(kinesis, targets, first, n), args.rate)
                    if source is None else None)
        if producer is not None:
            producer.start()
        size.cpu_load, size.emulator_load, *fast = meter.window(args.window_s)
        size.source_load = fast[0] if fast else None
        if producer is not None:
            producer.stop.set()
            producer.join(30)
            if producer.errors:
                size.notes.append(f"producer: {producer.errors[0]!r}")
            size.produced += producer.put
            size.load_rate = producer.put / args.window_s
            if size.load_rate < 0.9 * args.rate:
                size.notes.append(f"the producer reached only {size.load_rate:.0f} of {args.rate} records/s (moto or "
                                  "the host too busy)")

        def drained() -> bool:
            return sum(d.records for d in deliveries(out).values()) >= size.produced

        wait_for(drained, args.drain_s, process, f"{name}: the last records")
        size.delivered = sum(d.records for d in deliveries(out).values())
        judge_renewals(size, watch.finish(), windows_began)
        size.scan_s = max((took for ended, took in watch.scans if ended >= windows_began), default=0.0)
        if size.scan_s > 1.0:
            size.notes.append(f"a lease scan took up to {size.scan_s:.1f} s (moto answering late): each renewal gap "
                              f"is as the table showed it, the time moto took to apply a renewal included, "
                              f"within +-{size.scan_s:.1f} s")
        peak, theirs = meter.peak, meter.peak_processors
        size.own_processes, size.pss_mb, size.uss_mb, size.rss_mb = peak.processes, peak.pss / MB, peak.uss / MB, \
            peak.rss / MB
        size.processors, size.processors_pss_mb = theirs.processes, theirs.pss / MB
        if max(size.emulator_idle, size.emulator_load) >= EMULATOR_BOUND:
            size.notes.append(f"moto used >= {EMULATOR_BOUND} core: the emulator, not the daemon, may be the bound")
        if max(size.source_idle or 0.0, size.source_load or 0.0) >= EMULATOR_BOUND:
            size.notes.append(f"fast_kinesis used >= {EMULATOR_BOUND} core: it, not the daemon, may be the bound")
    finally:
        if watch is not None:
            watch.stop.set()
        if process is not None:
            stop(process)
        log.close()
        if source is not None:
            stop(source)
        emulator.stop()
    return size


def judge_renewals(size: Size, gaps: list[tuple[float, str, float]], windows_began: float) -> None:
    """The largest gaps and the late leases, in the windows and before them (start-up)."""
    late = FAILOVER_MS / 2000
    startup = [(key, gap) for ended, key, gap in gaps if ended < windows_began]
    steady = [(key, gap) for ended, key, gap in gaps if ended >= windows_began]
    size.leases_held = len({key for _, key, _ in gaps})
    size.renewal_gap_s = max((gap for _, gap in steady), default=0.0)
    size.startup_gap_s = max((gap for _, gap in startup), default=0.0)
    size.late_leases = len({key for key, gap in steady if gap > late})
    size.late_startup = len({key for key, gap in startup if gap > late})


def _opt(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def report(sizes: list[Size]) -> str:
    head = (f"{'shards':>6} {'streams':>7} {'daemon':<7} {'poll ms':>7} {'procs':>5} {'PSS MB':>7} {'USS MB':>7} {'RSS MB':>7} "
            f"{'proc PSS MB':>11} {'CPU idle':>8} {'CPU load':>8} {'moto idle':>9} {'moto load':>9} {'fast idle':>9} "
            f"{'fast load':>9} "
            f"{'renew gap s':>11} {'late':>4} {'start-up gap s':>14} {'late':>4} {'first rec s':>11} {'delivered':>15}")
    lines = [head]
    for s in sizes:
        lines.append(f"{s.shards:>6} {s.streams:>7} {s.daemon:<7} {s.idle_ms:>7} {s.own_processes:>5} {s.pss_mb:>7.0f} "
                     f"{s.uss_mb:>7.0f} {s.rss_mb:>7.0f} {s.processors_pss_mb:>11.0f} {s.cpu_idle:>8.2f} "
                     f"{s.cpu_load:>8.2f} {s.emulator_idle:>9.2f} {s.emulator_load:>9.2f} "
                     f"{_opt(s.source_idle, '.2f'):>9} {_opt(s.source_load, '.2f'):>9} {s.renewal_gap_s:>11.1f} "
                     f"{s.late_leases:>4} {s.startup_gap_s:>14.1f} {s.late_startup:>4} {_opt(s.first_record_s, '.1f'):>11} "
                     f"{f'{s.delivered}/{s.produced}':>15}")
        lines.extend(f"{'':>15}{s.daemon} {s.shards}: {note}" for note in s.notes)
    return "\n".join(lines + ["", *(f"{k}: {v}" for k, v in ratios(sizes).items())])


def ratios(sizes: list[Size]) -> dict[str, str]:
    """kcl-mp / Java at each shard count both ran, and per shard: marginal memory between
    consecutive sizes (PSS slope) and idle CPU per shard."""
    by = {(s.daemon, s.shards): s for s in sizes if not s.failed}
    both = sorted(n for (d, n) in by if d == "kcl-mp" and ("java", n) in by)
    found: dict[str, str] = {}

    def ratio(k: float, j: float) -> str:
        return f"{k / j:.2f}x" if j > 0 else "n/a"

    for n in both:
        k, j = by["kcl-mp", n], by["java", n]
        found[f"{n} shards, kcl-mp/Java"] = (
            f"PSS {ratio(k.pss_mb, j.pss_mb)} (target <= 0.5), summed RSS {ratio(k.rss_mb, j.rss_mb)} "
            f"(target <= 1.0), idle CPU per shard {ratio(k.cpu_idle, j.cpu_idle)} (target <= 0.5), "
            f"CPU under load {ratio(k.cpu_load, j.cpu_load)}")
    for daemon in ("kcl-mp", "java"):
        counts = sorted(n for (d, n) in by if d == daemon)
        for low, high in pairwise(counts):
            slope = (by[daemon, high].pss_mb - by[daemon, low].pss_mb) / (high - low)
            found[f"{daemon} marginal PSS {low}->{high} shards"] = f"{slope:.2f} MB per shard"
        for n in counts:
            found[f"{daemon} idle CPU per shard at {n}"] = f"{1000 * by[daemon, n].cpu_idle / n:.2f} millicores"
    for low, high in pairwise(both):
        k = (by["kcl-mp", high].pss_mb - by["kcl-mp", low].pss_mb) / (high - low)
        j = (by["java", high].pss_mb - by["java", low].pss_mb) / (high - low)
        found[f"marginal PSS {low}->{high}, kcl-mp/Java"] = f"{ratio(k, j)} (target: kcl-mp <= 1 MB per shard)"
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shards", default="4,16,64,256", help="shard counts (default 4,16,64,256)")
    p.add_argument("--java-max-shards", type=int, default=64, help="the Java daemon up to this many (default 64)")
    p.add_argument("--only", choices=("java", "kcl-mp"), help="run one daemon only")
    p.add_argument("--rate", type=int, default=100, help="records/s in the load window, over all shards")
    p.add_argument("--idle-ms", type=int, default=1000, help="idleTimeBetweenReadsInMillis (default 1000)")
    p.add_argument("--slow-idle-ms", type=int, default=3000,
                   help="idleTimeBetweenReadsInMillis from --slow-from shards up, where moto saturates (default 3000)")
    p.add_argument("--slow-from", type=int, default=128, help="(default 128)")
    p.add_argument("--start-timeout-s", type=float, default=240.0,
                   help="the longest wait for every shard's first record (default 240: KCL 3.x takes over a minute)")
    p.add_argument("--settle-s", type=float, default=10.0, help="pause after the first records (default 10)")
    p.add_argument("--window-s", type=float, default=30.0, help="the idle and the load window, each (default 30)")
    p.add_argument("--drain-s", type=float, default=60.0, help="the longest wait for the last records (default 60)")
    p.add_argument("--kinesis", choices=("moto", "fast", "dynamodb"), default="moto",
                   help="the stream on moto with a producer (default), on fast_kinesis, bounded, no producer, or a "
                        "DynamoDB table's stream on the embedded emulator, with a producer (kcl-mp only)")
    p.add_argument("--records-per-shard", type=int, default=20,
                   help="with --kinesis fast: each shard's records; dynamodb: items written at start, per shard")
    p.add_argument("--streams", type=int, default=1,
                   help="kcl-mp only, Kinesis on moto: the shards in this many streams of one application (default 1)")
    p.add_argument("--out", default="scale.json", help="the figures as JSON (default scale.json)")
    args = p.parse_args(argv)
    if args.records_per_shard < 1:
        p.error("--records-per-shard must be at least 1")
    if args.streams < 1 or any(int(n) % args.streams for n in args.shards.split(",")):
        p.error(f"--streams {args.streams}: every --shards count must be a multiple of it")
    if args.streams > 1:
        if args.kinesis != "moto":
            p.error("--streams: Kinesis on moto only")
        args.only = "kcl-mp"  # the Java MultiLangDaemon reads one stream
    if args.kinesis == "dynamodb":
        args.only = "kcl-mp"
    if (status := enter_namespace(__file__, args.only)) is not None:
        return status
    work = bench_environment("kcl-mp-scale-")
    out = Path(args.out).resolve()
    sizes: list[Size] = []
    for shards in (int(n) for n in args.shards.split(",")):
        idle_ms = args.slow_idle_ms if shards >= args.slow_from else args.idle_ms
        for daemon in ("java", "kcl-mp"):
            if args.only not in (None, daemon) or (daemon == "java" and shards > args.java_max_shards):
                continue
            print(f"{daemon} at {shards} shards" + (f" in {args.streams} streams" if args.streams > 1 else "")
                  + f", idleTimeBetweenReadsInMillis {idle_ms}, Kinesis on {args.kinesis}", flush=True)
            try:
                sizes.append(run_size(daemon, shards, idle_ms, args, work))
            except Exception as exc:  # one size failing leaves the others' figures
                print(f"  {daemon} at {shards} shards failed: {exc!r}", flush=True)
                sizes.append(Size(daemon, shards, idle_ms, args.kinesis, args.streams, notes=[f"failed: {exc!r}"],
                                  failed=True))
            out.write_text(json.dumps({"failover_ms": FAILOVER_MS, "kinesis": args.kinesis, "rate": args.rate,
                                       "records_per_shard": args.records_per_shard, "window_s": args.window_s,
                                       "sizes": [asdict(s) for s in sizes], "ratios": ratios(sizes)}, indent=2))
    print()
    load = (f"{args.rate} records/s over all shards in the load window" if args.kinesis != "fast" else
            f"Kinesis on fast_kinesis, DynamoDB on moto: no producer, the load is the source's "
            f"{args.records_per_shard} records per shard, read at start-up ('load' is a second idle window)")
    print(f"failoverTimeMillis {FAILOVER_MS}, {load}, windows {args.window_s:.0f} s; CPU in cores; memory the peak "
          f"over both windows; 'late': leases whose counter stayed unchanged > {FAILOVER_MS / 2000:.0f} s (in the "
          "windows; at start-up)")
    print(report(sizes))
    print(f"\nfigures: {out}\nlogs: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

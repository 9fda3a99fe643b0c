"""Shards of unequal cost on three real hosts (issue 33): kcl-mp's COST_BASED leader beside
lease counting, kcl-mp's default rule and a Java 3.x leader, on the same load.

    make bench-cost        (= .venv/bin/python bench/cost_fleet.py; as root: cgroups, a network namespace)
    options: --configs cost,count,wua,java,java-lead  --loads cost,bytes  --quota 0.3 (cores a host)
             --heavy-ms 4  --alone-s 10  --stable-s 30  --settle-timeout-s 150  --catch-up-timeout-s 60
             --window-s 60  --java-version 3.1.3|3.5.1  --out cost_fleet.json

Configurations, each three hosts (host-a, host-b, host-c) on one application:

    cost       kcl-mp x3, kclmp.leaseAssignmentStrategy=COST_BASED (kcl-mp leads)
    count      kcl-mp x3, LEASE_COUNT_BASED (count balancing)
    wua        kcl-mp x3, the default WORKER_UTILIZATION_AWARE (Java's rule, in kcl-mp)
    java       the Java MultiLangDaemon x3 in its default 3.x mode (KCL --java-version)
    java-lead  a Java leader (host-a) and two kcl-mp followers

Loads, six shards, records of one size (200 bytes), the amazon_kclpy recorder
(tests/processors/recorder.py) burning CPU per record (``RECORDER_BURN_MS``):

    cost       equal bytes: 40 records/s a shard; shards 0, 2, 4 burn --heavy-ms a record
               (4 ms: 0.16 core a shard), the others 1/20 of it
    bytes      unequal bytes at one cost: 4, 8, 12, 20, 28, 40 records/s (1x..10x), every
               record --heavy-ms (0.016 to 0.16 core a shard)

Each host is a host of a given size: its own cgroup (v1; bench/cgroups.py) with a CPU quota of
--quota cores, which the daemon and its processors share. At 0.3 core a host holding two
heavy shards (0.32 core of processors) is overloaded and one holding one is not; three hosts
(0.9 core) beside moto (h2c) and this process fit in two cores. kcl-mp reads the quota of its
own cgroup as its capacity (kclmpCores 0.3); Java reads none (off EC2/ECS/EKS it reports no
worker metric and balances by throughput, and so does kcl-mp's WORKER_UTILIZATION_AWARE:
kclmp.workerMetric AUTO resolves to DEFAULT here). Where cgroups cannot be made, the run says
so and goes on without quotas, measuring each host's CPU from its process tree.

Per configuration and load, on a fresh moto (in a loopback-only network namespace, as
bench/daemons.py; the leases created before any host starts, as tests/support/kcl3_fleet.py):
host-a starts alone; once it holds the six leases the producer starts; --alone-s later host-b
and host-c start; once both have written their worker metrics (they have joined the 3.x
fleet) and the lease owners have not changed for --stable-s (at most --settle-timeout-s after
the join; "settle" says when they last changed before that quiet time: a rule may move
leases again after it, the window's "moves" count those), and once no shard has a backlog
left from the moves and host-a's time alone (every shard's newest record processed within
5 s of its put; at most --catch-up-timeout-s: an overloaded host never gets there, "c/up"
says so), a --window-s window is measured:

    host CPU         cores each host used (its cgroup's cpuacct), max/mean over the three
    processors       cores its processors used (their /proc CPU, sampled every second; a
                     processor that ended loses its last second), max/mean; the host's CPU
                     less this is the daemon's own (the JVM, or kcl-mp's processes)
    throttled        the share of each host's quota periods (0.1 s) in which it used up its quota
                     and had to wait (cpu.stat): a batch's burst counts too, so a host well under
                     its quota on average shows some; near 1 it is overloaded
    delivered        put-to-delivery latency, p50/p99 over the window's records
                     (processRecords' arrival minus the record's approximateArrivalTimestamp)
    processed        put-to-processed, p99: until the recorder wrote the record's line (in a
                     long batch on a throttled host, well after the batch arrived)
    behind           millisBehindLatest, p50/p99 over the window's processRecords: how far
                     behind the shard's tip each read was when made; records read ahead wait in
                     the daemon's buffer for a busy processor, which the latencies count and this
                     does not (a read that empties the shard is 0 however late it is processed)
    moves            lease owner changes in the window (the JSON has those from the join on)
    leases           each host's at the end

What it cannot say: one run per cell, so which leases count balancing happens to pair on a
host is one draw (its figure may be lucky or not); moto's millisBehindLatest is the age of the
shard's newest record minus the batch's last (0 when a read is empty), close to Kinesis' but
not its; the three hosts share two cores and a disk with moto and this process, so a host is
bounded by its quota but can still be slowed by the machine; kcl-mp's and Java's own
start-up (Java's first records take over a minute) happen before the window and are not
compared here (bench/scale.py does). Writes every figure as JSON to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)

import procs  # noqa: E402
from cgroups import HostGroup  # noqa: E402
from common import bench_environment, enter_namespace  # noqa: E402
from fleet_watch import TreeMeter, capacity, caught_up, leader, reporting, wait_stable  # noqa: E402

from kcl_mp.devtools import java_daemon  # noqa: E402
from kcl_mp.devtools.bench_figures import deliveries, max_over_mean, owner_moves  # noqa: E402

HOSTS = ("host-a", "host-b", "host-c")
SHARDS = 6
FAILOVER_MS = 6000
ASSIGNMENT_MS = 4000  # a 3.x assignment round every 4 s (tests/support/kcl3_fleet.py's)
ROUND_S = 0.5  # the producer puts every 0.5 s
RECORD_BYTES = 200
FRESH_S = 5.0  # a shard whose newest record was processed within 5 s of its put has no backlog
EMULATOR_BOUND = 0.9  # cores: a busier moto may be what delays records
# config -> (host-a's daemon, host-b's and host-c's, kclmp.leaseAssignmentStrategy of the kcl-mp hosts)
CONFIGS = {
    "cost": ("kcl-mp", "kcl-mp", "COST_BASED"),
    "count": ("kcl-mp", "kcl-mp", "LEASE_COUNT_BASED"),
    "wua": ("kcl-mp", "kcl-mp", "WORKER_UTILIZATION_AWARE"),
    "java": ("java", "java", None),
    "java-lead": ("java", "kcl-mp", "WORKER_UTILIZATION_AWARE"),
}


@dataclass(frozen=True)
class Load:
    per_round: tuple[int, ...]  # records a round, by shard
    burn: tuple[float, ...]  # CPU ms a record, by shard


def load(name: str, heavy_ms: float) -> Load:
    if name == "cost":
        return Load((20,) * SHARDS, tuple(heavy_ms if i % 2 == 0 else heavy_ms / 20 for i in range(SHARDS)))
    return Load((2, 4, 6, 10, 14, 20), (heavy_ms,) * SHARDS)


@dataclass
class HostFigures:
    cpu: float = 0.0  # cores in the window
    processors: float = 0.0
    throttled: float | None = None  # share of the quota periods it ran in that the quota cut short
    leases: int = 0
    measured_percent: float | None = None  # the sum of its leases' kclmpCpuPercent at the end (kcl-mp hosts)
    cores: float | None = None  # the capacity it reported (kclmpCores; kcl-mp hosts)


@dataclass
class Result:
    config: str
    load: str
    quota: float | None
    settled: bool = False
    settle_s: float | None = None  # from the join (both wrote worker metrics) to the last owner change
    caught_up_s: float | None = None  # from settling until every shard's newest record was fresh (None: never)
    hosts: dict[str, HostFigures] = field(default_factory=dict)
    cpu_max_over_mean: float | None = None
    processors_max_over_mean: float | None = None
    records: int = 0
    latency_p50_ms: float | None = None
    latency_p99_ms: float | None = None
    processed_p50_ms: float | None = None
    processed_p99_ms: float | None = None
    behind_p50_ms: float | None = None
    behind_p99_ms: float | None = None
    moves_window: list[Any] = field(default_factory=list)
    moves_settling: list[Any] = field(default_factory=list)
    moto_cpu: float = 0.0
    put_per_s: float = 0.0
    leader: str | None = None
    notes: list[str] = field(default_factory=list)
    failed: bool = False


def put_round(kinesis: Any, stream: str, starts: list[str], per_round: tuple[int, ...], n: int) -> list[dict]:
    """One round's records, ``per_round[i]`` to shard i (ExplicitHashKey: its first hash key)."""
    records = []
    for shard, (start, count) in enumerate(zip(starts, per_round)):
        for i in range(count):
            head = f'{{"round": {n}, "shard": {shard}, "i": {i}, "pad": "'
            records.append({"Data": (head + "x" * (RECORD_BYTES - len(head) - 2) + '"}').encode(),
                            "PartitionKey": f"{shard}-{i}", "ExplicitHashKey": start})
    return kinesis.put_records(StreamName=stream, Records=records)["Records"]


def run_one(config: str, load_name: str, args: argparse.Namespace, work: Path) -> Result:
    import boto3

    from kcl_mp.embedded import ensure_stream, start_emulator
    from kcl_mp.leases.cost import measured
    from tests.support.harness import RECORDER, BackgroundProducer, TableMonitor, recorded
    from tests.support.kcl3_fleet import create_leases
    from tests.support.mixed_fleet import Host, properties

    first, others, strategy = CONFIGS[config]
    shape = load(load_name, args.heavy_ms)
    app = f"cost-{config}-{load_name}"
    out = work / app
    (out / "records").mkdir(parents=True)
    result = Result(config, load_name, args.quota or None)
    os.environ["RECORDER_BURN_MS"] = ",".join(f"shardId-{i:012d}={ms:g}" for i, ms in enumerate(shape.burn))
    emulator = start_emulator(http2=True, log_path=str(out / "moto.log"))
    kinesis = boto3.client("kinesis", endpoint_url=emulator.url, region_name="us-east-1")
    dynamodb = boto3.client("dynamodb", endpoint_url=emulator.url, region_name="us-east-1")
    ensure_stream(kinesis, app, SHARDS)
    create_leases(kinesis, dynamodb, app)
    starts = [s["HashKeyRange"]["StartingHashKey"]
              for s in sorted(kinesis.list_shards(StreamName=app)["Shards"], key=lambda s: s["ShardId"])]
    producer = BackgroundProducer(lambda n: put_round(kinesis, app, starts, shape.per_round, n), ROUND_S, paced=True)
    monitor = TableMonitor(dynamodb, app)
    meter = TreeMeter(str(RECORDER))
    groups: dict[str, HostGroup] = {}
    hosts: dict[str, Any] = {}

    def start(name: str, daemon: str) -> None:
        keys: dict[str, object] = {"streamName": app, "applicationName": app, "clientVersionConfig": None,
                                   "failoverTimeMillis": FAILOVER_MS, "leaseAssignmentIntervalMillis": ASSIGNMENT_MS,
                                   "executableName": f"{sys.executable} {RECORDER}"}
        if daemon == "kcl-mp":
            keys["kclmp.leaseAssignmentStrategy"] = strategy
        path = properties(out, emulator.url, name, **keys)
        argv = (java_daemon.command(path, args.java_version) if daemon == "java" else
                [sys.executable, "-m", "kcl_mp", "--log-format", "json", "--properties", str(path)])
        if args.quota:
            group = HostGroup.create(f"kclmp-costbench-{os.getpid()}-{name}", args.quota)
            if group is None:
                if not any(note.startswith("no quota") for note in result.notes):
                    result.notes.append(f"no quota: {HostGroup.unavailable}")
            else:
                groups[name] = group
                argv = group.wrap(argv)
        hosts[name] = Host(name, argv, out)
        meter.add(name, hosts[name].process.pid)

    def held(name: str) -> int:
        return monitor.owners().get(name, 0)

    try:
        monitor.start()
        meter.start()
        start("host-a", first)
        bound = 300 if first == "java" else 90
        deadline = time.monotonic() + bound
        while held("host-a") < SHARDS:
            if hosts["host-a"].process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"host-a did not take the {SHARDS} leases within {bound} s")
            time.sleep(0.5)
        producer.start()
        print(f"  host-a ({first}) holds the {SHARDS} leases; producing; {args.alone_s:.0f} s alone", flush=True)
        time.sleep(args.alone_s)
        for name in HOSTS[1:]:
            start(name, others)
        deadline = time.monotonic() + (300 if others == "java" else 90)
        while not all(reporting(dynamodb, app, name) for name in HOSTS[1:]):
            if time.monotonic() > deadline or any(h.process.poll() is not None for h in hosts.values()):
                raise RuntimeError("host-b and host-c did not write their worker metrics (join the fleet)")
            time.sleep(1.0)
        joined = time.time()
        print(f"  host-b and host-c ({others}) joined", flush=True)
        result.settled, last_change = wait_stable(monitor, hosts, args.stable_s, args.settle_timeout_s)
        result.settle_s = round(last_change - joined, 1)
        print(f"  {'settled' if result.settled else 'NOT settled'}: owners last changed {result.settle_s} s after "
              f"the join; owners {dict(monitor.owners())}", flush=True)
        settled_at = time.time()
        while not caught_up(out / "records", SHARDS, time.time(), FRESH_S):
            if time.time() > settled_at + args.catch_up_timeout_s:
                break
            time.sleep(2.0)
        else:
            result.caught_up_s = round(time.time() - settled_at, 1)
        print(f"  caught up: {result.caught_up_s} s; measuring {args.window_s:.0f} s", flush=True)
        puts_before = len(producer.puts)
        usage_before = {n: (g.usage_s(), *g.periods()) for n, g in groups.items()}
        tree_before = meter.sample()
        moto_before = procs.cpu_seconds(procs.tree(emulator.process.pid))
        t0 = time.time()
        for _ in range(100_000):  # bounded by the window
            if time.time() >= t0 + args.window_s:
                break
            if any(h.process.poll() is not None for h in hosts.values()):
                raise RuntimeError("a host exited in the window")
            time.sleep(0.5)
        t1 = time.time()
        tree_after = meter.sample()
        usage_after = {n: (g.usage_s(), *g.periods()) for n, g in groups.items()}
        moto_after = procs.cpu_seconds(procs.tree(emulator.process.pid))
        span = t1 - t0
        result.moto_cpu = round(procs.cpu_between(moto_before, moto_after) / span, 3)
        result.put_per_s = round((len(producer.puts) - puts_before) / span, 1)
        with monitor.lock:
            latest = dict(monitor.latest)
        for name in HOSTS:
            figures = HostFigures()
            if name in groups:
                figures.cpu = round((usage_after[name][0] - usage_before[name][0]) / span, 3)
                ran, held_back = (usage_after[name][i] - usage_before[name][i] for i in (1, 2))
                figures.throttled = round(held_back / ran, 3) if ran else 0.0
            else:
                figures.cpu = round((tree_after[name][0] - tree_before[name][0]) / span, 3)
            figures.processors = round((tree_after[name][1] - tree_before[name][1]) / span, 3)
            mine = [lease for lease in latest.values() if lease.owner == name]
            figures.leases = len(mine)
            costs = [measured(lease.extra) for lease in mine]
            if any(c is not None for c in costs):
                figures.measured_percent = round(sum(c or 0.0 for c in costs), 1)
            figures.cores = capacity(dynamodb, app, name)
            result.hosts[name] = figures
        result.cpu_max_over_mean = max_over_mean([result.hosts[n].cpu for n in HOSTS])
        result.processors_max_over_mean = max_over_mean([result.hosts[n].processors for n in HOSTS])
        got = deliveries(recorded(out / "records"), t0, t1)
        result.records, result.latency_p50_ms, result.latency_p99_ms = got.records, got.latency_p50_ms, \
            got.latency_p99_ms
        result.processed_p50_ms, result.processed_p99_ms = got.processed_p50_ms, got.processed_p99_ms
        result.behind_p50_ms, result.behind_p99_ms = got.behind_p50_ms, got.behind_p99_ms
        result.moves_window = [list(m) for m in owner_moves(monitor.history, t0, t1)]
        result.moves_settling = [list(m) for m in owner_moves(monitor.history, joined, t0)]
        result.leader = leader(dynamodb, app)
        if result.moto_cpu >= EMULATOR_BOUND:
            result.notes.append(f"moto used {result.moto_cpu} core: it may be what delays records")
        if result.put_per_s < 0.9 * sum(shape.per_round) / ROUND_S:
            result.notes.append(f"the producer reached {result.put_per_s} of {sum(shape.per_round) / ROUND_S:.0f} "
                                "records/s")
    except Exception as exc:  # one cell failing leaves the others' figures
        result.failed = True
        result.notes.append(f"failed: {exc!r}")
        print(f"  failed: {exc!r}", flush=True)
    finally:
        producer.stop.set()
        with ThreadPoolExecutor(len(hosts) or 1) as pool:  # the hosts' shutdowns overlap
            exits = dict(zip(hosts, pool.map(lambda h: h.stop(), hosts.values())))
        if any(code not in (0, 143) for code in exits.values()):
            result.notes.append(f"exit statuses {exits}")
        meter.stop.set()
        monitor.stop.set()
        for group in groups.values():
            if (problem := group.remove(30)) is not None:
                result.notes.append(problem)
        emulator.stop()
        for thread in (meter, monitor, producer):
            if thread.ident is not None:  # started
                thread.join(5)
    return result


def _triple(values: list[Any], fmt: str) -> str:
    return "/".join("-" if v is None else format(v, fmt) for v in values)


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def report(results: list[Result]) -> str:
    head = (f"{'load':<6} {'config':<10} {'settle':>6} {'c/up':>5} {'host CPU a/b/c':>15} {'max/mean':>8} "
            f"{'processors a/b/c':>16} {'max/mean':>8} {'throttled a/b/c':>15} {'delivered p50/p99':>17} "
            f"{'processed p99':>13} {'behind p50/p99':>14} {'moves':>5} {'leases':>6} {'leader':>6}")
    lines = [head]
    for r in results:
        if r.failed and not r.hosts:
            lines.append(f"{r.load:<6} {r.config:<10} failed: {'; '.join(r.notes)}")
            continue
        h = [r.hosts.get(n, HostFigures()) for n in HOSTS]
        settled = (f"{r.settle_s:.0f}" if r.settle_s is not None else "-") + ("" if r.settled else "!")
        lines.append(
            f"{r.load:<6} {r.config:<10} {settled:>6} {_num(r.caught_up_s, '.0f'):>5} "
            f"{_triple([x.cpu for x in h], '.2f'):>15} {_num(r.cpu_max_over_mean, '.2f'):>8} "
            f"{_triple([x.processors for x in h], '.2f'):>16} {_num(r.processors_max_over_mean, '.2f'):>8} "
            f"{_triple([x.throttled for x in h], '.2f'):>15} "
            f"{_num(r.latency_p50_ms, '.0f') + '/' + _num(r.latency_p99_ms, '.0f'):>17} "
            f"{_num(r.processed_p99_ms, '.0f'):>13} "
            f"{_num(r.behind_p50_ms, '.0f') + '/' + _num(r.behind_p99_ms, '.0f'):>14} {len(r.moves_window):>5} "
            f"{_triple([x.leases for x in h], 'd'):>6} {(r.leader or '-').replace('host-', ''):>6}")
        lines.extend(f"{'':>18}{note}" for note in r.notes)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--configs", default=",".join(CONFIGS), help=f"of {', '.join(CONFIGS)} (default all)")
    p.add_argument("--loads", default="cost,bytes", help="cost, bytes (default both)")
    p.add_argument("--quota", type=float, default=0.3, help="each host's CPU quota in cores (0: none; default 0.3)")
    p.add_argument("--heavy-ms", type=float, default=4.0, help="CPU ms a heavy record costs (default 4)")
    p.add_argument("--alone-s", type=float, default=10.0, help="host-a alone with the load before the join")
    p.add_argument("--stable-s", type=float, default=30.0, help="owners unchanged this long: settled (default 30)")
    p.add_argument("--settle-timeout-s", type=float, default=150.0, help="the longest wait to settle (default 150)")
    p.add_argument("--catch-up-timeout-s", type=float, default=60.0,
                   help="after settling, the longest wait for every shard's backlog to clear (default 60)")
    p.add_argument("--window-s", type=float, default=60.0, help="the measured window (default 60)")
    p.add_argument("--java-version", choices=sorted(java_daemon.KCL_VERSIONS), default=java_daemon.DEFAULT_VERSION)
    p.add_argument("--out", default="cost_fleet.json", help="the figures as JSON (default cost_fleet.json)")
    args = p.parse_args(argv)
    configs, loads = args.configs.split(","), args.loads.split(",")
    if unknown := [c for c in configs if c not in CONFIGS] + [x for x in loads if x not in ("cost", "bytes")]:
        p.error(f"unknown configurations or loads: {unknown}")
    only = "kcl-mp" if not any("java" in c for c in configs) else None
    if (status := enter_namespace(__file__, only)) is not None:
        return status

    work = bench_environment("kcl-mp-cost-fleet-")
    out = Path(args.out).resolve()
    results: list[Result] = []
    for load_name in loads:
        for config in configs:
            print(f"{load_name} load, {config}", flush=True)
            began = time.monotonic()
            results.append(run_one(config, load_name, args, work))
            print(f"  {time.monotonic() - began:.0f} s", flush=True)
            out.write_text(json.dumps({"args": vars(args), "results": [asdict(r) for r in results]}, indent=2))
    print()
    quota = f"{args.quota} core each" if args.quota else "none"
    print(f"3 hosts, 6 shards, quota {quota}, heavy record {args.heavy_ms} ms. settle: s from the join to the last "
          f"owner change before {args.stable_s:.0f} s without one ('!': none within {args.settle_timeout_s:.0f} s); "
          f"c/up: s more until no shard had a backlog ('-': not within {args.catch_up_timeout_s:.0f} s); then a "
          f"{args.window_s:.0f} s window: CPU in cores, throttled the share of quota periods cut short, latencies "
          "and millisBehindLatest in ms, owner changes in the window, leases and the leader at the end")
    print(report(results))
    print(f"\nfigures: {out}\nlogs: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

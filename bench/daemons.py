"""kcl-mp beside the Java MultiLangDaemon: the same workload through both, runs alternating.

    make bench        (= .venv/bin/python bench/daemons.py)
    options: --records N per record size (default 40000), --sizes 100,1024, --runs 2, --shards 4,
             --max-records (maxRecords, default 1000)

Same emulator, same stream, same properties file, same processor (bench/noop_processor.py:
amazon_kclpy, no work, a checkpoint every 1,000 records). For each record size the stream is
filled once; each run then reads it all from TRIM_HORIZON under a fresh application name
(a fresh lease table), Java and kcl-mp alternating: J K J K. Per run:

    records/s        records / (last record delivered - first record delivered)
    CPU s / M rec    CPU seconds of the daemon's own processes (the JVM; kcl-mp's supervisor
                     and shard workers), never the processor children, between the first and
                     the last record, per million records
    peak memory      the largest sum of those processes' PSS (proportional set size: a page
                     shared by kcl-mp's forked workers is split among them, not counted once
                     per process as a sum of RSS would); the summed RSS is printed too
    first record     seconds from the daemon's start to the first record a processor got

It prints per daemon the median and the spread (min-max) of each, then kcl-mp / Java.

Where it runs: its own network namespace with only loopback up (it re-executes itself under
``unshare -n``; root or user namespaces needed), because the Java daemon (KCL 3.x) calls the
EC2 metadata address at every start. moto serves Kinesis and DynamoDB there, under hypercorn
(the Java Kinesis client speaks cleartext HTTP/2 only), and Java's CBOR is off
(``-Daws.cborEnabled=false``: moto speaks JSON). The Java jars are the ones PyPI's
``kclpy-ext`` ships (KCL 3.1.3); Java 17 from the machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from common import bench_environment, command, deliveries, enter_namespace, properties, stop

RUN_TIMEOUT_S = 900.0  # KCL 3.x alone needs over a minute before its first record
SHORTEST_WINDOW_S = 2.0
EMULATOR_BOUND = 0.9  # an emulator this busy (cores) is what limits records/s
MAX_RECORDS = 1000  # per GetRecords: many batches per shard from a stream moto can fill in reasonable time


@dataclass
class Run:
    daemon: str
    size: int
    records_per_s: float
    cpu_per_million: float
    peak_rss_mb: float
    peak_pss_mb: float
    first_record_s: float
    emulator_busy: float  # the emulator's CPU between the first and the last record, in cores


class Meter(threading.Thread):
    """Samples a daemon's own processes every 0.1 s: CPU seconds over time, peak RSS."""

    def __init__(self, pid: int, with_children: bool):
        super().__init__(daemon=True)
        import psutil

        self.root = psutil.Process(pid)
        self.with_children = with_children  # kcl-mp: the shard workers; their children are processors
        self.cpu: dict[int, float] = {}
        self.series: list[tuple[float, float]] = []  # (time, CPU seconds so far)
        self.peak_rss = 0  # summed: pages shared by forked workers count once per process
        self.peak_pss = 0  # proportional: each shared page split among its sharers (the honest total)
        self.stop = threading.Event()

    def run(self) -> None:
        import psutil

        for _ in range(10_000_000):  # bounded by stop()
            try:
                processes = [self.root, *(self.root.children() if self.with_children else [])]
            except psutil.Error:
                return
            rss = pss = 0
            for process in processes:
                try:
                    with process.oneshot():
                        times = process.cpu_times()
                        self.cpu[process.pid] = times.user + times.system
                        memory = process.memory_full_info()
                        rss += memory.rss
                        pss += memory.pss
                except psutil.Error:
                    continue
            self.peak_rss = max(self.peak_rss, rss)
            self.peak_pss = max(self.peak_pss, pss)
            self.series.append((time.time(), sum(self.cpu.values())))
            if self.stop.wait(0.1):
                return

    def cpu_between(self, start: float, end: float) -> float:
        def at(moment: float) -> float:
            before = [cpu for t, cpu in self.series if t <= moment]
            return before[-1] if before else 0.0
        return at(end) - at(start)


def _progress(out: Path) -> tuple[int, float | None, float | None]:
    """Records delivered so far, the first delivery's time, the last's."""
    shards = deliveries(out).values()
    if not shards:
        return 0, None, None
    return sum(d.records for d in shards), min(d.first for d in shards), max(d.last for d in shards)


def run_once(daemon: str, size: int, records: int, url: str, stream: str, work: Path, n: int,
             max_records: int, emulator_pid: int, metrics_level: str = "NONE") -> Run:
    app = f"bench-{daemon}-{size}-{n}"
    out = work / app
    out.mkdir()
    keys = properties(work / f"{app}.properties", url, stream, app, maxRecords=max_records,
                      idleTimeBetweenReadsInMillis=200, metricsLevel=metrics_level)
    log = open(work / f"{app}.log", "wb")
    env = {**os.environ, "BENCH_OUT": str(out), "BENCH_CHECKPOINT_EVERY": "1000"}
    started = time.time()
    process = subprocess.Popen(command(daemon, keys), stdout=log, stderr=subprocess.STDOUT, env=env,
                               cwd=str(work), start_new_session=True)
    meter = Meter(process.pid, with_children=daemon == "kcl-mp")
    meter.start()
    emulator = Meter(emulator_pid, with_children=False)  # is the emulator the bottleneck?
    emulator.start()
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while True:
            total, first, last = _progress(out)
            if total >= records:
                break
            if process.poll() is not None:
                raise RuntimeError(f"{daemon} exited with status {process.returncode}; see {log.name}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{daemon}: {total} of {records} records after {RUN_TIMEOUT_S:.0f} s; "
                                   f"see {log.name}")
            time.sleep(0.1)
        time.sleep(0.3)  # the meter's next sample
    finally:
        meter.stop.set()
        emulator.stop.set()
        stop(process)
        log.close()
    assert first is not None and last is not None
    window = max(last - first, 1e-6)
    if window < SHORTEST_WINDOW_S:
        print(f"  note: {daemon} delivered everything within {window:.2f} s: too short to measure its CPU "
              "(samples every 0.1 s); use more --records", flush=True)
    return Run(daemon, size, total / window, meter.cpu_between(first, last) / total * 1e6,
               meter.peak_rss / (1 << 20), meter.peak_pss / (1 << 20), first - started,
               emulator.cpu_between(first, last) / window)


def fill(kinesis, stream: str, shards: int, records: int, size: int) -> None:
    from kcl_mp.embedded import ensure_stream

    ensure_stream(kinesis, stream, shards)
    payload = os.urandom(size)
    for start in range(0, records, 500):
        entries = [{"Data": payload, "PartitionKey": f"key-{i}"} for i in range(start, min(records, start + 500))]
        for _ in range(20):
            response = kinesis.put_records(StreamName=stream, Records=entries)
            entries = [e for e, r in zip(entries, response["Records"]) if "ErrorCode" in r]
            if not entries:
                break
        else:
            raise RuntimeError(f"put_records kept failing on {stream}")


def _spread(values: list[float], fmt: str) -> str:
    return f"{format(statistics.median(values), fmt)} ({format(min(values), fmt)}-{format(max(values), fmt)})"


def report(runs: list[Run], records: int, max_records: int, metrics_level: str) -> str:
    lines = [f"{records} records per size, maxRecords {max_records}, metricsLevel {metrics_level}, no-op "
             "amazon_kclpy processor; median (min-max)",
             ""]
    header = (f"{'size':>6}  {'daemon':<7} {'records/s':>22} {'CPU s / M records':>22} {'peak PSS MB':>18} "
              f"{'(sum of RSS)':>18} {'first record s':>20} {'emulator CPU %':>16}")
    lines.append(header)
    ratios = []
    for size in sorted({r.size for r in runs}):
        medians = {}
        for daemon in ("java", "kcl-mp"):
            mine = [r for r in runs if r.size == size and r.daemon == daemon]
            if not mine:
                continue
            cols = [[r.records_per_s for r in mine], [r.cpu_per_million for r in mine],
                    [r.peak_pss_mb for r in mine], [r.peak_rss_mb for r in mine], [r.first_record_s for r in mine],
                    [100 * r.emulator_busy for r in mine]]
            medians[daemon] = [statistics.median(c) for c in cols]
            lines.append(f"{size:>6}  {daemon:<7} {_spread(cols[0], ',.0f'):>22} {_spread(cols[1], '.1f'):>22} "
                         f"{_spread(cols[2], '.0f'):>18} {_spread(cols[3], '.0f'):>18} {_spread(cols[4], '.1f'):>20} "
                         f"{_spread(cols[5], '.0f'):>16}")
        if len(medians) == 2:
            ratio = [f"{k / j:.2f}x" if j > 0 else "n/a (not measurable: use more --records)"
                     for j, k in zip(medians["java"], medians["kcl-mp"])]
            ratios.append(f"{size:>6}  kcl-mp/Java: records/s {ratio[0]}, CPU per record {ratio[1]} "
                          f"(target <= 0.5), peak memory {ratio[2]} (target <= 0.5; summed RSS "
                          f"{ratio[3]}), first record {ratio[4]} (target <= 0.25)")
    note = []
    for daemon in ("java", "kcl-mp"):
        mine = [r for r in runs if r.daemon == daemon]
        busy = [r for r in mine if r.emulator_busy >= EMULATOR_BOUND]
        if busy:
            note.append(f"records/s, {daemon}: the emulator (moto, one Python process) was busy >= "
                        f"{100 * EMULATOR_BOUND:.0f} % of a core in {len(busy)} of its {len(mine)} runs: there the "
                        "emulator bounds the rate; CPU per record still isolates the daemon's own cost.")
    return "\n".join(lines + [""] + ratios + [""] + note)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=40_000, help="records per size (default 40000; far fewer make "
                   "the delivery window too short to measure)")
    p.add_argument("--sizes", default="100,1024", help="record sizes in bytes (default 100,1024)")
    p.add_argument("--runs", type=int, default=2, help="runs per daemon and size, alternating (default 2)")
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--max-records", type=int, default=MAX_RECORDS, help=f"maxRecords (default {MAX_RECORDS})")
    p.add_argument("--only", choices=("java", "kcl-mp"), help="run one daemon only")
    p.add_argument("--metrics-level", choices=("NONE", "SUMMARY", "DETAILED"), default="NONE",
                   help="metricsLevel of both daemons, published to the emulator's CloudWatch (default NONE)")
    args = p.parse_args(argv)
    if (status := enter_namespace(__file__, args.only)) is not None:
        return status

    import boto3

    from kcl_mp.embedded import start_emulator

    work = bench_environment("kcl-mp-bench-")
    emulator = start_emulator(http2=True, log_path=str(work / "moto.log"))
    kinesis = boto3.client("kinesis", endpoint_url=emulator.url)
    daemons = [args.only] if args.only else ["java", "kcl-mp"]
    runs: list[Run] = []
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            stream = f"bench-{size}"
            began = time.monotonic()
            fill(kinesis, stream, args.shards, args.records, size)
            print(f"stream {stream}: {args.records} records of {size} B put in {time.monotonic() - began:.1f} s",
                  flush=True)
            for n in range(args.runs):
                for daemon in daemons:
                    run = run_once(daemon, size, args.records, emulator.url, stream, work, n, args.max_records,
                                   emulator.process.pid, args.metrics_level)
                    runs.append(run)
                    print(f"  {daemon:<7} {size:>5} B run {n + 1}: {run.records_per_s:,.0f} records/s, "
                          f"{run.cpu_per_million:.1f} CPU s / M records, peak PSS {run.peak_pss_mb:.0f} MB "
                          f"(RSS summed {run.peak_rss_mb:.0f} MB), "
                          f"first record after {run.first_record_s:.1f} s; emulator busy "
                          f"{100 * run.emulator_busy:.0f} % of a core", flush=True)
    finally:
        emulator.stop()
    print()
    print(report(runs, args.records, args.max_records, args.metrics_level))
    print(f"\nlogs: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

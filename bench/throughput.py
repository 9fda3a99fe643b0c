"""One host's throughput ceiling: kcl-mp beside the Java daemon on a source that is not the bound.

    make bench-throughput    (= .venv/bin/python bench/throughput.py)
    options: --shards 16,64  --sizes 100,1024  --window 20 (s)  --page-records N
             --processor light|noop  --only java|kcl-mp

Kinesis is ``kcl_mp.devtools.fast_kinesis`` (endless shards, precomputed pages, HTTP/1.1 and
h2c); DynamoDB is moto (``kcl_mp.embedded``, under hypercorn) on another port. Both daemons get
the same properties: maxRecords = one page (by default as large as Kinesis allows: 10,000
records or 10 MB), idleTimeBetweenReadsInMillis 200 (the least either daemon takes: 5 reads a
second per shard, up to 50,000 records), metricsLevel NONE, and the same processor: by default
``bench/light_processor.py`` (the protocol by hand, records counted, never decoded: the
daemons are what is measured, not amazon_kclpy), or ``--processor noop``
(bench/noop_processor.py, amazon_kclpy). Each checkpoints every 1,000 records.

Per run, once every shard delivered records (or after a deadline, noted), over ``--window``
seconds:

    records/s      records the processors got, all shards together
    daemon CPU     CPU seconds of the daemon's own processes (the JVM; kcl-mp's supervisor and
                   the processes it forked, never the processor children), per record and as
                   cores busy
    processors     their CPU, cores busy (what the daemon's own share of the host competes with)
    source         fast_kinesis' CPU, cores busy: it must stay well under one core

Where it runs: a network namespace with only loopback (re-executed under ``unshare -n``), as
bench/daemons.py says why.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from common import ROOT, bench_environment, command, deliveries, enter_namespace, properties, start_fast_kinesis, stop

STREAM = "bench"
READY_S = 300.0  # KCL 3.x takes a minute or more before its first record; 64 shards more
WINDOWS = 3  # tries for a window in which no process exits
PROCESSORS = {"light": ROOT / "bench" / "light_processor.py", "noop": ROOT / "bench" / "noop_processor.py"}


@dataclass
class Run:
    daemon: str
    shards: int
    size: int
    records_per_s: float
    cpu_per_record_us: float
    daemon_cores: float
    processor_cores: float
    source_cores: float
    ready_s: float
    shards_delivering: int
    stable: bool  # none of the daemon's own processes exited during the window (else its CPU is undercounted)


def delivered(out: Path) -> int:
    return sum(shard.records for shard in deliveries(out).values())


def cpu_of(pids: list[int]) -> float:
    import psutil

    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
            total += times.user + times.system
        except psutil.Error:
            continue
    return total


def own_and_processors(root: int, daemon: str) -> tuple[list[int], list[int]]:
    """The daemon's own processes and its processors: a JVM's children are processors; kcl-mp's
    children are its own (shard workers or pool processes, the metrics process), their
    children processors."""
    import psutil

    process = psutil.Process(root)
    children = process.children()
    if daemon == "java":
        return [root], sorted(c.pid for c in children)
    own = [root, *sorted(c.pid for c in children)]
    return own, sorted(g.pid for c in children for g in c.children())


def page_records(size: int, asked: int) -> int:
    """Records per page: as asked, else as many as one GetRecords may return (10,000 or 10 MB)."""
    return asked or min(10_000, 10_000_000 // (4 * ((size + 2) // 3) + 120))


def run_once(daemon: str, shards: int, size: int, args: argparse.Namespace, dynamodb_url: str, work: Path) -> Run:
    from kcl_mp.embedded import free_port

    page = page_records(size, args.page_records)
    app = f"tp-{daemon}-{shards}-{size}"
    out = work / app
    out.mkdir()
    port = free_port()
    source = start_fast_kinesis(port, STREAM, shards, work / f"{app}.source.log", record_bytes=size,
                                page_records=page)
    path = properties(work / f"{app}.properties", dynamodb_url, STREAM, app,
                      kinesisEndpoint=f"http://127.0.0.1:{port}", maxRecords=page, idleTimeBetweenReadsInMillis=200,
                      executableName=f"{sys.executable} {PROCESSORS[args.processor]}")
    log = open(work / f"{app}.log", "wb")
    env = {**os.environ, "BENCH_OUT": str(out), "BENCH_CHECKPOINT_EVERY": "1000"}
    started = time.monotonic()
    process = subprocess.Popen(command(daemon, path), stdout=log, stderr=subprocess.STDOUT, env=env,
                               cwd=str(work), start_new_session=True)
    try:
        deadline = started + READY_S
        while len(deliveries(out)) < shards and time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"{daemon} exited with status {process.returncode}; see {log.name}")
            time.sleep(0.5)
        ready_s = time.monotonic() - started
        delivering = len(deliveries(out))
        time.sleep(5.0)  # past the first batches' burst (and the JVM's JIT at its busiest)
        for attempt in range(1, WINDOWS + 1):
            # CPU is read from live processes: a window in which one of the daemon's own exits (a
            # shard worker restarted after a lost lease) would lose its CPU, so it is retried
            own, processors = own_and_processors(process.pid, daemon)
            before = (time.monotonic(), delivered(out), cpu_of(own), cpu_of(processors), cpu_of([source.pid]))
            time.sleep(args.window)
            after = (time.monotonic(), delivered(out), cpu_of(own), cpu_of(processors), cpu_of([source.pid]))
            own_now = own_and_processors(process.pid, daemon)[0]
            stable = own_now == own  # a processor restarted costs only the processors' column
            if stable:
                break
            print(f"  note: {daemon}'s own processes changed during window {attempt} (restarts: see {log.name})",
                  flush=True)
    finally:
        stop(process)
        log.close()
        source.send_signal(signal.SIGTERM)
        try:
            source.wait(30)
        except subprocess.TimeoutExpired:
            source.kill()
            source.wait(10)
    seconds = after[0] - before[0]
    records = after[1] - before[1]
    daemon_cpu = after[2] - before[2]
    return Run(daemon, shards, size, records / seconds, daemon_cpu / max(records, 1) * 1e6, daemon_cpu / seconds,
               (after[3] - before[3]) / seconds, (after[4] - before[4]) / seconds, ready_s, delivering, stable)


def report(runs: list[Run], args: argparse.Namespace) -> str:
    pages = ", ".join(f"{page_records(s, args.page_records)} at {s} B" for s in sorted({r.size for r in runs}))
    lines = [f"fast_kinesis source, pages (maxRecords) of {pages}, idleTimeBetweenReadsInMillis 200, "
             f"{args.processor} processor, window {args.window:.0f} s, {os.cpu_count()} cores",
             "",
             f"{'shards':>6} {'size':>5}  {'daemon':<7} {'records/s':>11} {'CPU us/record':>14} {'daemon cores':>13} "
             f"{'processors':>11} {'source':>7} {'ready s':>8}"]
    for run in runs:
        lines.append(f"{run.shards:>6} {run.size:>5}  {run.daemon:<7} {run.records_per_s:>11,.0f} "
                     f"{run.cpu_per_record_us:>14.2f} {run.daemon_cores:>13.2f} {run.processor_cores:>11.2f} "
                     f"{run.source_cores:>7.2f} {run.ready_s:>8.1f}"
                     + ("" if run.shards_delivering == run.shards else
                        f"  ({run.shards_delivering} of {run.shards} shards delivering)")
                     + ("" if run.stable else "  (processes restarted in every window: CPU undercounted)"))
    lines.append("")
    for shards in sorted({r.shards for r in runs}):
        for size in sorted({r.size for r in runs}):
            pair = {r.daemon: r for r in runs if r.shards == shards and r.size == size}
            if len(pair) == 2:
                k, j = pair["kcl-mp"], pair["java"]
                lines.append(f"{shards:>6} shards {size:>5} B  kcl-mp/Java: records/s "
                             f"{k.records_per_s / j.records_per_s:.2f}x "
                             f"(target >= 2), CPU per record {k.cpu_per_record_us / j.cpu_per_record_us:.2f}x "
                             "(target <= 0.2)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shards", default="16,64")
    p.add_argument("--sizes", default="100,1024")
    p.add_argument("--window", type=float, default=20.0, help="seconds measured per run (default 20)")
    p.add_argument("--page-records", type=int, default=0,
                   help="records per GetRecords page = maxRecords (default: 10,000 or 10 MB, as Kinesis)")
    p.add_argument("--processor", choices=sorted(PROCESSORS), default="light")
    p.add_argument("--only", choices=("java", "kcl-mp"), help="run one daemon only")
    args = p.parse_args(argv)
    if (status := enter_namespace(__file__, args.only)) is not None:
        return status
    from kcl_mp.embedded import start_emulator

    work = bench_environment("kcl-mp-throughput-")
    dynamodb = start_emulator(http2=True, log_path=str(work / "moto.log"))
    daemons = [args.only] if args.only else ["java", "kcl-mp"]
    runs: list[Run] = []
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    try:
        for shards in (int(s) for s in args.shards.split(",")):
            for size in (int(s) for s in args.sizes.split(",")):
                for daemon in daemons:
                    run = run_once(daemon, shards, size, args, dynamodb.url, work)
                    runs.append(run)
                    print(f"  {daemon:<7} {shards:>3} shards {size:>5} B: {run.records_per_s:,.0f} records/s, "
                          f"{run.cpu_per_record_us:.2f} us CPU per record ({run.daemon_cores:.2f} cores), "
                          f"processors {run.processor_cores:.2f} cores, source {run.source_cores:.2f} cores; "
                          f"{run.shards_delivering}/{shards} shards delivering after {run.ready_s:.0f} s; "
                          f"load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        dynamodb.stop()
    print()
    print(report(runs, args))
    print(f"\nlogs: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

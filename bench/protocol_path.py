"""The shard worker's protocol path alone, no emulator: records/s per core.

    make bench-protocol   (= .venv/bin/python bench/protocol_path.py [--seconds S])

In-memory GetRecords pages (10,000 records each, as the fast path's client returns them) go through what a
shard worker does with every page: ``deaggregate.page_slices`` (the page's user records in batches within
the default kclmp.maxRecordsCount and kclmp.maxByteSize) -> ``wire.make_batch`` each ->
``ProcessorChild.process_records`` (one write of the processRecords line, then the wait for
the status) into a no-op processor that answers each line without parsing its records. For
100 B, 1 KB and 10 KB records it prints records/s (wall) and records per CPU second of this
process (the kcl-mp side: the processor's own CPU is not counted), the median of 5 rounds.
"""

from __future__ import annotations

import argparse
import base64
import logging
import statistics
import sys
import time
from datetime import datetime, timezone

from kcl_mp.config import RetrievalSettings
from kcl_mp.multilang.child import ProcessorChild
from kcl_mp.multilang.wire import make_batch
from kcl_mp.retrieval.deaggregate import page_slices
from kcl_mp.sequence import ExtendedSequenceNumber

NOOP = """import sys
out = sys.stdout.buffer
for line in sys.stdin.buffer:
    head = line[:40]
    action = head.split(b'"action":"', 1)[1].split(b'"', 1)[0] if b'"action":"' in head else b""
    if action:
        out.write(b'{"action":"status","responseFor":"' + action + b'"}\\n')
        out.flush()
"""
PAGE = 10_000
BOUNDS = RetrievalSettings()  # the defaults a shard worker splits by


def pages(size: int, count: int) -> list[list[dict]]:
    """GetRecords pages as the shard worker's client leaves them: Data as the wire's base64
    text, the arrival time as the wire's epoch seconds (``credentials.client(raw_records=True)``)."""
    arrival = datetime(2026, 1, 1, tzinfo=timezone.utc).timestamp()
    data = base64.b64encode(bytes(range(256)) * (size // 256) + bytes(size % 256)).decode()
    base = 49590338271490256608559692538361571095921575989136588898
    records = [{"SequenceNumber": str(base + i), "ApproximateArrivalTimestamp": arrival + i / 1000, "Data": data,
                "PartitionKey": f"key-{i % 500}"} for i in range(count)]
    return [records[i:i + PAGE] for i in range(0, count, PAGE)]


def one_round(child: ProcessorChild, batches: list[list[dict]]) -> tuple[float, float, int]:
    wall, cpu = time.perf_counter(), time.process_time()
    total = 0
    for page in batches:
        for users in page_slices(page, None, BOUNDS.max_records_count, BOUNDS.max_byte_size):
            child.process_records(make_batch(users, 0))
            total += len(users)
    return time.perf_counter() - wall, time.process_time() - cpu, total


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=0, help="records per round (default: 100k, 50k, 10k by size)")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    log = logging.getLogger("bench")
    child = ProcessorChild((sys.executable, "-c", NOOP), "shardId-000000000000", lambda position: None, 30.0, log)
    child.start()
    child.initialize(ExtendedSequenceNumber("TRIM_HORIZON"))
    print(f"{'size':>8} {'records':>8} {'records/s (wall)':>18} {'records / CPU s':>17}   "
          f"median of {args.rounds} rounds")
    try:
        for size, default in ((100, 100_000), (1024, 50_000), (10240, 10_000)):
            batches = pages(size, args.records or default)
            one_round(child, batches[:1])  # warm up
            results = [one_round(child, batches) for _ in range(args.rounds)]
            total = results[0][2]
            wall = statistics.median(total / w for w, _, _ in results)
            per_cpu = statistics.median(total / c for _, c, _ in results if c > 0)
            print(f"{size:>7}B {total:>8} {wall:>18,.0f} {per_cpu:>17,.0f}", flush=True)
    finally:
        child.lease_lost()
        child.close(1.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The fault run (tests/support/fault_run.py) for several seeds, and the figures table.

    .venv/bin/python bench/faults.py --seeds 1,2,3

One moto server and one kinesis-mock on loopback serve every seed (a stream and a lease
table each). Per seed: the schedule, the faults as they were injected, then one row of
figures and what the judge (tests/support/fault_judge.py) found. A seed that fails
replays alone with ``KCLMP_FAULT_SEED=<seed> pytest tests/e2e/test_faults.py``.
75-95 s a seed on a loaded 2-core machine. The hosts run with ``clientVersionConfig =
CLIENT_VERSION_CONFIG_COMPATIBLE_WITH_2X`` (pinned in tests/support/harness.base_properties):
these figures are the 2.x failover path (expiry, then a take), not the 3.x leader's reassignment.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from kcl_mp.embedded import EMBEDDED_ENV, start_emulator  # noqa: E402
from tests.support.fault_judge import Verdict, judge  # noqa: E402
from tests.support.fault_run import FaultRun, schedule  # noqa: E402
from tests.support.kinesis_mock import start_kinesis_mock  # noqa: E402

COLUMNS = ("seed", "s", "put", "delivered", "lost", "duplicates by cause", "unexpl.", "non-holder", "throttled d/k",
           "split/merge", "keys crossed", "kills p/h", "pauses", "longest wait", "ckpt back", "exits")


def row(v: Verdict) -> tuple[str, ...]:
    f = v.figures
    duplicates = ", ".join(f"{cause} {n}" for cause, n in sorted(f["duplicates"].items())) or "0"
    wait_shard, wait_s = f["longest_wait"]
    return (str(f["seed"]), str(f["seconds"]), str(f["put"]), str(f["delivered"]), str(f["lost"]), duplicates,
            str(f["unexplained"]), f"{f['non_holder']} ({f['non_holder_processors']} proc.)",
            f"{f['throttled'].get('dynamodb', 0)}/{f['throttled'].get('kinesis', 0)}",
            f"{f['splits']}/{f['merges']}", str(f["keys_crossed"]), f"{f['processor_kills']}/{f['host_kills']}",
            str(f["pauses"]),
            f"{wait_s:.1f} s ({wait_shard[-3:]})", str(f["backwards"]),
            "all 0" if set(f["exits"].values()) == {0} else str(f["exits"]))


def table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(COLUMNS)]
    lines = [" | ".join(c.ljust(w) for c, w in zip(COLUMNS, widths)), "-+-".join("-" * w for w in widths)]
    lines += [" | ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="1,2,3", help="comma-separated seeds (default 1,2,3)")
    parser.add_argument("--keep", metavar="DIR", help="keep each run's logs, recordings and facts.json here")
    args = parser.parse_args()
    os.environ.update(EMBEDDED_ENV)
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
    base = Path(args.keep or tempfile.mkdtemp(prefix="kcl-mp-faults-"))
    base.mkdir(parents=True, exist_ok=True)
    moto = start_emulator(log_path=str(base / "moto.log"))
    kinesis = start_kinesis_mock(base / "kinesis-mock.log")
    verdicts = []
    try:
        for seed in (int(s) for s in args.seeds.split(",")):
            print(f"seed {seed} (KCLMP_FAULT_SEED={seed}): {len(schedule(seed))} steps", flush=True)
            tmp = base / f"seed-{seed}"
            tmp.mkdir(parents=True, exist_ok=True)
            verdict = judge(FaultRun(seed, tmp, kinesis.url, moto.url, "f" + uuid.uuid4().hex[:12]).run())
            for line in verdict.failures + verdict.details + verdict.figures["errors_logged"]:
                print("  ", line, flush=True)
            verdicts.append(verdict)
    finally:
        kinesis.stop()
        moto.stop()
    print()
    print(table([row(v) for v in verdicts]))
    print(f"\nruns kept in {base}" if args.keep else "")
    return 0 if not any(v.failures for v in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())

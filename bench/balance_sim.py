"""How many take intervals a fleet needs to balance, kcl-mp's rule beside the Java KCL's.

    .venv/bin/python bench/balance_sim.py [--quick] [--seeds N] [--max-steal K]

A simulation (kcl_mp.devtools.fleet_sim: in-memory table, virtual clock, no sleeping) of N
workers and M leases with the default timings (failoverTimeMillis 10000: renew every
3.3 s, take every 20.05 s). Scenarios:

    cold   N workers start within 0.5 s of each other on M unowned leases
    join   N/2 workers hold M leases, balanced; N/2 more start together
    crash  N workers hold M leases, balanced; N/4 of them die

Per rule it prints the median over seeds of: take intervals from the event until the
last lease move of a settled fleet (every lease owned by a live worker, max - min <= 1,
no move for 5 intervals; ">" when not settled within the cap), lease moves, and leases
that moved more than once (churn). Minimum moves: cold M - ceil(M/N)-ish, join about
M/2, crash the dead workers' leases.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from kcl_mp.config import LeaseSettings
from kcl_mp.devtools.fleet_sim import Fleet, Result

MAX_CYCLES = 120


def run(scenario: str, leases: int, workers: int, rule: str, seed: int, max_steal: int) -> Result:
    settings = LeaseSettings(table_name="t", max_leases_to_steal_at_one_time=max_steal)
    fleet = Fleet(leases, settings, rule, seed=seed)
    take_s = settings.take_interval_s
    if scenario == "cold":
        fleet.start([f"w{i}" for i in range(workers)], at=0.0)
        return fleet.settle(0.0, MAX_CYCLES)
    first = [f"w{i}" for i in range(workers // 2 if scenario == "join" else workers)]
    fleet.start(first, at=0.0, jitter_s=take_s)
    fleet.assign({key: first[i % len(first)] for i, key in enumerate(sorted(fleet.table))})
    fleet.run_until(2 * take_s)
    event = fleet.now
    if scenario == "join":
        fleet.start([f"j{i}" for i in range(workers - len(first))], at=event)
    else:
        fleet.crash(first[: max(1, workers // 4)])
    return fleet.settle(event, MAX_CYCLES)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small fleets only")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--max-steal", type=int, default=1, help="maxLeasesToStealAtOneTime (default 1, as Java)")
    args = p.parse_args()
    sizes = [(16, 3), (100, 10), (500, 100), (500, 200), (1000, 100)]
    if args.quick:
        sizes = sizes[:2]
    print(f"maxLeasesToStealAtOneTime {args.max_steal}; medians over {args.seeds} seeds; cycles = take intervals")
    print(f"{'scenario':<8} {'M':>5} {'N':>4} | {'kcl-mp cycles':>13} {'moves':>6} {'churn':>5} | "
          f"{'java cycles':>11} {'moves':>6} {'churn':>5} | {'cycles ratio':>12}")
    started = time.monotonic()
    for scenario in ("cold", "join", "crash"):
        for leases, workers in sizes:
            row = {}
            for rule in ("kcl-mp", "java"):
                results = [run(scenario, leases, workers, rule, seed, args.max_steal) for seed in range(args.seeds)]
                cycles = statistics.median(r.cycles for r in results)
                settled = all(r.settled for r in results)
                row[rule] = (("" if settled else ">") + f"{cycles:.1f}",
                             statistics.median(r.moves for r in results),
                             statistics.median(r.repeat_moves for r in results), cycles)
            ours, java = row["kcl-mp"], row["java"]
            ratio = ours[3] / java[3] if java[3] else float("nan")
            print(f"{scenario:<8} {leases:>5} {workers:>4} | {ours[0]:>13} {ours[1]:>6.0f} {ours[2]:>5.0f} | "
                  f"{java[0]:>11} {java[1]:>6.0f} {java[2]:>5.0f} | {ratio:>12.2f}", flush=True)
    print(f"({time.monotonic() - started:.0f} s of simulation)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How many take intervals a fleet needs to balance, kcl-mp's rule beside the Java KCL's,
and how many assignment rounds a KCL 3.x fleet with a kcl-mp leader needs.

    .venv/bin/python bench/balance_sim.py [--quick] [--seeds N] [--max-steal K]

A simulation (kcl_mp.devtools.fleet_sim: in-memory table, virtual clock, no sleeping) of N
workers and M leases with the default timings (failoverTimeMillis 10000: renew every
3.3 s, take every 20.05 s). Scenarios:

    cold   N workers start within 0.5 s of each other on M unowned leases
    join   N/2 workers hold M leases, balanced; N/2 more start together
    crash  N workers hold M leases, balanced; N/4 of them die

Per 2.x rule it prints the median over seeds of: take intervals from the event until the
last lease move of a settled fleet (every lease owned by a live worker, max - min <= 1,
no move for 5 intervals; ">" when not settled within the cap), lease moves, and leases
that moved more than once (churn). Minimum moves: cold M - ceil(M/N)-ish, join about
M/2, crash the dead workers' leases.

The 3.x columns (kcl_mp.devtools.fleet_sim.LeaderFleet: a leader running
kcl_mp.fleet.assignment every leaseAssignmentIntervalMillis, 20 s here, about one take
interval): assignment rounds from the event to the last round that moved a lease, seconds
until every lease is processed by its owner with max - min <= 1, lease moves (cold: every
lease assigned once when metrics come before the second round), and leases that went back to a worker they had left ("b&f"). A crash
takes the leader too (w0): its successor waits out the lock's 120 s first.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from kcl_mp.config import LeaseSettings
from kcl_mp.devtools.fleet_sim import LeaderFleet, Result, TakerFleet

MAX_CYCLES = 120


def run(scenario: str, leases: int, workers: int, rule: str, seed: int, max_steal: int) -> Result:
    settings = LeaseSettings(table_name="t", max_leases_to_steal_at_one_time=max_steal)
    fleet = TakerFleet(leases, settings, rule, seed=seed)
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


def run_3x(scenario: str, leases: int, workers: int, seed: int) -> tuple[Result, float]:
    """The 3.x fleet in ``scenario``: its result and the seconds until it was balanced."""
    settings = LeaseSettings(table_name="t")
    fleet = LeaderFleet(leases, settings, seed=seed)
    if scenario == "cold":
        fleet.mark()
        fleet.start([f"w{i}" for i in range(workers)], at=0.0)
        event = 0.0
    else:
        first = [f"w{i}" for i in range(workers // 2 if scenario == "join" else workers)]
        fleet.start(first, at=0.0, jitter_s=1.0)
        fleet.assign({key: first[i % len(first)] for i, key in enumerate(sorted(fleet.table))})
        fleet.run_until(3 * fleet.interval_s)
        event = fleet.now
        fleet.mark()
        if scenario == "join":
            fleet.start([f"j{i}" for i in range(workers - len(first))], at=event)
        else:
            fleet.crash(first[: max(1, workers // 4)])
    balanced_at = None
    for _ in range(int(MAX_CYCLES * fleet.interval_s)):  # one-second steps, bounded
        fleet.run_until(fleet.now + 1.0)
        if fleet.balanced():
            balanced_at = fleet.now
            break
    result = fleet.settle(event, MAX_CYCLES)
    return result, (balanced_at - event) if balanced_at is not None else float("inf")


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
          f"{'java cycles':>11} {'moves':>6} {'churn':>5} | {'cycles ratio':>12} | "
          f"{'3.x rounds':>10} {'seconds':>7} {'moves':>6} {'b&f':>4}")
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
            three = [run_3x(scenario, leases, workers, seed) for seed in range(args.seeds)]
            rounds = ("" if all(r.settled for r, _ in three) else ">") + f"{statistics.median(r.rounds for r, _ in three):.0f}"
            print(f"{scenario:<8} {leases:>5} {workers:>4} | {ours[0]:>13} {ours[1]:>6.0f} {ours[2]:>5.0f} | "
                  f"{java[0]:>11} {java[1]:>6.0f} {java[2]:>5.0f} | {ratio:>12.2f} | "
                  f"{rounds:>10} {statistics.median(t for _, t in three):>7.0f} "
                  f"{statistics.median(r.moves for r, _ in three):>6.0f} "
                  f"{max(r.back_and_forth for r, _ in three):>4}", flush=True)
    print(f"({time.monotonic() - started:.0f} s of simulation)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

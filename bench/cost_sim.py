"""Hosts' CPU when shards cost different CPU: kcl-mp's COST_BASED leader beside Java's
variance rule and lease counting, in the fleet simulation (kcl_mp.devtools.cost_sim).

    .venv/bin/python bench/cost_sim.py [--hosts 100] [--rounds 30] [--seeds 3] [--budget 2]

Per scenario and rule it prints the median over seeds of: max/mean of the hosts' true CPU
before the first round and after the last, lease moves in all, moves per round, and the
shards' lag (millisBehindLatest's analogue, in seconds: p99 and the worst over every shard
after every round; kcl_mp.devtools.cost_sim says how a host over its capacity falls behind).
Scenarios: cost_1x_20x (equal bytes, one shard in ten 20x the CPU per record), cost_1x_20x_busy
(the same on hosts of half the cores),
bytes_unequal (10..1000 KB/s at one cost per byte), low_jitter (KCL#1814: a few percent
CPU, +-50 % jitter per round).
"""

from __future__ import annotations

import argparse
import statistics

from kcl_mp.devtools.cost_sim import RULES, SCENARIOS, run
from kcl_mp.fleet.cost_balance import CostSettings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--budget", type=int, default=2, help="kclmp.costMovesPerRound")
    args = parser.parse_args()
    settings = CostSettings(max_moves=args.budget)
    print(f"{args.hosts} hosts, {args.rounds} rounds, median of {args.seeds} seeds; COST_BASED budget {args.budget}")
    print(f"{'scenario':<16} {'rule':<18} {'max/mean before':>15} {'after':>6} {'moves':>6} {'per round':>9} "
          f"{'lag p99 s':>9} {'lag max s':>9}")
    for name, scenario in SCENARIOS.items():
        for rule in RULES:
            results = [run(scenario, rule, args.hosts, args.rounds, seed, settings) for seed in range(args.seeds)]
            print(f"{name:<16} {rule:<18} {statistics.median(r.first_max_over_mean for r in results):>15.3f} "
                  f"{statistics.median(r.max_over_mean for r in results):>6.3f} "
                  f"{statistics.median(r.moves for r in results):>6.0f} "
                  f"{statistics.median(r.moves_per_round for r in results):>9.2f} "
                  f"{statistics.median(r.lag_p99_s for r in results):>9.1f} "
                  f"{statistics.median(r.lag_max_s for r in results):>9.1f}")


if __name__ == "__main__":
    main()

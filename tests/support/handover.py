"""Java and kcl-mp multi-stream hosts on one lease table, one after the other: the phases both
runs make (tests/support/multi_stream_java.py over Kinesis, adapter_multi_stream_java.py over
DynamoDB streams) and what both tests judge alike in what they wrote."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kcl_mp.leases.lease import CPU_PERCENT, RELEASED_BY, RELEASED_UNTIL

from .harness import wait_until
from .mixed_fleet import Host

# kcl-mp's own attributes (Java reads past them): the cost a renewal reports once measured, a give-up's
KCLMP_OWN = frozenset({CPU_PERCENT, RELEASED_BY, RELEASED_UNTIL})
# written by either kind's renewals once records flowed, so a lease has it or not by timing alone
# (a run had it on the lease kcl-mp held longest only)
RENEWED = frozenset({"throughputKBps"})
EXITS = {"java-1": 143, "kclmp-1": 0, "java-2": 143}  # kcl-mp exits 0 after SIGTERM, the JVM 128 + SIGTERM


@dataclass
class Handover:
    """What a run records of its phases: when each began and had delivered, each host's exit
    status, the lease table's items after each, and the first failure."""

    phases: dict[str, float] = field(default_factory=lambda: {"start": time.time()})
    exits: dict[str, int] = field(default_factory=dict)
    snapshots: dict[str, list] = field(default_factory=dict)
    failure: str | None = None

    def phase(self, worker: str, argv: list[str], out: Path, expected: Collection[Any],
              delivered: Callable[[], set], what: str, dynamodb: Any, table: str) -> None:
        """Run host ``worker`` until everything ``expected`` is ``delivered`` (at most 90 s), then
        stop it (SIGTERM: its processors checkpoint) and keep the lease table's items."""
        host = Host(worker, argv, out)
        self.phases[f"{worker}_start"] = time.time()
        try:
            wait_until(lambda: set(expected) <= delivered(), 90, f"{worker} delivering every {what} so far", 0.5)
        finally:
            self.phases[f"{worker}_delivered"] = time.time()
            self.exits[worker] = host.stop()
            self.snapshots[worker] = dynamodb.scan(TableName=table, ConsistentRead=True)["Items"]

    def write(self, out: Path, **more: Any) -> None:
        (out / "result.json").write_text(json.dumps({**asdict(self), **more}))


def read_result(out: Path) -> dict:
    """The run's result.json, once its phases ran and its hosts exited as they should (the hosts'
    log tails in the message when not)."""
    result = json.loads((out / "result.json").read_text())
    phases = result["phases"]
    print("phases (s from the start):", {k: round(v - phases["start"], 1) for k, v in phases.items()})
    logs = {p.name: p.read_text(errors="replace")[-3000:] for p in out.glob("*.log") if p.name != "moto.log"}
    assert result["failure"] is None, f"{result['failure']}\n" + "\n".join(f"--- {n}\n{t}" for n, t in logs.items())
    assert result["exits"] == EXITS, result["exits"]
    return result


def processors(entries: Iterable[dict]) -> dict[int, dict]:
    """Each processor (by pid): its initialize line, with the checkpoints it wrote."""
    entries = list(entries)
    found = {e["_pid"]: {**e, "checkpoints": []} for e in entries if e.get("event") == "initialize"}
    for entry in entries:
        if entry.get("event") == "checkpoint" and entry["error"] is None:
            found[entry["_pid"]]["checkpoints"].append(entry)
    return found


def resumes(found: dict[int, dict]) -> tuple[Counter, set[tuple[str, str]]]:
    """Each lease's processors in order: the first from TRIM_HORIZON, each next one from its
    predecessor's last checkpoint. How often each kind took over from each, and the leases."""
    resumed: Counter = Counter()
    lives: dict[tuple[str, str], list[dict]] = {}
    for processor in sorted(found.values(), key=lambda p: p["at"]):
        lives.setdefault((processor["stream"], processor["shard"]), []).append(processor)
    for (stream, shard), chain in sorted(lives.items()):
        assert chain[0]["seq"] == "TRIM_HORIZON", chain[0]
        for before, after in zip(chain, chain[1:]):
            last = before["checkpoints"][-1]
            assert (after["seq"], after["sub"]) == (last["seq"], last["sub"]), (stream, shard, last, after)
            resumed[f"{kind(after['host'])} after {kind(before['host'])}"] += 1
    print("processors resumed from the other kind's checkpoint:", dict(resumed))
    return resumed, set(lives)


def one_shape(worker: str, items: Iterable[dict], made_by_kclmp: Callable[[str], bool],
              leave_out: frozenset[str] = frozenset()) -> None:
    """Every lease item has the attributes, of the same types, of those kcl-mp created (its own
    attributes, the renewals' and ``leave_out`` aside)."""
    shapes = {item["leaseKey"]["S"]: {attribute: list(value) for attribute, value in item.items()
                                      if attribute not in KCLMP_OWN | RENEWED | leave_out} for item in items}
    kclmp_made = [shape for key, shape in shapes.items() if made_by_kclmp(key)]
    assert kclmp_made and all(shape == kclmp_made[0] for shape in shapes.values()), (worker, shapes)


def kind(host: str) -> str:
    return "Java" if host.startswith("java") else "kcl-mp"

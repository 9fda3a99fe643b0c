"""What a benchmark of a KCL 3.x fleet on one machine watches beside the lease table
(tests/support/harness.TableMonitor): each host's processes' CPU (``TreeMeter``), the fleet's
state items (the leader lock's owner, who has joined, a kcl-mp host's capacity), whether the
processors have a backlog (``caught_up``, from the recorder's files) and when the owners
have settled (``wait_stable``)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import procs

from kcl_mp.devtools.bench_figures import last_record


class TreeMeter(threading.Thread):
    """Every second, the CPU seconds of every process in each host's tree, its processors
    (whose command line holds ``processor``) apart; a process that ended keeps its last
    reading, so a processor that ends loses at most its last second."""

    def __init__(self, processor: str) -> None:
        super().__init__(daemon=True)
        self.marker = processor
        self.roots: dict[str, int] = {}
        self.seconds: dict[str, dict[int, float]] = {}
        self.processor: dict[int, bool] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def add(self, name: str, pid: int) -> None:
        with self.lock:
            self.roots[name] = pid
            self.seconds.setdefault(name, {})

    def sample(self) -> dict[str, tuple[float, float]]:
        """Now: per host, (all its processes', its processors') CPU seconds so far."""
        with self.lock:
            for name, root in self.roots.items():
                pids = procs.tree(root)
                for pid in pids:
                    if pid not in self.processor:
                        self.processor[pid] = self.marker in procs.cmdline(pid)
                self.seconds[name].update(procs.cpu_seconds(pids))
            return {name: (sum(s.values()), sum(v for pid, v in s.items() if self.processor.get(pid)))
                    for name, s in self.seconds.items()}

    def run(self) -> None:
        for _ in range(10_000_000):  # bounded by stop
            if self.stop.wait(1.0):
                return
            self.sample()


def _state_items(dynamodb: Any, app: str, key: str) -> list[dict]:
    """The coordinator-state or worker-metrics items (``key``: "Leader" or a worker id) found in
    either place a 3.x fleet keeps them: their own tables, or (KCL 3.5) the lease table."""
    from kcl_mp.fleet.state_store import StateTables

    found = []
    for tables in (StateTables.separate(app), StateTables.in_lease_table(app)):
        for table, column in ((tables.coordinator_table, tables.coordinator_key),
                              (tables.metrics_table, tables.metrics_key)):
            try:
                item = dynamodb.get_item(TableName=table, ConsistentRead=True, Key={column: {"S": key}}).get("Item")
            except Exception:  # noqa: BLE001, S112 (no such table)
                continue
            if item:
                found.append(item)
    return found


def leader(dynamodb: Any, app: str) -> str | None:
    """The leader lock's owner."""
    owners = [item["ownerName"]["S"] for item in _state_items(dynamodb, app, "Leader") if "ownerName" in item]
    return owners[0] if owners else None


def reporting(dynamodb: Any, app: str, worker: str) -> bool:
    """Whether ``worker`` has written its worker-metrics item: it has joined the 3.x fleet."""
    return any("ownerName" not in item for item in _state_items(dynamodb, app, worker))


def capacity(dynamodb: Any, app: str, worker: str) -> float | None:
    """The capacity a kcl-mp host wrote in its worker-metrics item (kclmpCores); None: a Java worker."""
    from kcl_mp.leases.rows import CORES

    cores = [float(item[CORES]["N"]) for item in _state_items(dynamodb, app, worker) if CORES in item]
    return cores[0] if cores else None


def caught_up(records: Path, shards: int, now: float, within_s: float) -> bool:
    """Whether the newest record of each of the ``shards`` shards (in its newest recorder file)
    was processed within the last ``within_s`` and at most ``within_s`` after it was put: no
    backlog left."""
    for shard in range(shards):
        files = sorted(records.glob(f"shardId-{shard:012d}.*.jsonl"), key=lambda f: f.stat().st_mtime)
        if not files:
            return False
        with open(files[-1], "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 8192))
            entry = last_record(f.read().decode(errors="replace"))
        if entry is None or now - entry["at"] > within_s or entry["at"] - entry["ts"] / 1000 > within_s:
            return False
    return True


def wait_stable(monitor: Any, hosts: dict[str, Any], stable_s: float, timeout_s: float) -> tuple[bool, float]:
    """Until the lease owners have not changed (and no handoff was under way) for ``stable_s``;
    (whether they did within ``timeout_s``, the time of the last change)."""
    began = last_change = time.time()
    last = None
    while time.time() < began + timeout_s:
        with monitor.lock:
            state = (tuple(sorted((k, lease.owner) for k, lease in monitor.latest.items())),
                     any(lease.checkpoint_owner for lease in monitor.latest.values()))
        if state != last or state[1]:
            last, last_change = state, time.time()
        elif time.time() - last_change >= stable_s:
            return True, last_change
        for name, host in hosts.items():
            if host.process.poll() is not None:
                raise RuntimeError(f"{name} exited with status {host.process.returncode}")
        time.sleep(0.5)
    return False, last_change

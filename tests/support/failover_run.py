"""A fleet of real kcl-mp hosts, faults injected one at a time, and what each fault cost.

``Fleet`` starts hosts (the recorder processor; each host's name in its records), keeps a
producer putting to every shard, and injects faults on whole hosts (SIGKILL, SIGSTOP and
SIGCONT of the supervisor, its pool processes and the processor children). ``recovery``
measures a fault from what the processors recorded: for each shard the faulted host was
delivering just before the fault, the time from the fault to the shard's next delivery by a
processor started after it (on any host). ``overlaps`` is the longest time, per shard, that
two hosts delivered it at once (the old holder still delivering after the new one began).
"""

from __future__ import annotations

import signal
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import boto3

from kcl_mp.devtools.producer import produce
from kcl_mp.embedded import wait_active

from .fault_run import _signal_all, _tree
from .harness import RECORDER, BackgroundProducer, Daemon, base_properties, recorded, wait_until, write_properties

RECENT_S = 3.0  # a host was delivering a shard if it delivered one of the shard's records this long before the fault


@dataclass(frozen=True)
class Delivery:
    shard: str
    host: str
    pid: int
    at: float  # when its processRecords reached the processor (the recorder's "got")


def deliveries(out: Path) -> list[Delivery]:
    """Every record delivery, with the host whose processor took it (from its initialize line)."""
    entries = recorded(out)
    hosts = {e["_pid"]: e.get("host", "?") for e in entries if e.get("event") == "initialize"}
    return sorted((Delivery(e["_shard"], hosts.get(e["_pid"], "?"), e["_pid"], e.get("got") or e["at"])
                   for e in entries if "event" not in e), key=lambda d: d.at)


def recovery(found: list[Delivery], host: str, at: float, resumed: float | None = None) -> dict[str, float | None]:
    """Per shard whose last delivery before ``at`` was ``host``'s, within RECENT_S: seconds from
    ``at`` to its first delivery by a processor that did not deliver before ``at`` (None: never).
    ``resumed``: when a paused host went on; from then its own processors count as well (nobody
    had taken the shard while it was stopped, and the shard flows again)."""
    last = {d.shard: d for d in found if d.at < at}  # found is in time order
    shards = {shard for shard, d in last.items() if d.host == host and d.at >= at - RECENT_S}
    old = {d.pid for d in found if d.at < at}
    out: dict[str, float | None] = {}
    for shard in sorted(shards):
        after = [d.at for d in found if d.shard == shard and d.at >= at
                 and (d.pid not in old or (resumed is not None and d.at >= resumed))]
        out[shard] = round(min(after) - at, 1) if after else None
    return out


def overlaps(found: list[Delivery]) -> dict[str, float]:
    """Per shard: the longest a processor went on delivering after another one (of another host)
    had begun delivering the shard."""
    by_shard: dict[str, list[Delivery]] = defaultdict(list)
    for d in found:
        by_shard[d.shard].append(d)
    out: dict[str, float] = {}
    for shard, seen in by_shard.items():
        first: dict[int, Delivery] = {}
        last: dict[int, float] = {}
        for d in seen:
            first.setdefault(d.pid, d)
            last[d.pid] = d.at
        worst = 0.0
        for pid, start in first.items():
            for other, end in last.items():
                if other != pid and first[other].host != start.host and first[other].at < start.at:
                    worst = max(worst, end - start.at)
        out[shard] = round(worst, 1)
    return out


class Fleet:
    def __init__(self, tmp: Path, moto_url: str, name: str, shards: int, **keys: object):
        self.tmp, self.name, self.shards = tmp, name, shards
        self.out = tmp / "out"
        self.out.mkdir(parents=True, exist_ok=True)
        self.kinesis = boto3.client("kinesis", endpoint_url=moto_url, region_name="us-east-1")
        self.dynamodb = boto3.client("dynamodb", endpoint_url=moto_url, region_name="us-east-1")
        self.app = name + "-app"
        props = base_properties(moto_url, name, self.app, f"{sys.executable} {RECORDER}", **keys)
        self.props = write_properties(tmp / "app.properties", **{k: v for k, v in props.items() if v is not None})
        self.hosts: dict[str, Daemon] = {}
        self.stopped: dict[str, Daemon] = {}
        self.kinesis.create_stream(StreamName=name, ShardCount=shards)
        wait_active(self.kinesis, name)
        self.producer = BackgroundProducer(
            lambda n: produce(self.kinesis, name, 40, first_id=n * 40, seed=n, keys=512), 0.2)

    def start(self, host: str) -> None:
        env = {"RECORDER_DIR": str(self.out), "RECORDER_CHECKPOINT_EVERY": "25", "RECORDER_HOST": host}
        self.hosts[host] = Daemon(self.props, self.tmp / f"{host}.log", "--log-format", "json",
                                  "--set", f"workerId={host}", env=env)

    def leader(self) -> str | None:
        item = self.dynamodb.get_item(TableName=self.app + "-CoordinatorState", Key={"key": {"S": "Leader"}},
                                      ConsistentRead=True).get("Item")
        return item["ownerName"]["S"] if item else None

    def delivering(self, hosts: set[str], within_s: float = RECENT_S) -> bool:
        """Every shard delivered within ``within_s``, and every host in ``hosts`` delivering one."""
        now = time.time()
        recent = [d for d in deliveries(self.out) if d.at > now - within_s]
        return len({d.shard for d in recent}) == self.shards and hosts <= {d.host for d in recent}

    def kill(self, host: str) -> float:
        """SIGKILL the host's whole tree; the time of the kill."""
        daemon = self.hosts.pop(host)
        processes = _tree(daemon)
        at = time.time()
        _signal_all(processes, signal.SIGKILL)
        daemon.wait(30)
        print(f"  {time.strftime('%H:%M:%S')} killed {host} ({len(processes)} processes)", flush=True)
        return at

    def pause(self, host: str, seconds: float) -> float:
        """SIGSTOP the host's whole tree for ``seconds``, then SIGCONT; the time of the stop."""
        processes = _tree(self.hosts[host])
        at = time.time()
        _signal_all(processes, signal.SIGSTOP)
        time.sleep(seconds)
        _signal_all(processes, signal.SIGCONT)
        print(f"  {time.strftime('%H:%M:%S')} paused {host} for {time.time() - at:.1f} s", flush=True)
        return at

    def wait_recovered(self, host: str, at: float, timeout: float) -> dict[str, float | None]:
        wait_until(lambda: None not in recovery(deliveries(self.out), host, at).values(), timeout,
                   f"the shards {host} delivered to be delivered again")
        return recovery(deliveries(self.out), host, at)

    def close(self) -> None:
        self.producer.stop.set()
        for daemon in self.hosts.values():
            for process in reversed(_tree(daemon)):
                _signal_all([process], signal.SIGKILL)
            daemon.kill()

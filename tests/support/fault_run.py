"""A seeded fault run: three real kcl-mp hosts on one lease table, an 8-shard stream on
kinesis-mock, the lease table on moto, both behind throttling proxies, a producer
throughout, and on a schedule drawn from the seed: SIGKILL of single processor children,
SIGKILL of a whole host (restarted a few seconds later), SIGSTOP of a host for longer than
failover plus a take interval (then SIGCONT), a throttling storm, a split and a merge.
In ``MODES`` "2x" (clientVersionConfig COMPATIBLE_WITH_2X: the 2.x take and steal rules) the
host killed and the host paused are drawn from the seed; in "default" (clientVersionConfig
unset: KCL 3.x, a leader assigns) both are the fleet's leader when the step runs (the lock
item's owner), the host whose loss costs the most.

``schedule(seed)`` is pure: the steps, printed at the start so a failure replays with
``KCLMP_FAULT_SEED=<seed>``. ``run(...)`` carries it out and returns the ``Facts`` the
judge (fault_judge.py) reads: what the producer put, what every processor recorded, each
host's log, and when each fault was injected.
"""

from __future__ import annotations

import json
import random
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import boto3
import psutil

from kcl_mp.devtools.producer import Put, produce
from kcl_mp.embedded import wait_active

from .harness import (
    RECORDER,
    BackgroundProducer,
    Daemon,
    TableMonitor,
    base_properties,
    recorded,
    records_only,
    wait_until,
    write_properties,
)
from .kinesis_mock import split_in_half
from .throttle_proxy import ThrottleProxy

HOSTS = ("host-a", "host-b", "host-c")
SHARDS = 8
FAILOVER_MS = 3000
TAKE_INTERVAL_S = 2 * (FAILOVER_MS + 25) / 1000  # what kcl-mp derives from failoverTimeMillis
PAUSE_S = FAILOVER_MS / 1000 + TAKE_INTERVAL_S + 2.0  # expired, and a scan of another host has taken it
THROTTLE_SHARE, STORM_SHARE, STORM_S = 0.05, 0.30, 4.0
PER_ROUND, ROUND_S = 15, 0.1  # the producer: 15 records every 0.1 s (about 100 a second under load)
MODES = {"2x": "CLIENT_VERSION_CONFIG_COMPATIBLE_WITH_2X", "default": None}
LEADER = "leader"  # a step's host: the fleet's leader when the step runs (default mode)


@dataclass(frozen=True)
class Step:
    at_s: float  # after the warm-up
    action: str  # kill_processor, kill_host, pause_host, storm, split, merge
    host: str = ""
    pick: int = 0  # which candidate (a processor, a shard, a pair of shards) in sorted order
    down_s: float = 0.0  # kill_host: how long the host stays down


def schedule(seed: int, mode: str = "2x") -> tuple[Step, ...]:
    """The faults in a seeded order, 3 to 6 s apart (each step starts after the one before
    it has finished: a host is back before the next fault)."""
    rng = random.Random(seed)
    actions = ["kill_processor", "kill_processor", "kill_host", "pause_host", "storm", "split", "merge"]
    rng.shuffle(actions)
    killed, paused = rng.sample(HOSTS, 2)
    if mode == "default":
        killed = paused = LEADER
    steps, at = [], 0.0
    for action in actions:
        host = {"kill_host": killed, "pause_host": paused, "kill_processor": rng.choice(HOSTS)}.get(action, "")
        down_s = round(rng.uniform(3.0, 5.0), 1) if action == "kill_host" else 0.0
        steps.append(Step(round(at, 1), action, host, rng.randrange(1000), down_s))
        at += rng.uniform(3.0, 6.0) + {"kill_host": down_s, "pause_host": PAUSE_S, "storm": STORM_S}.get(action, 1.0)
    return tuple(steps)


@dataclass
class Facts:
    """What happened, as the judge needs it (wall-clock times, time.time())."""
    seed: int
    steps: tuple[Step, ...]
    mode: str = "2x"
    puts: list[Put] = field(default_factory=list)
    entries: list[dict] = field(default_factory=list)  # every recorder line (harness.recorded)
    logs: dict[str, str] = field(default_factory=dict)  # host -> its whole log (JSON lines, every run)
    injected: list[dict] = field(default_factory=list)  # {"t", "action", "host", "shard", "pids", "until"}
    throttled: dict[str, dict] = field(default_factory=dict)  # service -> the proxy's counts
    backwards: list[str] = field(default_factory=list)  # checkpoints the table monitor saw go back
    exit_codes: dict[str, int | None] = field(default_factory=dict)
    parents: set[str] = field(default_factory=set)  # shards ended by a split or merge
    shard_parents: dict[str, list[str]] = field(default_factory=dict)  # child shard -> its parents
    seconds: float = 0.0
    began: float = 0.0  # the end of the warm-up: the first step's time 0

    def save(self, path: Path) -> None:
        """As JSON, to judge again later (``Facts.load``)."""
        path.write_text(json.dumps({**asdict(self), "parents": sorted(self.parents)}))

    @classmethod
    def load(cls, path: Path) -> Facts:
        raw = json.loads(path.read_text())
        return cls(**{**raw, "steps": tuple(Step(**s) for s in raw["steps"]), "puts": [Put(**p) for p in raw["puts"]],
                      "parents": set(raw["parents"])})


def _tree(daemon: Daemon) -> list[psutil.Process]:
    """The host: kcl-mp, its pool workers and the processor children (in their own sessions)."""
    try:
        root = psutil.Process(daemon.process.pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _signal_all(processes: list[psutil.Process], signum: int) -> None:
    for process in processes:
        try:
            process.send_signal(signum)
        except psutil.NoSuchProcess:
            pass


def _processors(daemon: Daemon, out: Path) -> list[tuple[str, int]]:
    """(shard, pid) of the host's live processor children, from the recorder's file names."""
    pids = {p.pid for p in _tree(daemon)[1:]}
    found = set()
    for path in out.glob("*.jsonl"):
        shard, pid, _ = path.name.rsplit(".", 2)
        if int(pid) in pids:
            found.add((shard, int(pid)))
    return sorted(found)


class FaultRun:
    def __init__(self, seed: int, tmp: Path, kinesis_url: str, moto_url: str, name: str, mode: str = "2x"):
        self.seed, self.tmp, self.name = seed, tmp, name
        self.out = tmp / "out"
        self.out.mkdir(parents=True, exist_ok=True)
        self.kinesis = boto3.client("kinesis", endpoint_url=kinesis_url, region_name="us-east-1")
        self.dynamodb = boto3.client("dynamodb", endpoint_url=moto_url, region_name="us-east-1")
        self.proxies = {"kinesis": ThrottleProxy(kinesis_url, "kinesis", seed=seed, share=THROTTLE_SHARE),
                        "dynamodb": ThrottleProxy(moto_url, "dynamodb", seed=seed, share=THROTTLE_SHARE)}
        keys = base_properties(
            self.proxies["dynamodb"].url, name, name + "-app", f"{sys.executable} {RECORDER}",
            kinesisEndpoint=self.proxies["kinesis"].url, failoverTimeMillis=FAILOVER_MS, maxRecords=500,
            shardSyncIntervalMillis=2000, parentShardPollIntervalMillis=500, idleTimeBetweenReadsInMillis=200,
            clientVersionConfig=MODES[mode])
        keys.pop("varianceBalancingFrequency")  # the default's (3): the fault runs measure the defaults
        self.props = write_properties(tmp / "app.properties", **{k: v for k, v in keys.items() if v is not None})
        self.hosts: dict[str, Daemon] = {}
        self.facts = Facts(seed, schedule(seed, mode), mode)

    def start_host(self, host: str) -> None:
        env = {"RECORDER_DIR": str(self.out), "RECORDER_CHECKPOINT_EVERY": "40", "RECORDER_HOST": host}
        self.hosts[host] = Daemon(self.props, self.tmp / f"{host}.log", "--log-format", "json",
                                  "--set", f"workerId={host}", env=env)

    def note(self, action: str, host: str = "", **more: object) -> None:
        self.facts.injected.append({"t": time.time(), "action": action, "host": host, **more})
        print(f"  {time.strftime('%H:%M:%S')} {action} {host} {more}", flush=True)

    # -- the faults ---------------------------------------------------------------

    def kill_processor(self, step: Step) -> None:
        candidates = _processors(self.hosts[step.host], self.out) or \
            [c for h in HOSTS for c in _processors(self.hosts[h], self.out)]
        if not candidates:
            self.note("kill_processor", step.host, skipped="no live processor")
            return
        shard, pid = candidates[step.pick % len(candidates)]
        owner = next(h for h in HOSTS if pid in {p.pid for p in _tree(self.hosts[h])})
        _signal_all([psutil.Process(pid)], signal.SIGKILL)
        self.note("kill_processor", owner, shard=shard, pids=[pid])

    def _host(self, step: Step) -> str:
        """The step's host: the lock item's owner for LEADER (a host of this run, or the step fails)."""
        if step.host != LEADER:
            return step.host
        item = self.dynamodb.get_item(TableName=self.name + "-app-CoordinatorState", Key={"key": {"S": "Leader"}},
                                      ConsistentRead=True).get("Item")
        owner = item["ownerName"]["S"] if item else None
        assert owner in self.hosts, f"the leader is {owner!r}, not a host of this run"
        return owner

    def kill_host(self, step: Step) -> None:
        host = self._host(step)
        processes = _tree(self.hosts[host])
        _signal_all(processes, signal.SIGKILL)
        self.note("kill_host", host, pids=[p.pid for p in processes], down_s=step.down_s)
        self.hosts[host].wait(30)
        time.sleep(step.down_s)
        self.start_host(host)
        self.note("restart_host", host)

    def pause_host(self, step: Step) -> None:
        host = self._host(step)
        processes = _tree(self.hosts[host])
        _signal_all(processes, signal.SIGSTOP)
        stopped = time.time()
        time.sleep(PAUSE_S)
        _signal_all(processes, signal.SIGCONT)
        self.facts.injected.append({"t": stopped, "action": "pause_host", "host": host, "until": time.time(),
                                    "pids": [p.pid for p in processes]})
        print(f"  paused {host} for {time.time() - stopped:.1f} s (SIGSTOP, then SIGCONT)", flush=True)

    def storm(self, step: Step) -> None:
        for proxy in self.proxies.values():
            proxy.set_share(STORM_SHARE)
        started = time.time()
        time.sleep(STORM_S)
        for proxy in self.proxies.values():
            proxy.set_share(THROTTLE_SHARE)
        self.facts.injected.append({"t": started, "action": "storm", "host": "", "until": time.time()})
        print(f"  storm: {STORM_SHARE:.0%} of requests throttled for {STORM_S:.0f} s", flush=True)

    def _open(self) -> list[dict]:
        shards = self.kinesis.list_shards(StreamName=self.name)["Shards"]
        return sorted((s for s in shards if "EndingSequenceNumber" not in s["SequenceNumberRange"]),
                      key=lambda s: int(s["HashKeyRange"]["StartingHashKey"]))

    def split(self, step: Step) -> None:
        shards = self._open()
        shard = shards[step.pick % len(shards)]
        split_in_half(self.kinesis, self.name, shard)
        self.facts.parents.add(shard["ShardId"])
        self.note("split", shard=shard["ShardId"])

    def merge(self, step: Step) -> None:
        shards = self._open()
        pairs = [(a, b) for a, b in zip(shards, shards[1:])
                 if int(a["HashKeyRange"]["EndingHashKey"]) + 1 == int(b["HashKeyRange"]["StartingHashKey"])]
        a, b = pairs[step.pick % len(pairs)]
        self.kinesis.merge_shards(StreamName=self.name, ShardToMerge=a["ShardId"], AdjacentShardToMerge=b["ShardId"])
        wait_active(self.kinesis, self.name)
        self.facts.parents |= {a["ShardId"], b["ShardId"]}
        self.note("merge", shard=f"{a['ShardId']}+{b['ShardId']}")

    # -- the run ------------------------------------------------------------------

    def run(self) -> Facts:
        started = time.monotonic()
        self.kinesis.create_stream(StreamName=self.name, ShardCount=SHARDS)
        wait_active(self.kinesis, self.name)
        producer = BackgroundProducer(
            lambda n: produce(self.kinesis, self.name, PER_ROUND, first_id=n * PER_ROUND, seed=n), ROUND_S)
        monitor = TableMonitor(self.dynamodb, self.name + "-app")
        producer.start()
        monitor.start()
        try:
            for host in HOSTS:
                self.start_host(host)
            wait_until(lambda: len({e["_shard"] for e in records_only(recorded(self.out))}) == SHARDS, 90,
                       "records from all shards")
            wait_until(lambda: min(monitor.owners().get(h, 0) for h in HOSTS) >= 2, 90,
                       "every host holding two leases")
            origin, self.facts.began = time.monotonic(), time.time()
            for step in self.facts.steps:
                time.sleep(max(0.0, origin + step.at_s - time.monotonic()))
                getattr(self, step.action)(step)
            time.sleep(5.0)
            producer.finish()
            self.facts.shard_parents = {
                s["ShardId"]: [s[k] for k in ("ParentShardId", "AdjacentParentShardId") if s.get(k)]
                for s in self.kinesis.list_shards(StreamName=self.name)["Shards"] if s.get("ParentShardId")}
            self.facts.puts = list(producer.puts)
            wanted = {p.data for p in self.facts.puts}
            wait_until(lambda: wanted <= {e["data"] for e in records_only(recorded(self.out))}, 120,
                       f"all {len(wanted)} records delivered", interval=1.0)
            time.sleep(2.0)  # the last checkpoints
            for daemon in self.hosts.values():
                daemon.signal()
            for host, daemon in self.hosts.items():
                try:
                    self.facts.exit_codes[host] = daemon.wait(60)
                except Exception:  # still running after 60 s: judged as an unclean exit
                    self.facts.exit_codes[host] = None
        finally:
            producer.stop.set()
            monitor.stop.set()
            for daemon in self.hosts.values():
                for process in reversed(_tree(daemon)):  # whatever is left (only after a failure)
                    _signal_all([process], signal.SIGKILL)
                daemon.kill()
            for proxy in self.proxies.values():
                proxy.stop()
            monitor.join(5)
        self.facts.puts = self.facts.puts or list(producer.puts)
        self.facts.entries = recorded(self.out)
        self.facts.logs = {host: (self.tmp / f"{host}.log").read_text(errors="replace") for host in HOSTS}
        self.facts.throttled = {service: {**proxy.counts, "slowest": proxy.slowest}
                                for service, proxy in self.proxies.items()}
        self.facts.backwards = list(monitor.backwards)
        self.facts.seconds = time.monotonic() - started
        self.facts.save(self.tmp / "facts.json")
        return self.facts

"""Running the real ``kcl-mp`` CLI as a subprocess, and reading what processors recorded."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from kcl_mp.leases.lease import Lease
from kcl_mp.leases.rows import read_items
from kcl_mp.leases.table import LeaseTable
from kcl_mp.sequence import ExtendedSequenceNumber

ROOT = Path(__file__).resolve().parents[2]
RECORDER = ROOT / "tests" / "processors" / "recorder.py"

# What a Java KCL 3.5 fleet keeps in the lease table beside the leases (tests/fixtures): the
# fixture's fleet_rows, a single-table fleet of two Java workers just rolled back to 2.x, a
# state in which a kcl-mp host must write none of them whatever its clientVersionConfig (the
# fixture's fleet_rows_note says why this state).
JAVA_ROWS = json.loads((ROOT / "tests" / "fixtures" / "java_kcl_3.5_rows.json").read_text())["fleet_rows"]


def put_java_rows(dynamodb, table: str) -> list[dict]:
    """Put the rows of a Java KCL 3.5 fleet's lease table that are not leases (creating the
    table first); the items as DynamoDB then returns them, to compare with later. Tests use
    it through the ``java_rows`` fixture (tests/conftest.py), which compares at teardown."""
    LeaseTable(dynamodb, table).ensure_table()
    for item in JAVA_ROWS:
        dynamodb.put_item(TableName=table, Item=item)
    return [_raw(dynamodb, table, item["leaseKey"]) for item in JAVA_ROWS]


def assert_java_rows_untouched(dynamodb, table: str, before: list[dict]) -> None:
    """Byte for byte: each row's raw item now, as canonical JSON, is what it was."""
    for item in before:
        now = _raw(dynamodb, table, item["leaseKey"])
        assert json.dumps(now, sort_keys=True) == json.dumps(item, sort_keys=True), item["leaseKey"]


def _raw(dynamodb, table: str, key: dict) -> dict:
    return dynamodb.get_item(TableName=table, Key={"leaseKey": key}, ConsistentRead=True)["Item"]


NOT_LEASES = {"Leader", "Migration3.0", "TableMigration3.5", "java-worker-1", "java-worker-2"}  # java_rows' rows


def log_events(text: str, *names: str) -> list[dict]:
    """The entries of a host's JSON log (``--log-format json``) whose ``event`` is one of ``names``."""
    return [entry for _, entry in log_lines(text) if entry.get("event") in names]


def assert_takers_count_only_leases(log: str, possible: range) -> None:
    """Every 2.x taker round (the JSON log's ``taker_plan``) counts the leases alone: a possible
    number of unfinished leases, the target that number shared among the live workers, and no
    event names a row that is not a lease."""
    plans = log_events(log, "taker_plan")
    assert plans, "no taker_plan event"
    for plan in plans:
        assert plan["leases"] in possible and plan["target"] == math.ceil(plan["leases"] / plan["workers"]), plan
    named = {entry["lease"] for _, entry in log_lines(log) if entry.get("lease")}
    named |= {key for plan in plans for key in (*plan["take"], *plan["steal"])}
    assert not named & NOT_LEASES, sorted(named & NOT_LEASES)


def kcl_versions(default: str) -> tuple[str, ...]:
    """The Java KCL cores a Java fleet test runs against: ``$KCLMP_TEST_KCL_VERSIONS``
    (comma-separated, each a key of ``java_daemon.KCL_VERSIONS``), else the test's ``default``
    (`make test` carries each core in some test; ``make test-java-versions`` runs the fleet
    tests on every core)."""
    from kcl_mp.devtools.java_daemon import KCL_VERSIONS

    chosen = tuple(v.strip() for v in os.environ.get("KCLMP_TEST_KCL_VERSIONS", default).split(",") if v.strip())
    unknown = [v for v in chosen if v not in KCL_VERSIONS]
    if unknown or not chosen:
        raise ValueError(f"KCLMP_TEST_KCL_VERSIONS: {unknown or 'empty'}; known: {', '.join(KCL_VERSIONS)}")
    return chosen


def run_support_module(module: str, out: Path, *args: str, timeout: float) -> dict:
    """Run ``python -m tests.support.<module> OUT ARGS`` (a Java peer's run, which enters its
    loopback namespace itself) and return the result.json it left in ``out``."""
    run = subprocess.run([sys.executable, "-m", f"tests.support.{module}", str(out), *args], cwd=ROOT,
                         capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False)
    assert run.returncode == 0 and (out / "result.json").exists(), run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads((out / "result.json").read_text())


class EmbeddedHost:
    """``kcl-mp --embedded`` with the recorder (2 shards a stream, worker host-e) and the
    ``kcl-mp leases --embedded`` command that reads its emulator."""

    def __init__(self, tmp_path: Path, app: str, **stream_keys: object):
        props = write_properties(tmp_path / "app.properties", executableName=f"{sys.executable} {RECORDER}",
                                 applicationName=app, regionName="us-east-1", failoverTimeMillis=3000,
                                 metricsLevel="NONE", **stream_keys)
        self.daemon = Daemon(props, tmp_path / "host.log", "--embedded", "--embedded-shards", "2", "--set",
                             "workerId=host-e", env={"RECORDER_DIR": str(tmp_path)})
        self.command = [sys.executable, "-m", "kcl_mp", "leases", "-p", str(props), "--embedded"]
        self.shown: list[subprocess.CompletedProcess] = []  # every `kcl-mp leases` run, the last one last

    def leases(self) -> subprocess.CompletedProcess:
        self.shown.append(subprocess.run(self.command, cwd=ROOT, capture_output=True, text=True, timeout=30))
        return self.shown[-1]

    def wait_for_leases(self, line: str, what: str) -> None:
        """Once the emulator is up, until ``kcl-mp leases`` prints ``line``."""
        wait_until(lambda: "its endpoint is in" in self.daemon.output(), 60, "the embedded emulator")
        wait_until(lambda: line in self.leases().stdout, 60, what, interval=1.0)


def write_properties(path: Path, **keys: object) -> Path:
    path.write_text("".join(f"{k} = {v}\n" for k, v in keys.items()))
    return path


def base_properties(moto_url: str, stream: str, app: str, executable: str, **more: object) -> dict[str, object]:
    keys: dict[str, object] = {
        "executableName": executable,
        "streamName": stream,
        "applicationName": app,
        "AwsCredentialsProvider": "EnvironmentVariableCredentialsProvider",
        "regionName": "us-east-1",
        "kinesisEndpoint": moto_url,
        "dynamoDBEndpoint": moto_url,
        "initialPositionInStream": "TRIM_HORIZON",
        "maxRecords": 2000,
        # a read every 0.5 s a shard: each GetRecords costs moto about 3 ms of CPU and kcl-mp 2.5 ms,
        # and the tests share two cores (a test that needs a faster reader sets its own)
        "idleTimeBetweenReadsInMillis": 500,
        "failoverTimeMillis": 6000,
        "shutdownGraceMillis": 15000,
        "metricsLevel": "NONE",
        # Java's mode with the 2.x take and steal rules, which most tests assert (the default is 3.x).
        "clientVersionConfig": "CLIENT_VERSION_CONFIG_COMPATIBLE_WITH_2X",
        # in 3.x mode, a joining or returning host's share at the next round, not up to the third
        # (Java's default 3: its decision table is tests/unit/test_assignment_round.py; the fault
        # runs and bench/cost_fleet.py keep the default)
        "varianceBalancingFrequency": 1,
    }
    keys.update(more)
    return keys


class Daemon:
    """``kcl-mp`` in its own process group, its output in a file."""

    def __init__(self, properties: Path, log: Path, *extra: str, env: dict[str, str] | None = None):
        self.log_path = log
        self._log = open(log, "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "kcl_mp", "--properties", str(properties), *extra],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})}, cwd=str(ROOT), start_new_session=True,
        )

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def signal(self, signum: int = signal.SIGTERM) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signum)

    def wait(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout)
        finally:
            self._log.close()

    def stop_gracefully(self, timeout: float = 60.0) -> None:
        """SIGTERM, then the exit status must be 0 (the log's tail says why if not)."""
        self.signal()
        code = self.wait(timeout)
        assert code == 0, f"exit status {code}:\n{self.output()[-3000:]}"

    def kill(self) -> None:
        """End the daemon's whole process group (it and whatever it started)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        self._log.close()


def wait_until(condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


# recorded()'s lines already read, per directory (the last few) and file: (bytes read, entries).
# Tests poll recorded() every half second while thousands of records arrive; reading each file
# whole every time cost a fleet test 15 s of its own CPU beside the hosts it timed.
_READ: OrderedDict[Path, dict[Path, tuple[int, list[dict]]]] = OrderedDict()
_READ_DIRECTORIES = 8


def recorded(directory: Path) -> list[dict]:
    """Every line every recorder child wrote, with the file's shard and pid (the same entries
    each call: read them, do not change them; call it from one thread, as every test does)."""
    files = _READ.pop(directory, {})
    _READ[directory] = files
    while len(_READ) > _READ_DIRECTORIES:
        _READ.popitem(last=False)
    out = []
    for path in sorted(directory.glob("*.jsonl")):
        shard, pid, _ = path.name.rsplit(".", 2)
        done, entries = files.get(path, (0, []))
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size < done:  # written anew: read it again
                done, entries = 0, []
            f.seek(done)
            more = f.read()
        # A processor may be writing as we read: its last line may be incomplete. Only lines
        # ended by a newline are whole; the rest is read again next time.
        whole = more.rfind(b"\n") + 1
        for line in more[:whole].split(b"\n")[:-1]:
            if line.strip():
                entry = json.loads(line)
                entry["_shard"], entry["_pid"] = shard, int(pid)
                entries.append(entry)
        files[path] = (done + whole, entries)
        out.extend(entries)
    return out


def records_only(entries: list[dict]) -> list[dict]:
    return [e for e in entries if "event" not in e]


def changes_delivered(out: Path) -> list[dict]:
    """Every record of a DynamoDB stream delivered, oldest first, with its change decoded
    (``key``: the item's ``pk``, ``change``: INSERT, MODIFY n (its ``v``), REMOVE or REMOVE ttl)
    and the host that got it."""
    entries = recorded(out)
    hosts = {e["_pid"]: e["host"] for e in entries if e.get("event") == "initialize"}
    got = []
    for entry in sorted(records_only(entries), key=lambda e: e["at"]):
        change = json.loads(entry["data"])
        image = change["dynamodb"].get("NewImage") or {}
        name = change["eventName"]
        if name == "MODIFY":
            name = f"MODIFY {image['v']['N']}"
        elif name == "REMOVE" and change.get("userIdentity", {}).get("type") == "Service":
            name = "REMOVE ttl"
        got.append({**entry, "key": change["dynamodb"]["Keys"]["pk"]["S"], "change": name,
                    "host": hosts.get(entry["_pid"])})
    return got


class BackgroundProducer(threading.Thread):
    """Calls ``put(n)`` for n = 0, 1, 2... every ``every_s`` until stopped, keeping what each
    call returns (the puts Kinesis reported); an error ends it and ``finish`` raises it.
    ``paced``: round n at the start + n x every_s however long a put takes (by default it
    waits every_s after each put, so a busy emulator lowers the rate)."""

    def __init__(self, put: Callable[[int], list[Any]], every_s: float, paced: bool = False):
        super().__init__(daemon=True)
        self.put, self.every_s, self.paced = put, every_s, paced
        self.puts: list[Any] = []
        self.rounds = 0
        self.stop = threading.Event()
        self.errors: list[BaseException] = []

    def run(self) -> None:
        began = time.monotonic()
        for n in range(100_000):  # bounded
            if self.stop.is_set():
                return
            try:
                self.puts.extend(self.put(n))
            except Exception as exc:  # surfaced by finish()
                self.errors.append(exc)
                return
            self.rounds = n + 1
            self.stop.wait(max(0.0, began + (n + 1) * self.every_s - time.monotonic()) if self.paced else self.every_s)

    def finish(self) -> None:
        self.stop.set()
        self.join(10)
        assert not self.errors, self.errors


class TableMonitor(threading.Thread):
    """Polls the lease table: ownership over time, and any checkpoint that went backwards.
    ``history``: per lease, each change of (owner, checkpoint) with its wall-clock time."""

    def __init__(self, dynamodb, table: str):
        super().__init__(daemon=True)
        self.dynamodb, self.table = dynamodb, table
        self.stop = threading.Event()
        self.latest: dict[str, Lease] = {}
        self.backwards: list[str] = []
        self.history: dict[str, list[tuple[float, str | None, str | None]]] = {}
        self.lock = threading.Lock()

    def run(self) -> None:
        best: dict[str, ExtendedSequenceNumber] = {}
        for _ in range(100_000):  # bounded
            if self.stop.wait(0.25):
                return
            try:
                items = self.dynamodb.scan(TableName=self.table, ConsistentRead=True)["Items"]
            except Exception:
                continue  # the table may not exist yet
            leases = {lease.key: lease for lease in read_items(items).leases}
            now = time.time()
            for key, lease in leases.items():
                seen = (lease.owner, None if lease.checkpoint is None else str(lease.checkpoint))
                changes = self.history.setdefault(key, [])
                if not changes or changes[-1][1:] != seen:
                    changes.append((now, *seen))
                if lease.checkpoint is None:
                    continue
                if key in best and lease.checkpoint < best[key]:
                    self.backwards.append(f"{key}: {best[key]} -> {lease.checkpoint}")
                if key not in best or lease.checkpoint > best[key]:
                    best[key] = lease.checkpoint
            with self.lock:
                self.latest = leases

    def owners(self) -> Counter:
        with self.lock:
            return Counter(lease.owner for lease in self.latest.values())

    def settled(self, leases: int) -> bool:
        """All ``leases`` exist and no handoff is under way."""
        with self.lock:
            return len(self.latest) == leases and not any(lease.checkpoint_owner for lease in self.latest.values())


def stop_all(hosts: dict[str, Daemon], timeout: float = 60.0) -> None:
    """SIGTERM every host at once (their leases are released together, none taken over by
    another one stopping), then each must exit 0 (the log's tail says why if not)."""
    for daemon in hosts.values():
        daemon.signal()
    for name, daemon in hosts.items():
        code = daemon.wait(timeout)
        assert code == 0, f"{name}: exit status {code}:\n{daemon.output()[-3000:]}"


def log_lines(text: str) -> list[tuple[float, dict]]:
    """A host's JSON log (``--log-format json``): (wall-clock time, entry) for each line."""
    out = []
    for line in text.splitlines():
        if not line.startswith("{"):
            continue
        try:
            entry = json.loads(line)
            out.append((datetime.strptime(entry["ts"], "%Y-%m-%dT%H:%M:%S.%f").timestamp(), entry))
        except (ValueError, KeyError):  # the last line of a killed host may be cut short
            continue
    return out

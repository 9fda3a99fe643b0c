"""Hostile input at kcl-mp's edges (issue 27; security review findings 2, 7, 8, 9): real
daemons on moto, a real processor, real sockets and real processes.

- 500 idle connections to the metrics port, the metrics process limited to 256 open files
  (the review's stand-in for a unit's LimitNOFILE): /healthz answers within the shipped
  probe's timeout throughout, and the metrics process keeps its few threads.
- A lease key with a newline and a processor's stderr with ESC sequences, C1 controls and
  U+2028: no forged line, no raw control character in the log.
- A processor printing the host's credentials, resolved from a profile (not in the
  environment), JSON-escaped, URL-encoded, and cut by the 64 KiB stderr limit: none of it
  in the log; nor those STS returned to a client.
- A pid that is no longer the process started (another start time) is not signalled; the
  processes a reaped leader left in its group are, unless a newcomer holds the pid.
"""

from __future__ import annotations

import logging
import os
import resource
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote

import psutil
import pytest

from kcl_mp import logs
from kcl_mp.aws.clients import client
from kcl_mp.config import ClientSettings, CredentialProvider
from kcl_mp.embedded import ensure_stream, free_port
from kcl_mp.leases.table import LeaseTable
from kcl_mp.worker.usage import Watch, signal_group, start_time

from ..support.harness import Daemon, base_properties, wait_until, write_properties

# healthz answering within its timeout beside 500 idle connections is a wall-clock bound
pytestmark = [pytest.mark.integration, pytest.mark.timing]

PROBE_TIMEOUT_S = 5.0  # deploy/kubernetes/kcl-mp.yaml: livenessProbe timeoutSeconds
IDLE_CONNECTIONS = 500
METRICS_NOFILE = 256
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEYq"  # the profile's secret key: in no environment
ACCESS_KEY = "AKIAHOSTILEEDGES0001"
FORGED = "2026-11-25T15:00:00.000 ERROR   worker=host-sec shard=- AccessDenied: stream deleted, exiting"
CUT_AT = 64 * 1024

PROCESSOR = """\
import json, os, sys
for line in sys.stdin:
    action = json.loads(line)["action"]
    if action == "checkpoint":
        continue  # the answer to a checkpoint: none is asked for
    if action == "initialize":
        with open(os.environ["HOSTILE_STDERR"], "rb") as f:
            sys.stderr.buffer.write(f.read())
        sys.stderr.flush()
    print(json.dumps({"action": "status", "responseFor": action}), flush=True)
"""


def _healthz(port: int) -> tuple[int, float]:
    """The probe's status (0: no answer within its timeout, or refused) and how long it took."""
    started = time.monotonic()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=PROBE_TIMEOUT_S) as answer:
            status = answer.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except OSError:
        status = 0
    return status, time.monotonic() - started


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def _files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _metrics_pid(daemon: Daemon) -> int:
    line = next(line for line in daemon.output().splitlines() if "metrics process started (pid " in line)
    return int(line.split("metrics process started (pid ")[1].split(")")[0])


def _daemon(tmp_path: Path, moto_url: str, stream: str, app: str, stderr: bytes, *extra: str,
            env: dict[str, str] | None = None, **keys: object) -> Daemon:
    (tmp_path / "processor.py").write_text(PROCESSOR)
    (tmp_path / "stderr.bin").write_bytes(stderr)
    props = write_properties(tmp_path / "app.properties", **base_properties(
        moto_url, stream, app, f"{sys.executable} {tmp_path / 'processor.py'}", workerId="host-sec", **keys))
    return Daemon(props, tmp_path / "kcl-mp.log", *extra,
                  env={"HOSTILE_STDERR": str(tmp_path / "stderr.bin"), **(env or {})})


def test_500_idle_connections_leave_healthz_answering_and_threads_bounded(moto_url, kinesis, unique_name, tmp_path):
    ensure_stream(kinesis, unique_name, 1)
    port = free_port()
    daemon = _daemon(tmp_path, moto_url, unique_name, unique_name, b"", "--metrics-port", str(port),
                     "--metrics-address", "127.0.0.1")
    held: list[socket.socket] = []
    try:
        wait_until(lambda: _healthz(port)[0] == 200 if daemon.process.poll() is None else True, 60,
                   "/healthz 200: the lease held and renewed")
        assert daemon.process.poll() is None, daemon.output()[-3000:]
        pid = _metrics_pid(daemon)
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (METRICS_NOFILE, METRICS_NOFILE))
        threads_before, files_before = _threads(pid), _files(pid)
        probes: list[tuple[int, float]] = []
        threads_seen: list[int] = []
        files_seen: list[int] = []
        done = threading.Event()

        def probe() -> None:  # the kubelet: a new connection each time, throughout
            while not done.is_set():
                probes.append(_healthz(port))
                threads_seen.append(_threads(pid))
                files_seen.append(_files(pid))
                done.wait(0.1)

        prober = threading.Thread(target=probe, daemon=True)
        prober.start()
        for _ in range(IDLE_CONNECTIONS):
            client = socket.create_connection(("127.0.0.1", port), timeout=PROBE_TIMEOUT_S)
            client.sendall(b"GET /metrics HTTP/1.1\r\n")  # and nothing more
            held.append(client)
        opened_at = time.monotonic()
        time.sleep(7.0)  # past the 5 s an idle connection is given
        done.set()
        prober.join(PROBE_TIMEOUT_S + 1)
        closed = 0
        for client in held:
            client.settimeout(0.5)
            try:
                closed += client.recv(1) == b""
            except OSError:
                closed += 1
        slowest = max(seconds for _, seconds in probes)
        print(f"{IDLE_CONNECTIONS} idle connections (metrics process limited to {METRICS_NOFILE} open files): "
              f"{len(probes)} /healthz probes, all {sorted({s for s, _ in probes})}, slowest {slowest * 1000:.0f} ms; "
              f"metrics process threads {threads_before} before, at most {max(threads_seen)} during, open files "
              f"{files_before} before, at most {max(files_seen)} during; "
              f"{closed} of {IDLE_CONNECTIONS} closed by the server {time.monotonic() - opened_at:.1f} s after "
              f"the last was opened")
        assert len(probes) >= 20 and all(status == 200 for status, _ in probes), probes
        assert slowest < PROBE_TIMEOUT_S
        assert max(threads_seen) <= threads_before, "a thread per connection"
        assert closed == IDLE_CONNECTIONS, "idle connections must be closed by the server"
        assert _healthz(port)[0] == 200
        daemon.stop_gracefully()
    finally:
        for client in held:
            client.close()
        daemon.kill()


def test_forged_lines_and_terminal_escapes_are_escaped_and_cut_secrets_redacted(
        moto_url, kinesis, dynamodb, unique_name, tmp_path):
    """Text logs: a lease key with a newline, processor stderr with ESC, C1 and U+2028,
    the profile's credentials printed whole, JSON-escaped, URL-encoded and cut at 64 KiB."""
    ensure_stream(kinesis, unique_name, 1)
    escaped = SECRET.replace("/", "\\/")
    stderr = "\n".join([
        "\x1b[2K\x1b[1A\x1b[31mERROR fake\x1b]0;pwned-title\x07",
        "next\u2028line\x85and\x9b31m",
        f'{{"aws_secret_access_key": "{escaped}", "id": "{ACCESS_KEY}"}}',
        f"https://example.com/?X-Amz-Credential={quote(SECRET, safe='')}",
        "y" * (CUT_AT - 10) + SECRET + " and more after the cut",
        "",
    ]).encode()
    credentials = tmp_path / "credentials"
    credentials.write_text(f"[hostile]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET}\n")
    # a lease row whose key carries a whole forged log line, there from the start: whether
    # the host takes it or lists it apart, it logs the key
    LeaseTable(dynamodb, unique_name).ensure_table()
    dynamodb.put_item(TableName=unique_name, Item={
        "leaseKey": {"S": "shardId-000000000777\n" + FORGED}, "leaseCounter": {"N": "1"},
        "checkpoint": {"S": "TRIM_HORIZON"}, "checkpointSubSequenceNumber": {"N": "0"},
        "ownerSwitchesSinceCheckpoint": {"N": "0"}})
    daemon = _daemon(tmp_path, moto_url, unique_name, unique_name, stderr,
                     env={"AWS_SHARED_CREDENTIALS_FILE": str(credentials)},
                     AwsCredentialsProvider="ProfileCredentialsProvider|hostile")
    try:
        wait_until(lambda: "[cut: " in daemon.output() or daemon.process.poll() is not None, 60,
                   "the processor's cut stderr line in the log")
        wait_until(lambda: "000777" in daemon.output() or daemon.process.poll() is not None, 30,
                   "the forged lease key in the log")
        assert daemon.process.poll() is None, daemon.output()[-3000:]
        daemon.stop_gracefully()
    finally:
        daemon.kill()
    raw = daemon.log_path.read_bytes()
    log = raw.decode()
    lines = log.splitlines()
    # no line is forged, no control character reaches the terminal
    assert not any(line.startswith(FORGED[:40]) for line in lines), "a lease key forged a log line"
    assert "shardId-000000000777\\n" + FORGED in log, "the key is logged, its newline escaped"
    assert not any(ord(c) < 0x20 and c not in "\n" or 0x7F <= ord(c) < 0xA0 or c in "\u2028\u2029" for c in log)
    assert "\\x1b[2K\\x1b[1A\\x1b[31mERROR fake\\x1b]0;pwned-title\\x07" in log
    assert "next\\u2028line\\x85and\\x9b31m" in log
    # no form or start of the profile's secret; the cut line ends redacted
    for leak in (SECRET, escaped, quote(SECRET, safe=""), SECRET[:10], ACCESS_KEY, ACCESS_KEY[:12]):
        assert leak not in log, f"{leak!r} in the log"
    cut = [line for line in lines if "[cut: " in line]
    assert cut and all(line.split(" ... [cut: ")[0].endswith("y[redacted]") for line in cut), cut[0][-200:]
    assert log.count("[redacted]") >= 4 * len(cut)
    print(f"hostile text: {len(lines)} log lines, none forged, no control character, "
          f"{log.count('[redacted]')} redactions, {len(cut)} cut line(s) ending '...y[redacted] ... [cut: ...'")


def test_credentials_sts_returns_are_scrubbed_from_the_first_signed_request(moto_url, capsys):
    """STS's credentials are deferred (resolved by the first request): that request's
    signing hands them to the scrubber, so a line logged after it cannot show them."""
    provider = CredentialProvider("StsAssumeRoleCredentialsProvider",
                                  ("arn:aws:iam::123456789012:role/reader", "kcl-mp-hostile"),
                                  (("endpoint", f"{moto_url}^us-east-1"),))
    kinesis = client("kinesis", ClientSettings("us-east-1", moto_url, (provider,)))
    kinesis.list_streams()
    frozen = kinesis._request_signer._credentials.get_frozen_credentials()
    logs.setup("INFO", "json", "w-1")
    try:
        logging.getLogger("kcl_mp.test").error("processor stderr: %s %s %s", frozen.secret_key,
                                               frozen.token.replace("/", "\\/"), quote(frozen.access_key, safe=""))
        err = capsys.readouterr().err
    finally:
        logs.setup("WARNING", "text")
    assert frozen.secret_key[:12] not in err and frozen.token[:12] not in err and frozen.access_key[:12] not in err
    assert err.count(logs.REDACTED) == 3, err


def _sleeper() -> subprocess.Popen[bytes]:
    """A ``sleep 60`` in its own group, once it runs ``sleep`` (read just after the fork, its
    memory can show as 0 while it execs: the sampler's limit of 1 byte would not trip)."""
    process = subprocess.Popen(["sleep", "60"], start_new_session=True)
    wait_until(lambda: psutil.Process(process.pid).cmdline()[:1] == ["sleep"]
               and psutil.Process(process.pid).memory_info().rss > 0, 5, "sleep running", 0.01)
    return process


def test_a_stale_pid_is_not_signalled():
    """The start time names the process: a pid whose start time is not the one recorded is
    another process (the pid was reused) and is left alone; the right one is signalled."""
    leader = _sleeper()
    started = start_time(leader.pid)
    assert started is not None
    try:
        assert not signal_group(leader.pid, started + 1, signal.SIGTERM), "signalled a reused pid"
        assert not signal_group(leader.pid, None, signal.SIGTERM)
        # the memory limit's sampler: a child over the limit, but its pid now another process
        watch = Watch("shardId-0", leader.pid, started + 1, limit_bytes=1)
        assert watch.sample(time.monotonic()) is not None and watch.over_limit is not None
        time.sleep(0.2)
        assert leader.poll() is None, "the sampler killed a process that is not its processor"
        assert signal_group(leader.pid, started, signal.SIGTERM)
        assert leader.wait(5) == -signal.SIGTERM
        assert not signal_group(leader.pid, started, signal.SIGKILL), "signalled a reaped pid"
    finally:
        if leader.poll() is None:
            leader.kill()
            leader.wait(5)


def test_a_reaped_leaders_group_is_signalled_only_while_no_newcomer_has_its_pid():
    script = textwrap.dedent("""\
        sleep 60 &
        echo $!
    """)
    leader = subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE, start_new_session=True)
    assert leader.stdout is not None
    with leader.stdout:
        left = int(leader.stdout.readline())
    started = start_time(leader.pid)
    assert leader.wait(5) == 0  # reaped: its pid is free for a newcomer, its group lives on in `left`
    newcomer = _sleeper()
    try:
        # a newcomer holding a pid: never signalled as a reaped leader's group
        assert not signal_group(newcomer.pid, start_time(newcomer.pid), signal.SIGKILL, leader_reaped=True)
        assert newcomer.poll() is None
        assert start_time(left) is not None and os.getpgid(left) == leader.pid
        assert signal_group(leader.pid, started, signal.SIGKILL, leader_reaped=True)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and _alive(left):
            time.sleep(0.05)
        assert not _alive(left), "what the reaped leader left in its group still runs"
    finally:
        newcomer.kill()
        newcomer.wait(5)
        if _alive(left):
            os.kill(left, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its new parent to reap it counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


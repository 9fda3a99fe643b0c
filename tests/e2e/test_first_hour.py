"""A newcomer's first hour, replayed (issue 29): the demo, healthy, logs no ERROR line and
ends with what to do next; a crash-looping shard shows as such in the live view and in
``kcl-mp leases``, logs one ERROR for its first failure and one summing the loop up, and its
released lease is left alone by its host for the promised time, in the default (3.x) mode,
where the host leads the fleet alone and must not assign it back to itself, and in the 2.x mode."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from kcl_mp.devtools.producer import produce
from kcl_mp.embedded import ensure_stream

from ..support.harness import RECORDER, ROOT, Daemon, EmbeddedHost, base_properties, wait_until, write_properties

pytestmark = pytest.mark.integration

FAULTY = "shardId-000000000001"


def test_a_healthy_demo_logs_no_error_and_says_what_next(tmp_path, unique_name):
    """``make demo``'s script on its own properties (the demo's processor, run by this Python)."""
    demo = (ROOT / "examples" / "demo" / "app.properties").read_text()
    demo = re.sub(r"(?m)^executableName = \S+", f"executableName = {sys.executable}", demo)
    demo = re.sub(r"(?m)^(streamName|applicationName) = .*$", rf"\1 = {unique_name}", demo)
    props = tmp_path / "demo.properties"
    props.write_text(demo)
    run = subprocess.run([sys.executable, "examples/demo/run_demo.py", "--properties", str(props),
                          "--records", "2000", "--rate", "2000", "--timeout", "60"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, stdin=subprocess.DEVNULL)
    log_path = ROOT / "run" / f"{unique_name}.log"  # where the demo puts kcl-mp's log
    log = log_path.read_text()
    log_path.unlink()
    assert run.returncode == 0, run.stdout[-3000:] + log[-3000:]
    assert "all 2000 records processed and checkpointed" in run.stdout, run.stdout[-3000:]
    assert "kcl-mp exited with status 0" in run.stdout
    errors = [line for line in log.splitlines() if " ERROR " in line]
    assert errors == [], errors
    assert "processor stderr: " in log  # the processor's stderr is logged, not as an error
    assert "records: delivered to this shard's processors" in run.stdout  # the legend
    assert re.search(r"shardId-\d+\s+\d+\s+\d+\s+\S+\s+\S+\s+running", run.stdout), run.stdout[-3000:]
    assert "next steps:" in run.stdout and "kcl-mp check-config" in run.stdout


@pytest.mark.parametrize("mode", ["CLIENT_VERSION_CONFIG_3X", "CLIENT_VERSION_CONFIG_COMPATIBLE_WITH_2X"])
def test_a_crash_loop_is_shown_and_its_lease_left_alone(tmp_path, kinesis, dynamodb, moto_url, unique_name, mode):
    ensure_stream(kinesis, unique_name, 2)
    produce(kinesis, unique_name, 40, aggregated_share=0.0, keys=16, seed=1)  # records on both shards
    out = tmp_path / "out"
    out.mkdir()
    props = write_properties(tmp_path / "app.properties", **base_properties(
        moto_url, unique_name, unique_name, f"{sys.executable} {RECORDER}", failoverTimeMillis=3000,
        clientVersionConfig=mode, leaseAssignmentIntervalMillis=1500, **{"kclmp.processorMaxRestarts": 2}))
    env = {"RECORDER_DIR": str(out), "RECORDER_FAULT": f"{FAULTY}:exit:0:always"}
    daemon = Daemon(props, tmp_path / "host.log", "--set", "workerId=host-a", "--progress", "0.5", env=env)

    def owner() -> str | None:
        item = dynamodb.get_item(TableName=unique_name, Key={"leaseKey": {"S": FAULTY}}, ConsistentRead=True)
        return item.get("Item", {}).get("leaseOwner", {}).get("S")

    try:
        wait_until(lambda: "released the lease for another host to try" in daemon.output(), 60, "the release")
        released = daemon.output()
        cooldown = float(re.search(r"leaves it alone for (\d+) s", released).group(1))
        # The live view counts the promised time down; the lease stays unowned while it does
        # (3.x: the host, leader of a fleet of one, leaves it spilled over; 2.x: its taker skips it).
        def left() -> float:
            shown = re.findall(rf"{FAULTY}\s.*released \(left alone (\d+) s more\)", daemon.output())
            return float(shown[-1]) if shown else cooldown

        wait_until(lambda: left() <= cooldown - 10, 30, "10 s of the promised time")
        assert owner() is None, daemon.output()[-3000:]
        shown = subprocess.run([sys.executable, "-m", "kcl_mp", "leases", "-p", str(props)], cwd=ROOT,
                               capture_output=True, text=True, timeout=60)
        assert re.search(rf"{FAULTY} .* unowned, released by host-a after repeated processor failures",
                         shown.stdout), shown.stdout + shown.stderr
        daemon.stop_gracefully()
    finally:
        daemon.kill()
    log = daemon.output()
    assert re.search(rf"{FAULTY}\s.*restarting [12]/2", log), "the live view showed no restart"
    if mode == "CLIENT_VERSION_CONFIG_3X":
        assert re.search(r"leader: .*spilled 1", log), "the leader never considered the released lease"
    assert f"assigned lease {FAULTY} to host-a" not in log[log.index("released the lease"):]
    errors = [line for line in log.splitlines() if " ERROR " in line]
    # one for the loop's first failure, one summing it up at the release: each with the shard
    assert len(errors) == 2 and all(f"shard={FAULTY}" in line for line in errors), errors
    assert "the processor failed: processor for" in errors[0] and "exited with status 3" in errors[0], errors


def test_leases_reaches_a_running_embedded_daemon_at_once(tmp_path, unique_name):
    """``kcl-mp --embedded`` says where its emulator is; ``kcl-mp leases --embedded`` reads it and
    prints without waiting; once the daemon stops, the command says none is running."""
    host = EmbeddedHost(tmp_path, unique_name, streamName=unique_name)
    try:
        host.wait_for_leases(f"lease table {unique_name}: 2 leases (2 active, 0 finished) on 1 workers",
                             "the host's two leases in kcl-mp leases")
        assert "watching" not in host.shown[-1].stderr  # at once: expiry only with --wait
        host.daemon.stop_gracefully()
    finally:
        host.daemon.kill()
    gone = host.leases()
    assert gone.returncode == 1 and f"no kcl-mp --embedded is running for applicationName {unique_name}" in gone.stderr

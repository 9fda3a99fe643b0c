"""Processor supervision's acceptance: each failure mode happens to one shard of four,
under load, with real amazon_kclpy children and a real kcl-mp host on moto.

For every mode: every record put is delivered; the other three shards keep delivering
while the faulty one recovers; the failure is logged and counted once, with its cause;
only the faulty shard's processor is restarted (garbage on stdout is skipped: no restart).
Then: a crash loop releases the lease; kclmp.processorFailure = EXIT stops the host.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from kcl_mp.devtools.producer import produce
from kcl_mp.embedded import ensure_stream

from ..support.harness import (
    RECORDER,
    BackgroundProducer,
    Daemon,
    base_properties,
    recorded,
    records_only,
    wait_until,
    write_properties,
)

pytestmark = [pytest.mark.integration, pytest.mark.timing]

FAULTY = "shardId-000000000002"
TIMEOUT_S = 3


def _run(tmp_path: Path, kinesis, moto_url: str, stream: str, fault: str,
         **keys) -> tuple[Daemon, BackgroundProducer, Path]:
    ensure_stream(kinesis, stream, 4)
    out = tmp_path / "out"
    out.mkdir()
    props = write_properties(tmp_path / "app.properties", **base_properties(
        moto_url, stream, stream + "-app", f"{sys.executable} {RECORDER}", idleTimeBetweenReadsInMillis=200,
        timeoutInSeconds=TIMEOUT_S, failoverTimeMillis=3000, **keys))
    env = {"RECORDER_DIR": str(out), "RECORDER_CHECKPOINT_EVERY": "20", "RECORDER_FAULT": fault}
    producer = BackgroundProducer(lambda n: produce(kinesis, stream, 60, first_id=n * 60, aggregated_share=0.0,
                                                    keys=64, seed=n), every_s=0.25)  # 240 records/s over 4 shards
    producer.start()
    return Daemon(props, tmp_path / "host.log", "--set", "workerId=host-a", env=env), producer, out


MODES = {
    # mode: what the log must say about the cause
    "exit": "exited with status 3",
    "crash": "was killed by signal SIGKILL",
    "hang": f"sent no message within {TIMEOUT_S} s",
    "wrong": "sent a status for 'shutdown' while processRecords was awaited",
    "garbage": None,  # skipped, logged rate-limited: no restart
    "memory": "exceeded kclmp.processorMemoryLimitMB = 150",
}


@pytest.mark.parametrize("mode", list(MODES))
def test_one_failing_shard_of_four(tmp_path, kinesis, moto_url, unique_name, mode):
    daemon, producer, out = _run(tmp_path, kinesis, moto_url, unique_name, f"{FAULTY}:{mode}:100",
                                 **{"kclmp.processorMemoryLimitMB": 150})
    try:
        wait_until(lambda: any(e.get("event") == "fault" for e in recorded(out)), 60, "the fault")
        if MODES[mode]:
            wait_until(lambda: len(list(out.glob(f"{FAULTY}.*.jsonl"))) == 2, 30, "the faulty shard's restart")
        time.sleep(3.0)
        producer.finish()
        ids = {p.id for p in producer.puts}
        wait_until(lambda: ids <= {json.loads(e["data"])["id"] for e in records_only(recorded(out))}, 90,
                   f"all {len(ids)} records delivered")
        daemon.stop_gracefully()
    finally:
        producer.stop.set()
        daemon.kill()

    log = daemon.output()
    entries = recorded(out)
    fault = next(e for e in entries if e.get("event") == "fault")
    fault_at = fault["at"]
    children = {shard: sorted(p.name for p in out.glob(f"{shard}.*.jsonl")) for shard in {e["_shard"] for e in entries}}
    assert len(children) == 4
    assert all(len(files) == 1 for shard, files in children.items() if shard != FAULTY), children
    counted = [line for line in log.splitlines() if "restarts so far" in line][-1]  # at shutdown
    assert f"; {0 if MODES[mode] is None else 1} restarts so far" in counted, counted
    if MODES[mode] is None:
        assert len(children[FAULTY]) == 1 and "restart 1 of" not in log
        assert "garbage line 0" in log and "stdout lines were not logged" in log, log[-2000:]
        return
    assert len(children[FAULTY]) == 2
    restarted_at = next(e["at"] for e in entries
                        if e.get("event") == "initialize" and e["_shard"] == FAULTY and e["_pid"] != fault["_pid"])
    assert log.count(f"shard {FAULTY}: the processor failed") == 1, log[-3000:]
    assert log.count("restart 1 of 5") == 1 and "restart 2 of" not in log
    cause_line = next(line for line in log.splitlines() if "restart 1 of 5" in line)
    assert MODES[mode] in cause_line, cause_line
    # The other shards kept their throughput while the faulty one was down.
    down_s = restarted_at - fault_at
    at = [e["at"] for e in records_only(entries) if e["_shard"] != FAULTY]
    during = sorted(t for t in at if fault_at <= t <= restarted_at)
    before = [t for t in at if fault_at - 5.0 <= t < fault_at]
    gaps = [b - a for a, b in zip(during, during[1:])]
    rate_during, rate_before = len(during) / down_s, len(before) / 5.0
    print(f"{mode}: down {down_s:.1f} s; the other shards: {rate_during:.0f} records/s meanwhile, "
          f"{rate_before:.0f} records/s in the 5 s before; longest gap {max(gaps):.2f} s")
    assert rate_during >= 0.6 * rate_before and max(gaps) < 2.0, (rate_during, rate_before, max(gaps))


def test_a_crash_loop_releases_the_lease_for_another_host(tmp_path, kinesis, dynamodb, moto_url, unique_name):
    daemon, producer, out = _run(tmp_path, kinesis, moto_url, unique_name, f"{FAULTY}:exit:0:always",
                                 **{"kclmp.processorMaxRestarts": 2})
    key = {"leaseKey": {"S": FAULTY}}

    def owner() -> str | None:
        item = dynamodb.get_item(TableName=unique_name + "-app", Key=key, ConsistentRead=True).get("Item", {})
        return item.get("leaseOwner", {}).get("S")

    try:
        wait_until(lambda: "released the lease for another host to try" in daemon.output(), 60, "the release")
        assert owner() is None
        released_at = time.time()
        time.sleep(4.0)  # more than a take interval: this host leaves it alone
        assert owner() is None
        others = [e for e in records_only(recorded(out)) if e["_shard"] != FAULTY and e["at"] > released_at]
        assert others, "the other shards stopped"
        daemon.stop_gracefully()
    finally:
        producer.stop.set()
        daemon.kill()
    log = daemon.output()
    assert log.count(f"shard {FAULTY}: the processor failed") == 3  # 2 restarts, then the release
    errors = [line for line in log.splitlines() if " ERROR " in line]
    # the first failure of the loop and the release that sums it up; the restart between is a warning
    assert len(errors) == 2 and "restart 1 of 2" in errors[0] and "released the lease" in errors[1], errors
    assert all(f"shard={FAULTY}" in line for line in errors), errors
    assert "3 failures in a row (kclmp.processorMaxRestarts = 2)" in log
    assert len(list(out.glob(f"{FAULTY}.*.jsonl"))) == 3


def test_processor_failure_exit_stops_the_host_as_java_does(tmp_path, kinesis, moto_url, unique_name):
    daemon, producer, out = _run(tmp_path, kinesis, moto_url, unique_name, f"{FAULTY}:exit:50",
                                 **{"kclmp.processorFailure": "exit"})
    try:
        assert daemon.wait(90) == 1, daemon.output()[-3000:]
    finally:
        producer.stop.set()
        daemon.kill()
    log = daemon.output()
    assert "stopping this host (kclmp.processorFailure = EXIT, as the Java daemon does)" in log
    entries = recorded(out)
    stopped = {e["_shard"] for e in entries if e.get("event") == "shutdownRequested"}
    assert stopped == {f"shardId-00000000000{i}" for i in (0, 1, 3)}  # the others stopped gracefully
    assert len(list(out.glob(f"{FAULTY}.*.jsonl"))) == 1  # not restarted

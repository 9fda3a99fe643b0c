"""Each ready-made processor (processors/) runs end to end under kcl-mp: amazon_kclpy in
Python, aws-kcl on Node.js, and POSIX shell with jq (no KCL library at all). Records are
put into a moto stream; each processor checkpoints after every batch, so the run is
complete when every shard's checkpoint in the lease table reaches its last record."""

from __future__ import annotations

import pytest

from kcl_mp.devtools.producer import produce
from kcl_mp.embedded import ensure_stream
from kcl_mp.leases.table import LeaseTable

from ..support.harness import Daemon, base_properties, wait_until, write_properties
from .test_conformance import PROCESSORS

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("name", list(PROCESSORS))
def test_processor_end_to_end(tmp_path, kinesis, dynamodb, moto_url, unique_name, name):
    stream, app = unique_name, unique_name + "-app"
    ensure_stream(kinesis, stream, 2)
    puts = produce(kinesis, stream, 1000, aggregated_share=0.1, seed=3)
    last = {}
    for put in puts:
        if int(put.sequence_number) > int(last.get(put.shard_id, "0")):
            last[put.shard_id] = put.sequence_number
    props = write_properties(tmp_path / "app.properties", **base_properties(
        moto_url, stream, app, " ".join(PROCESSORS[name]), processingLanguage=name))
    table = LeaseTable(dynamodb, app)

    def done() -> bool:
        try:
            seen = {lease.key: lease.checkpoint.sequence_number for lease in table.list_leases() if lease.checkpoint}
        except Exception:
            return False  # the table is being created
        return all(seen.get(shard) == seq for shard, seq in last.items())

    daemon = Daemon(props, tmp_path / "run.log")
    try:
        wait_until(done, 90, f"{name}: every shard checkpointed at its last record")
        daemon.stop_gracefully()
    finally:
        daemon.kill()
    log = daemon.output()
    assert "Traceback" not in log and "processor failed" not in log, log[-3000:]
    assert log.count("processor started") == 2  # one per shard, never restarted
    assert "shutting down after" in log  # the processor's own stderr line at shutdownRequested
    usage = next(line for line in log.splitlines() if "processors: 2 sampled" in line)
    assert " MB in all; largest shardId-" in usage, usage  # psutil's figures reach the log

"""Streams that change at run time (kcl_mp.supervisor.stream_changes) against moto on loopback, on a
fake clock: a real lease coordinator (2.x taker, one host) reads its streams from a list file that
the test rewrites; each look at the list is judged by its events (the log's ``event``/``stream``) and
by the lease table.

A stream appended gets its leases at the next sync and is taken; a stream removed is drained (its
leases, with no processor running here, released at once) and then left alone; a file with a bad
line is refused by file and line and the last good list kept; a stream listed again before its
wait ends is revived; once out of the list for the wait, its leases are deleted.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from pathlib import Path

import pytest

from kcl_mp.config import load_config
from kcl_mp.embedded import ensure_stream
from kcl_mp.leases.multi_stream import split_key
from kcl_mp.leases.table import LeaseTable
from kcl_mp.logs import ShardLog
from kcl_mp.metrics.catalogue import Recorder
from kcl_mp.retrieval.streams import stream_client
from kcl_mp.supervisor.coordinator import LeaseCoordinator
from kcl_mp.supervisor.shards import Shards
from kcl_mp.supervisor.stream_changes import StreamChanges

from ..support.clock import Clock
from ..support.harness import base_properties, write_properties

pytestmark = pytest.mark.integration
WAIT_MS = 10_000


def test_streams_appended_removed_refused_revived_and_deleted(tmp_path: Path, moto_url: str, kinesis, dynamodb,
                                                              unique_name: str, caplog) -> None:
    a, b, c = (f"{unique_name}-{x}" for x in "abc")
    for name, shards in ((a, 1), (b, 2), (c, 1)):
        ensure_stream(kinesis, name, shards)
    listing = tmp_path / "streams.txt"
    listing.write_text(f"# the streams\n{a}\n{b}\n")
    keys = {k: v for k, v in base_properties(moto_url, "unused", unique_name, "true", workerId="w1").items()
            if k != "streamName"}
    config = load_config(write_properties(tmp_path / "app.properties", **keys, streamListFile="streams.txt",
                                          formerStreamsLeasesDeletionStrategy=(
                                              "FORMER_STREAMS_AUTO_DETECTION_DEFERRED_DELETION"),
                                          waitPeriodToDeleteFormerStreamsMillis=WAIT_MS))
    clock, wall = Clock(), Clock(1_800_000_000.0)
    log = ShardLog(logging.getLogger("kcl_mp.test"), "w1")
    table = LeaseTable(dynamodb, unique_name, config.stream_names)
    table.ensure_table()
    metrics = Recorder()
    leases = LeaseCoordinator(config, table, stream_client(config), log, clock, random.Random(1), metrics=metrics,
                              wall=wall)
    leases.join_fleet()
    leases.sync.describe_stream()
    assert leases.sync.sync_shards({}, "start-up")
    changes = StreamChanges(config, leases, Shards(config, "INFO", "text", log, metrics, clock), log, metrics, clock,
                            wall)

    def owners() -> Counter:
        """Leases per stream and owner, as the table holds them."""
        items = dynamodb.scan(TableName=unique_name, ConsistentRead=True)["Items"]
        return Counter((split[0].name, item.get("leaseOwner", {}).get("S")) for item in items
                       if (split := split_key(item["leaseKey"]["S"])))

    def look() -> list[tuple[str, str]]:
        """One look at the list, then what the loop does next (drain, sync, scan); its stream events."""
        caplog.clear()
        if changes.look():
            assert leases.sync.audit()
        changes.drain()
        leases.scan()
        return [(r.event, r.event_fields["stream"]) for r in caplog.records if getattr(r, "event", "").startswith(
            "stream_")]

    with caplog.at_level(logging.INFO, logger="kcl_mp.test"):
        leases.scan()
        assert owners() == Counter({(a, "w1"): 1, (b, "w1"): 2})

        listing.write_text(f"{a}\n{c}  # c appended, b removed\n")
        assert look() == [("stream_added", c), ("stream_draining", b), ("stream_deletion_scheduled", b),
                          ("stream_drained", b)]
        assert owners() == Counter({(a, "w1"): 1, (b, None): 2, (c, "w1"): 1})  # b's released, c's taken
        assert leases.scan() == () and owners()[b, None] == 2  # b's are nobody's to take

        listing.write_text(f"{a}\n{c}\nnot a stream\n")
        assert look() == [("stream_list_refused", str(listing))]
        assert f"{listing} line 3: 'not a stream' is not a stream name" in caplog.text
        assert [s.name for s in changes.streams] == [a, c] and look() == []  # said once, the last good list kept

        listing.write_text(f"{a}\n{b}\n{c}\n")
        assert look() == [("stream_revived", b), ("stream_added", b)]
        assert owners() == Counter({(a, "w1"): 1, (b, "w1"): 2, (c, "w1"): 1})

        listing.write_text(f"{a}\n{c}\n")
        assert look() == [("stream_draining", b), ("stream_deletion_scheduled", b), ("stream_drained", b)]
        wall.advance(WAIT_MS / 1000 - 1)
        assert look() == []
        wall.advance(1)
        assert look() == [("stream_deleted", b)]
        assert owners() == Counter({(a, "w1"): 1, (c, "w1"): 1})
        assert look() == [] and changes.pending == {}

    samples = metrics.drain()
    assert samples["active_streams", ""].last == 2 and samples["deleted_streams", ""].total == 1
    assert samples["streams_pending_deletion", ""].high == 1 and samples["streams_pending_deletion", ""].last == 0

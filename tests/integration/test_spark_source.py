"""The ``kclmp_landing`` source's listing, admission control and cleaning, over files landed as
the sink lands them: an idle trigger lists a page per shard on moto's S3 (counted with a
botocore event hook) and reads no footer twice; availableNow honours maxFilesPerTrigger; with
cleanSource the files at or below the committed offsets are gone within two batches."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import boto3
import pytest

from kcl_mp.spark.layout import START, Position, parse_name
from kcl_mp.spark.source import Options, Planner
from kcl_mp.spark.storage import Storage

from ..support.spark_support import Job, land, landed_files, moved, offsets

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def land_chains(storage: Storage, stream: str, shards: int, files: int, rows: int = 3) -> int:
    """``files`` chained files per shard, ``rows`` rows each; returns how many ids."""
    next_id = 0
    for s in range(shards):
        after: Position = START
        for f in range(files):
            batch = [((1000 + f * rows + r, 0), next_id + r) for r in range(rows)]
            land(storage, stream, f"shardId-{s:012d}", batch, after, f"w{f}")
            after, next_id = batch[-1][0], next_id + rows
    return next_id


def counted(planner: Planner) -> Counter:
    calls: Counter = Counter()
    planner.storage.s3.meta.events.register("before-call.s3.*", lambda model, **_: calls.update([model.name]))
    return calls


def test_an_idle_trigger_lists_a_page_per_shard(moto_url, unique_name):
    shards, per_shard = 8, 40
    s3 = boto3.client("s3", endpoint_url=moto_url, region_name="us-east-1")
    s3.create_bucket(Bucket=unique_name)
    url = f"s3://{unique_name}/landing"
    land_chains(Storage(url, moto_url), "orders", shards, per_shard)
    options = Options.parse({"path": url, "s3Endpoint": moto_url})
    planner = Planner(options)
    calls = counted(planner)
    end = planner.plan({}, None, None)
    assert sum(len(e["takes"]) for e in end.values()) == shards * per_shard
    first = dict(calls)
    calls.clear()
    idle = planner.plan(end, None, None)
    assert idle == end  # nothing moved: Spark runs no batch
    assert calls["ListObjectsV2"] <= shards + 2, dict(calls)  # the streams, the shards, a page per shard
    assert calls["GetObject"] == 0, dict(calls)  # footers are read once per planning process
    restarted = Planner(options)  # a new driver: the footers of what each shard's listing returns
    calls = counted(restarted)
    restarted.plan(end, None, None)
    assert calls["ListObjectsV2"] <= shards + 2 and calls["GetObject"] <= shards, dict(calls)
    print(f"first trigger over {shards * per_shard} files: {first}; idle: {dict(calls)}")


def late_first_source_worker(tmp_path: Path) -> dict[str, str]:
    """A PYSPARK_PYTHON whose first Python streaming-source worker starts 12 s late: past Spark's
    fixed 10 s for it to connect back, as on a loaded host (the query fails to start)."""
    wrapper = tmp_path / "late-python"
    wrapper.write_text(f"""#!/bin/sh
case "$*" in *python_streaming_source_runner*) mkdir "{tmp_path / 'late-once'}" 2>/dev/null && sleep 12;; esac
exec {sys.executable} "$@"
""")
    wrapper.chmod(0o755)
    return {"PYSPARK_PYTHON": str(wrapper)}


def test_available_now_caps_batches_and_clean_source_deletes_within_two_batches(tmp_path: Path):
    """The second run also survives a source worker that does not connect back in time: the job
    starts the query again from its checkpoint and finishes."""
    landing, table, checkpoint = tmp_path / "landing", tmp_path / "table", tmp_path / "checkpoint"
    storage = Storage(str(landing))
    ids = land_chains(storage, "orders", 2, 4)
    args = ["--landing", str(landing), "--output", str(table), "--checkpoint", str(checkpoint),
            "--max-files-per-trigger", "2", "--clean-source", "delete", "--available-now"]
    Job(tmp_path / "job-1.log", *args).wait(300)
    log = offsets(checkpoint)
    read = [sum(len(e["takes"]) for shard, e in log[b].items() if b in moved(log, shard)) for b in sorted(log)]
    assert read == [2, 2, 2, 2], read  # 8 files, maxFilesPerTrigger 2, under availableNow
    # commit(end) lags a batch: after batch N ran, the files at or below batch N-1's end are gone.
    assert_cleaned(landing, log[len(log) - 2])
    land(storage, "orders", "shardId-000000000000", [((2000, 0), ids)], (1011, 0), "more")
    Job(tmp_path / "job-2.log", *args, "--restart-pause", "1", env=late_first_source_worker(tmp_path)).wait(300)
    said = [line for line in (tmp_path / "job-2.log").read_text().splitlines() if "kcl_mp.spark.job:" in line]
    assert len(said) == 1 and "Python worker failed to connect back" in said[0], said
    assert "starting it again from its checkpoint in 1 s (try 1 of 3)" in said[0], said
    log = offsets(checkpoint)
    assert_cleaned(landing, log[3])  # batch 3's files went once batch 4 ran (batch 4's stay until the next)
    remaining = {name: [parse_name(p.name) for p in paths] for name, paths in landed_files(landing).items()}
    assert all(f.first == (2000, 0) for f in remaining.get("orders/shardId-000000000000", [])), remaining


def assert_cleaned(landing: Path, end: dict) -> None:
    for shard, paths in landed_files(landing).items():
        covered = (int(end[shard]["seq"]), end[shard]["sub"]) if end.get(shard, {}).get("seq") else None
        left = [p.name for p in paths if covered is not None and parse_name(p.name).last <= covered]
        assert not left, (shard, covered, left)


def test_archive_moves_what_is_committed(tmp_path: Path):
    landing, archive = tmp_path / "landing", tmp_path / "archive"
    land_chains(Storage(str(landing)), "orders", 1, 3)
    planner = Planner(Options.parse({"path": str(landing), "cleanSource": "archive",
                                     "sourceArchiveDir": str(archive), "maxFilesPerTrigger": "2"}))
    end = planner.plan({}, 2, None)
    planner.clean(end)
    moved = sorted(p.name for p in (archive / "orders" / "shardId-000000000000").iterdir())
    assert moved == sorted(t[0] for t in end["orders/shardId-000000000000"]["takes"])
    assert len(landed_files(landing)["orders/shardId-000000000000"]) == 1


@pytest.mark.parametrize("options,error", [
    ({}, "no landing path"),
    ({"path": "x", "maxFilesPerTrigger": "0"}, "maxFilesPerTrigger='0'"),
    ({"path": "x", "cleanSource": "move"}, "cleanSource='move'"),
    ({"path": "x", "cleanSource": "archive"}, "needs sourceArchiveDir"),
])
def test_option_errors_name_the_option(options, error):
    with pytest.raises(ValueError, match=error):
        Options.parse(options)

"""The embedded emulator's S3 listings (kcl_mp.embedded.s3_listing) answer exactly as moto's
own: the same keys, common prefixes, StartAfter, continuation and truncation, with versions
and delete markers, against a plain ``python -m moto.server`` holding the same objects,
before and after keys are added, overwritten and deleted under a built index."""

from __future__ import annotations

import subprocess
import sys
import time

import boto3
import pytest

from kcl_mp.embedded import free_port, start_emulator

from ..support.harness import wait_until

pytestmark = pytest.mark.integration

KEYS = [f"area/orders/shardId-{s:012d}/{n:06d}-w{n % 3}.parquet" for s in range(4) for n in range(30)] + [
    "area/orders/_spark_metadata/0", "area/orders-archive/x", "area/top.txt", "other/shardId-000000000000/a",
    "area/orders/shardId-000000000001/nested/deeper.parquet", "area/orders2/z", "area/orders/x/y/z"]
LISTINGS = [
    {"Prefix": "area/orders/shardId-000000000001/"},
    {"Prefix": "area/orders/shardId-000000000001/", "StartAfter": "area/orders/shardId-000000000001/000017"},
    {"Prefix": "area/orders/", "Delimiter": "/"},
    {"Prefix": "area/orders", "Delimiter": "/"},
    {"Prefix": "area/orders/", "Delimiter": "/", "StartAfter": "area/orders/shardId-000000000001/000003"},
    {"Prefix": "area/orders/shardId-000000000003/", "StartAfter": "area/"},
    {"Prefix": "area/orders/shardId-000000000003/", "StartAfter": "zzz"},
    {"Prefix": "area/", "Delimiter": "/", "StartAfter": "area/orders/shardId-000000000002/000005-w2.parquet"},
    {"Prefix": "area/orders/", "Delimiter": "/", "MaxKeys": 2},
    {"Prefix": "area/orders/shardId", "Delimiter": "0"},
    {"Delimiter": "/", "StartAfter": "area"},
    {"StartAfter": "area/orders/shardId-000000000003/000028"},
    {"Prefix": "area/", "MaxKeys": 7},
    {"Prefix": "area/orders/shardId-000000000002/", "MaxKeys": 10},
    {"Prefix": "nothing/"},
    {},
    {"Delimiter": "/"},
]


def answers(url: str, bucket: str) -> list:
    s3 = boto3.client("s3", endpoint_url=url, region_name="us-east-1")
    found = []
    for listing in LISTINGS:
        pages, token = [], None
        for _ in range(100):  # bounded: every listing here ends in a few pages
            page = s3.list_objects_v2(Bucket=bucket, **listing, **({"ContinuationToken": token} if token else {}))
            pages.append(([o["Key"] for o in page.get("Contents", [])], [p["Prefix"] for p in page.get("CommonPrefixes", [])],
                          page["KeyCount"], page["IsTruncated"]))
            token = page.get("NextContinuationToken")
            if not token:
                break
        found.append((listing, pages))
        found.append((listing, "v1", sorted(o["Key"] for o in s3.list_objects(
            Bucket=bucket, **{k: v for k, v in listing.items() if k in ("Prefix", "Delimiter")}).get("Contents", []))))
    return found


def fill(url: str, bucket: str, stage: int) -> None:
    """Stage 0 creates the bucket and most keys; stage 1 (after a listing built the index) adds
    the rest, a second version of one, and deletes two (delete markers, not listed)."""
    s3 = boto3.client("s3", endpoint_url=url, region_name="us-east-1")
    if stage == 0:
        s3.create_bucket(Bucket=bucket)
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    for key in KEYS[:100] if stage == 0 else KEYS[100:]:
        s3.put_object(Bucket=bucket, Key=key, Body=b"1")
    if stage == 1:
        s3.put_object(Bucket=bucket, Key=KEYS[3], Body=b"a second version")
        s3.delete_object(Bucket=bucket, Key=KEYS[5])
        s3.delete_object(Bucket=bucket, Key=KEYS[40])


def test_listings_match_moto_s(tmp_path):
    port = free_port()
    plain = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        s3 = boto3.client("s3", endpoint_url=url, region_name="us-east-1")
        began = time.monotonic()
        wait_until(lambda: _answers_at(s3), 30, "moto.server answering")
        with start_emulator(log_path=str(tmp_path / "moto.log")) as emulator:
            for stage in (0, 1):
                fill(emulator.url, "landing", stage)
                fill(url, "landing", stage)
                ours, theirs = answers(emulator.url, "landing"), answers(url, "landing")
                assert ours == theirs, f"after stage {stage}"
        assert len(ours[0][1][0][0]) == 30, ours[0]  # shard 1: its 30 keys and a nested one, less the deleted
        print(f"{len(LISTINGS)} listings over {len(KEYS)} keys alike in {time.monotonic() - began:.1f} s")
    finally:
        plain.terminate()
        plain.wait(10)


def _answers_at(s3) -> bool:
    try:
        s3.list_buckets()
        return True
    except Exception:  # noqa: BLE001 - not up yet
        return False

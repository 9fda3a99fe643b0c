"""The fetch path's own CPU per record, and the checkpoint write's per call.

    .venv/bin/python bench/fetch_cpu.py [--pages 40] [--page-records 1000] [--sizes 100,1024]

Client-side CPU (this process's, the server being another process) of:

    GetRecords     N pages from kcl_mp.devtools.fast_kinesis, through three clients:
                   botocore   a plain boto3 client (Data decoded to bytes, datetimes)
                   keep       botocore's shape walk, blobs and timestamps kept as the wire's
                              text (the shard worker's client before the raw parser)
                   raw        ``aws.clients.client(..., raw_records=True)``: orjson, no walk
                   each alone, then with the rest of the fetch path (``deaggregate.user_records``
                   and ``wire.make_batch``: the processRecords line)
    fan-out        the event-stream parsing of SubscribeToShardEvent messages of the same
                   records, from bytes in memory: botocore's framing and CRCs, then botocore's
                   shape walk with blobs kept ("EFO keep") or orjson alone ("EFO raw")
    checkpoint     ``LeaseTable.checkpoint`` (a conditional UpdateItem) against moto: serializing
                   the request and parsing the answer, per call

Figures are microseconds of CPU per record (per call for the checkpoint).
"""

from __future__ import annotations

import argparse
import binascii
import io
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import boto3  # noqa: E402
import orjson  # noqa: E402

from kcl_mp.aws.clients import _boto_config, client  # noqa: E402
from kcl_mp.config import ClientSettings, CredentialProvider  # noqa: E402
from kcl_mp.embedded import EMBEDDED_ENV, free_port, start_emulator  # noqa: E402
from kcl_mp.multilang.wire import make_batch  # noqa: E402
from kcl_mp.retrieval.deaggregate import user_records  # noqa: E402


def _keep(value):
    return value


def clients(url: str) -> dict[str, object]:
    settings = ClientSettings("us-east-1", url, (CredentialProvider("EnvironmentVariableCredentialsProvider"),))
    plain = boto3.client("kinesis", endpoint_url=url, region_name="us-east-1", config=_boto_config(signed=True))
    session = boto3.Session(region_name="us-east-1")
    session._session.get_component("response_parser_factory").set_parser_defaults(blob_parser=_keep,
                                                                                  timestamp_parser=_keep)
    keep = session.client("kinesis", endpoint_url=url, config=_boto_config(signed=True))
    return {"botocore": plain, "keep": keep, "raw": client("kinesis", settings, raw_records=True)}


def start_source(port: int, size: int, page_records: int) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-m", "kcl_mp.devtools.fast_kinesis", str(port), "--shards", "1",
                                "--record-bytes", str(size), "--page-records", str(page_records)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    probe = boto3.client("kinesis", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1")
    deadline = time.monotonic() + 30
    while True:
        try:
            probe.list_shards(StreamName="bench")
            return process
        except Exception as exc:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise RuntimeError("fast_kinesis did not start") from exc
            time.sleep(0.1)


def time_get_records(kinesis, pages: int, limit: int, with_path: bool) -> float:
    """CPU seconds for ``pages`` GetRecords (and the fetch path after each, if asked)."""
    iterator = kinesis.get_shard_iterator(StreamName="bench", ShardId="shardId-000000000000",
                                          ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
    kinesis.get_records(ShardIterator=iterator, Limit=limit)  # connection and caches warm
    started = time.process_time()
    for _ in range(pages):
        response = kinesis.get_records(ShardIterator=iterator, Limit=limit)
        if with_path:
            make_batch(user_records(response["Records"]), response.get("MillisBehindLatest"))
        iterator = response["NextShardIterator"]
    return time.process_time() - started


def _header(name: str, value: str) -> bytes:
    raw_name, raw_value = name.encode(), value.encode()
    return bytes([len(raw_name)]) + raw_name + b"\x07" + struct.pack(">H", len(raw_value)) + raw_value


def event_message(payload: bytes) -> bytes:
    """One event-stream message (the AWS framing: prelude, CRCs, string headers)."""
    headers = (_header(":event-type", "SubscribeToShardEvent") + _header(":content-type", "application/json")
               + _header(":message-type", "event"))
    total = 12 + len(headers) + len(payload) + 4
    prelude = struct.pack(">II", total, len(headers))
    prelude += struct.pack(">I", binascii.crc32(prelude) & 0xFFFFFFFF)
    body = prelude + headers + payload
    return body + struct.pack(">I", binascii.crc32(body) & 0xFFFFFFFF)


class _Raw:
    def __init__(self, data: bytes):
        self.data = data

    def stream(self):
        buffer = io.BytesIO(self.data)
        while chunk := buffer.read(16384):
            yield chunk


def time_event_stream(records: list[dict], pages: int, with_path: bool, raw: bool) -> float:
    from botocore.eventstream import EventStream
    from botocore.parsers import JSONParser

    from kcl_mp.aws.raw_records import RawRecordsParser

    kinesis = boto3.client("kinesis", region_name="us-east-1")
    shape = kinesis.meta.service_model.operation_model("SubscribeToShard").output_shape.members["EventStream"]
    payload = orjson.dumps({"Records": records, "ContinuationSequenceNumber": records[-1]["SequenceNumber"],
                            "MillisBehindLatest": 0})
    data = event_message(payload) * pages
    parser = (RawRecordsParser if raw else JSONParser)(blob_parser=_keep, timestamp_parser=_keep)._event_stream_parser
    started = time.process_time()
    for event in EventStream(_Raw(data), shape, parser, "SubscribeToShard"):
        body = event["SubscribeToShardEvent"]
        if with_path:
            make_batch(user_records(body["Records"]), body.get("MillisBehindLatest"))
    return time.process_time() - started


def time_checkpoints(calls: int) -> float:
    from kcl_mp.leases.lease import Lease
    from kcl_mp.leases.table import LeaseTable
    from kcl_mp.sequence import ExtendedSequenceNumber

    with start_emulator() as emulator:
        settings = ClientSettings("us-east-1", emulator.url,
                                  (CredentialProvider("EnvironmentVariableCredentialsProvider"),))
        table = LeaseTable(client("dynamodb", settings), "bench-checkpoints")
        table.ensure_table()
        table.create_if_absent(Lease("shardId-0", owner="me", counter=1))
        table.checkpoint("shardId-0", "me", ExtendedSequenceNumber("1", 0))
        started = time.process_time()
        for n in range(calls):
            assert table.checkpoint("shardId-0", "me", ExtendedSequenceNumber(str(n + 2), 0)) is None
        return time.process_time() - started


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pages", type=int, default=40)
    p.add_argument("--page-records", type=int, default=1000)
    p.add_argument("--sizes", default="100,1024")
    p.add_argument("--checkpoints", type=int, default=300)
    args = p.parse_args(argv)
    os.environ.update(EMBEDDED_ENV)
    records = args.pages * args.page_records
    print(f"CPU microseconds per record, {args.pages} pages of {args.page_records} records "
          f"(load average {os.getloadavg()[0]:.1f})")
    print(f"{'size':>6}  {'client':<9} {'GetRecords':>11} {'+ fetch path':>13}")
    for size in (int(s) for s in args.sizes.split(",")):
        port = free_port()
        source = start_source(port, size, args.page_records)
        try:
            url = f"http://127.0.0.1:{port}"
            for name, kinesis in clients(url).items():
                alone = time_get_records(kinesis, args.pages, args.page_records, False)
                path = time_get_records(kinesis, args.pages, args.page_records, True)
                print(f"{size:>6}  {name:<9} {alone / records * 1e6:>11.2f} {path / records * 1e6:>13.2f}",
                      flush=True)
            raw = clients(url)["raw"]
            iterator = raw.get_shard_iterator(StreamName="bench", ShardId="shardId-000000000000",
                                              ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
            page = raw.get_records(ShardIterator=iterator, Limit=args.page_records)["Records"]
        finally:
            source.terminate()
            print("  " + source.communicate(timeout=30)[0].decode().strip().replace("\n", "\n  "))
        for raw in (False, True):
            alone = time_event_stream(page, args.pages, False, raw)
            path = time_event_stream(page, args.pages, True, raw)
            name = "EFO raw" if raw else "EFO keep"
            print(f"{size:>6}  {name:<9} {alone / records * 1e6:>11.2f} {path / records * 1e6:>13.2f}", flush=True)
    cpu = time_checkpoints(args.checkpoints)
    print(f"checkpoint (conditional UpdateItem on moto): {cpu / args.checkpoints * 1e6:.0f} us CPU per call "
          f"({args.checkpoints} calls)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

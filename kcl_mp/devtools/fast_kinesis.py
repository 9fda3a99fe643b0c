"""An in-memory Kinesis endpoint for throughput benchmarks: never the bound.

    python -m kcl_mp.devtools.fast_kinesis PORT --shards 16 --record-bytes 1024 \\
        [--page-records 10000] [--records-per-shard 0] [--stream bench] [--delay-ms 0]

One stream of ``--shards`` open shards, each an endless (``--records-per-shard 0``) or
bounded sequence of records of ``--record-bytes`` random bytes, served in JSON
(``application/x-amz-json-1.1``, as Kinesis with CBOR off) under hypercorn: HTTP/1.1 for
botocore and cleartext HTTP/2 for the Java SDK, on one port. Operations: ListShards,
DescribeStream, DescribeStreamSummary, GetShardIterator, GetRecords; anything else is a 400
``UnknownOperationException`` (no PutRecords, no fan-out: nothing a reader needs).

Why it is cheap: GetRecords pages are made once. Record ``j`` of page ``p`` of every shard
has the sequence number ``PREFIX + p (19 digits) + j (5 digits)`` (unique within a shard, as
Kinesis promises; shards share them), so from one page to the next only ``p`` differs: a
whole page is one precomputed byte string, shared by all shards, cut at its placeholders for
``p``, the arrival time, the next iterator and ``MillisBehindLatest``, and joined again with
them filled in (one copy of the page at C speed, no per-record Python: 4-6 ms a 10 MB page,
against 14 for three ``bytes.replace``; memory: one page, 10 MB at most). A read that does
not start at a page's first record, or asks for fewer records than a page, is built record
by record: only a restart from a checkpoint does that. Sequence numbers increase along the shard;
``ApproximateArrivalTimestamp`` is the time the page is served; ``MillisBehindLatest`` is
``--behind-ms`` until a bounded shard's last page, then 0.

Idle shards: a bounded shard (``--records-per-shard N``) read to its end stays open and
idle, as a caught-up Kinesis shard is: every GetRecords there answers an empty page,
``MillisBehindLatest`` 0 and the same iterator again (LATEST on a bounded shard starts
there). ``--delay-ms`` holds every answer that long (an ``asyncio.sleep``: concurrent
requests wait side by side, as against a remote service), to plan against a real API's
latency without the cost of a real one.

Iterators are ``shardId:page:slot`` (the next record to read). It prints its own CPU
seconds and the requests it served when it is stopped (SIGTERM or SIGINT).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import re
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any

import orjson

PREFIX = "49"  # real sequence numbers start so; the rest: page, slot
SLOT_DIGITS = 5
PAGE_DIGITS = 19
MAX_PAGE_RECORDS = 10 ** SLOT_DIGITS - 1
# One control byte each: never in JSON text.
PAGE_MARK = b"\x01"
TIME_MARK = b"\x02"
NEXT_MARK = b"\x03"
BEHIND_MARK = b"\x04"
MARKS = re.compile(b"([\x01-\x04])")
JSON_TYPE = [(b"content-type", b"application/x-amz-json-1.1")]
ARN = "arn:aws:kinesis:us-east-1:000000000000:stream/"
HASH_MAX = 2 ** 128 - 1


def shard_name(index: int) -> str:
    return f"shardId-{index:012d}"


def sequence_number(page: int, slot: int) -> str:
    return f"{PREFIX}{page:0{PAGE_DIGITS}d}{slot:0{SLOT_DIGITS}d}"


def position(sequence: str) -> tuple[int, int]:
    """(page, slot) of one of our sequence numbers; ValueError for anything else."""
    if len(sequence) != len(PREFIX) + PAGE_DIGITS + SLOT_DIGITS or not sequence.isdigit():
        raise ValueError(sequence)
    return int(sequence[-SLOT_DIGITS - PAGE_DIGITS:-SLOT_DIGITS]), int(sequence[-SLOT_DIGITS:])


class ServiceError(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Source:
    stream: str
    shards: int
    record_bytes: int
    page_records: int
    records_per_shard: int  # 0: endless
    behind_ms: int

    def __post_init__(self) -> None:
        if not 0 < self.page_records <= MAX_PAGE_RECORDS:
            raise ValueError(f"--page-records must be 1..{MAX_PAGE_RECORDS}")


class FastKinesis:
    """The stream, its precomputed pages, and the operations (pure but for the clock)."""

    def __init__(self, source: Source, seed: bytes | None = None):
        self.source = source
        data = base64.b64encode(seed if seed is not None else os.urandom(source.record_bytes)).decode()
        self._data = data
        pieces = MARKS.split(self._template())
        self._literals, self._marks = pieces[0::2], pieces[1::2]
        self.requests = 0
        self.records_served = 0

    # -- records -------------------------------------------------------------------------

    def _record(self, page: int | None, slot: int, stamp: str) -> bytes:
        seq = sequence_number(page or 0, slot).encode()
        if page is None:  # the template: the page digits are a placeholder
            seq = seq[:len(PREFIX)] + PAGE_MARK + seq[len(PREFIX) + PAGE_DIGITS:]  # the digits filled in later
        return (b'{"SequenceNumber":"' + seq + b'","ApproximateArrivalTimestamp":' + stamp.encode()
                + b',"Data":"' + self._data.encode() + b'","PartitionKey":"pk-' + str(slot).encode() + b'"}')

    def _template(self) -> bytes:
        records = b",".join(self._record(None, slot, TIME_MARK.decode())
                            for slot in range(self.source.page_records))
        return b'{"Records":[' + records + b'],"NextShardIterator":"' + NEXT_MARK + b'","MillisBehindLatest":' + \
            BEHIND_MARK + b"}"

    def _last_index(self) -> int | None:
        total = self.source.records_per_shard
        return None if total == 0 else total

    def get_records(self, iterator: str, limit: int) -> bytes:
        shard, page, slot = self._iterator(iterator)
        source = self.source
        stamp = f"{time.time():.3f}"
        index = page * source.page_records + slot
        end = self._last_index()
        count = min(limit, source.page_records - slot)
        if end is not None:
            count = max(0, min(count, end - index))
        next_page, next_slot = divmod(slot + count, source.page_records)
        following = f"{shard_name(shard)}:{page + next_page}:{next_slot}".encode()
        self.records_served += count
        behind = 0 if end is not None and index + count >= end else source.behind_ms
        if slot == 0 and count == source.page_records:
            fill = {PAGE_MARK: b"%0*d" % (PAGE_DIGITS, page), TIME_MARK: stamp.encode(), NEXT_MARK: following,
                    BEHIND_MARK: str(behind).encode()}
            body: list[bytes] = [b""] * (2 * len(self._marks) + 1)
            body[0::2], body[1::2] = self._literals, map(fill.__getitem__, self._marks)
            return b"".join(body)
        records = b",".join(self._record(page, s, stamp) for s in range(slot, slot + count))
        return (b'{"Records":[' + records + b'],"NextShardIterator":"' + following
                + b'","MillisBehindLatest":' + str(behind).encode() + b"}")

    def _iterator(self, iterator: str) -> tuple[int, int, int]:
        try:
            name, page, slot = iterator.rsplit(":", 2)
            shard = self._shard(name)
            return shard, int(page), int(slot)
        except (ValueError, ServiceError):
            raise ServiceError("InvalidArgumentException", f"invalid ShardIterator {iterator!r}") from None

    def _shard(self, name: str) -> int:
        try:
            index = int(name.rsplit("-", 1)[1])
        except (IndexError, ValueError):
            index = -1
        if not 0 <= index < self.source.shards or name != shard_name(index):
            raise ServiceError("ResourceNotFoundException", f"Shard {name} in stream {self.source.stream} "
                                                            "under account 000000000000 does not exist")
        return index

    # -- the control plane ---------------------------------------------------------------

    def shard_iterator(self, request: dict[str, Any]) -> dict[str, Any]:
        shard = self._shard(request.get("ShardId", ""))
        kind = request.get("ShardIteratorType")
        page = slot = 0
        if kind in ("AT_SEQUENCE_NUMBER", "AFTER_SEQUENCE_NUMBER"):
            try:
                page, slot = position(request.get("StartingSequenceNumber", ""))
            except ValueError:
                raise ServiceError("InvalidArgumentException", "StartingSequenceNumber "
                                   f"{request.get('StartingSequenceNumber')!r} is not of this stream") from None
            if kind == "AFTER_SEQUENCE_NUMBER":
                page, slot = divmod(page * self.source.page_records + slot + 1, self.source.page_records)
        elif kind == "LATEST" and self.source.records_per_shard:
            page, slot = divmod(self.source.records_per_shard, self.source.page_records)
        elif kind not in ("TRIM_HORIZON", "LATEST", "AT_TIMESTAMP"):  # endless: LATEST and any time = the start
            raise ServiceError("InvalidArgumentException", f"ShardIteratorType {kind!r}")
        return {"ShardIterator": f"{shard_name(shard)}:{page}:{slot}"}

    def shards(self) -> list[dict[str, Any]]:
        width = (HASH_MAX + 1) // self.source.shards
        out = []
        for i in range(self.source.shards):
            high = HASH_MAX if i == self.source.shards - 1 else (i + 1) * width - 1
            out.append({"ShardId": shard_name(i),
                        "HashKeyRange": {"StartingHashKey": str(i * width), "EndingHashKey": str(high)},
                        "SequenceNumberRange": {"StartingSequenceNumber": sequence_number(0, 0)}})
        return out

    def summary(self) -> dict[str, Any]:
        return {"StreamName": self.source.stream, "StreamARN": ARN + self.source.stream, "StreamStatus": "ACTIVE",
                "StreamModeDetails": {"StreamMode": "PROVISIONED"}, "RetentionPeriodHours": 24,
                "StreamCreationTimestamp": 1.7e9, "EnhancedMonitoring": [{"ShardLevelMetrics": []}],
                "EncryptionType": "NONE", "OpenShardCount": self.source.shards, "ConsumerCount": 0}

    def handle(self, operation: str, request: dict[str, Any]) -> bytes:
        """One request's answer body; ServiceError for what Kinesis refuses."""
        self.requests += 1
        if operation == "GetRecords":
            return self.get_records(request.get("ShardIterator", ""), int(request.get("Limit") or 10000))
        stream = request.get("StreamName") or request.get("StreamARN", "").rpartition("/")[2]
        if stream and stream != self.source.stream:
            raise ServiceError("ResourceNotFoundException", f"Stream {stream} under account 000000000000 not found.")
        if operation == "GetShardIterator":
            answer: dict[str, Any] = self.shard_iterator(request)
        elif operation == "ListShards":
            answer = {"Shards": self.shards()}
        elif operation == "DescribeStreamSummary":
            answer = {"StreamDescriptionSummary": self.summary()}
        elif operation == "DescribeStream":
            summary = self.summary()
            answer = {"StreamDescription": {**{k: summary[k] for k in ("StreamName", "StreamARN", "StreamStatus",
                                                                          "StreamModeDetails", "RetentionPeriodHours",
                                                                          "StreamCreationTimestamp",
                                                                          "EnhancedMonitoring", "EncryptionType")},
                                            "Shards": self.shards(), "HasMoreShards": False}}
        else:
            raise ServiceError("UnknownOperationException", f"{operation} is not served by fast_kinesis")
        return orjson.dumps(answer)


class App:
    """The ASGI application: ``X-Amz-Target: Kinesis_20131202.<Operation>``, JSON body."""

    def __init__(self, kinesis: FastKinesis, delay_s: float = 0.0):
        self.kinesis = kinesis
        self.delay_s = delay_s

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        target = dict(scope["headers"]).get(b"x-amz-target", b"").decode()
        operation = target.rpartition(".")[2]
        status = 200
        try:
            body = self.kinesis.handle(operation, orjson.loads(b"".join(chunks) or b"{}"))
        except ServiceError as exc:
            status, body = 400, orjson.dumps({"__type": exc.code, "message": str(exc)})
            if exc.code == "UnknownOperationException" and operation:
                print(f"fast_kinesis: {operation} is not served", file=sys.stderr, flush=True)
        except ValueError as exc:
            status, body = 400, orjson.dumps({"__type": "SerializationException", "message": str(exc)})
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        headers = [*JSON_TYPE, (b"content-length", str(len(body)).encode()),
                   (b"x-amzn-requestid", b"fast-%d" % self.kinesis.requests)]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def serve(host: str, port: int, kinesis: FastKinesis, delay_s: float = 0.0) -> None:
    """HTTP/1.1 and h2c on one port until SIGTERM or SIGINT; then the CPU it used, on stdout."""
    from hypercorn.asyncio import serve as hypercorn_serve
    from hypercorn.config import Config as HypercornConfig

    config = HypercornConfig()
    config.bind = [f"{host}:{port}"]
    config.loglevel = "WARNING"
    config.keep_alive_timeout = 300

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await hypercorn_serve(App(kinesis, delay_s), config, shutdown_trigger=stop.wait)  # type: ignore[arg-type]

    started = time.monotonic()
    asyncio.run(main())
    times = os.times()
    print(f"fast_kinesis: {kinesis.requests} requests, {kinesis.records_served} records served in "
          f"{time.monotonic() - started:.1f} s; own CPU {times.user + times.system:.2f} s", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("port", type=int)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--stream", default="bench")
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--record-bytes", type=int, default=100)
    p.add_argument("--page-records", type=int, default=10000, help="records a full GetRecords page holds")
    p.add_argument("--records-per-shard", type=int, default=0, help="0: endless")
    p.add_argument("--behind-ms", type=int, default=60_000, help="MillisBehindLatest before a shard's end")
    p.add_argument("--delay-ms", type=float, default=0.0, help="every answer held this long (an API's latency)")
    args = p.parse_args(argv)
    source = Source(args.stream, args.shards, args.record_bytes, args.page_records, args.records_per_shard,
                    args.behind_ms)
    serve(args.host, args.port, FastKinesis(source), args.delay_ms / 1000)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Enhanced fan-out beyond the walking skeleton (which runs in both modes in
test_end_to_end.py): subscriptions that end or break mid-stream.

kinesis-mock serves SubscribeToShard, behind the proxy that adds the initial-response
event botocore expects (efo_proxy.py); the lease table is on moto. A producer runs the
whole time; the proxy ends every subscription cleanly once (what AWS does every five
minutes) and cuts them twice (a network failure). The processors are never restarted, so
every record must arrive exactly once: a gap would be a record lost between two
subscriptions, a duplicate one read twice from before the continuation point.
"""

from __future__ import annotations

import sys
import time
from collections import Counter

import boto3
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

pytestmark = pytest.mark.integration


def test_subscriptions_that_end_or_break_resume_with_no_gap_and_no_duplicate(efo_proxy, moto_url, unique_name,
                                                                             tmp_path):
    kinesis = boto3.client("kinesis", endpoint_url=efo_proxy.url, region_name="us-east-1")
    stream = unique_name
    ensure_stream(kinesis, stream, 2)
    out = tmp_path / "out"
    out.mkdir()
    props = write_properties(tmp_path / "app.properties", **base_properties(
        moto_url, stream, unique_name, f"{sys.executable} {RECORDER}", retrievalMode="FANOUT",
        kinesisEndpoint=efo_proxy.url))
    producer = BackgroundProducer(lambda n: produce(kinesis, stream, 40, first_id=n * 40, seed=n), 0.1)
    daemon = Daemon(props, tmp_path / "run.log", env={"RECORDER_DIR": str(out), "RECORDER_CHECKPOINT_EVERY": "100"})
    subscribed = efo_proxy.subscriptions
    producer.start()
    try:
        def delivered() -> int:
            return len(records_only(recorded(out)))

        wait_until(lambda: delivered() >= 400, 60, "400 records delivered")
        efo_proxy.end_subscriptions()
        wait_until(lambda: efo_proxy.subscriptions - subscribed >= 4, 20, "both shards subscribed again")
        for _ in range(2):
            mark = delivered()
            wait_until(lambda mark=mark: delivered() >= mark + 300 and efo_proxy.open_streams() == 2, 60,
                       "300 more records, both shards subscribed")
            assert efo_proxy.cut_subscriptions() == 2
        wait_until(lambda: efo_proxy.subscriptions - subscribed >= 8, 30, "both shards subscribed after the cuts")
        time.sleep(1)
        producer.finish()
        expected = Counter((p.shard_id, p.sequence_number, p.sub_sequence_number) for p in producer.puts)
        wait_until(lambda: delivered() >= sum(expected.values()), 60, "every record delivered")
        daemon.stop_gracefully()
    finally:
        producer.stop.set()
        daemon.kill()
    entries = recorded(out)
    got = Counter((e["_shard"], e["seq"], e["sub"]) for e in records_only(entries))
    missing = expected - got
    twice = {key: n for key, n in got.items() if n > 1}
    assert not missing, f"{len(missing)} records never delivered, e.g. {sorted(missing)[:3]}"
    assert not twice, f"{len(twice)} records delivered twice, e.g. {sorted(twice)[:3]}"
    assert set(got) == set(expected)
    starts = [e for e in entries if e.get("event") == "initialize"]
    assert len(starts) == 2, "the processors must not have been restarted"
    text = daemon.output()
    assert text.count("subscribing again") >= 4, "each cut is logged with where it resumes"
    print(f"{sum(expected.values())} records over {efo_proxy.subscriptions - subscribed} subscriptions "
          f"(1 clean end and 2 cuts of both shards): none missing, none twice")


def test_two_streams_each_read_through_its_own_consumer(efo_proxy, moto_url, unique_name, tmp_path):
    """A multi-stream application with retrievalMode = FANOUT: stream a through the consumer its
    ``stream.a.consumerArn`` names (registered beforehand), stream b, appended to the list file
    once a's records are in, through the one kcl-mp registers on it then (consumerName, by
    default applicationName; not waited for: the stream is consumed from the look that finds it
    ACTIVE). Every record once, each shard subscribed through its own stream's
    consumer only."""
    kinesis = boto3.client("kinesis", endpoint_url=efo_proxy.url, region_name="us-east-1")
    a, b = f"{unique_name}-a", f"{unique_name}-b"
    puts = {}
    for i, (name, shards) in enumerate(((a, 1), (b, 2))):
        ensure_stream(kinesis, name, shards)
        puts[name] = produce(kinesis, name, 150, first_id=i * 1000, seed=i)
    stream_arn = {name: kinesis.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]["StreamARN"]
                  for name in (a, b)}
    own = kinesis.register_stream_consumer(StreamARN=stream_arn[a], ConsumerName="own")["Consumer"]["ConsumerARN"]
    wait_until(lambda: kinesis.describe_stream_consumer(ConsumerARN=own)["ConsumerDescription"]["ConsumerStatus"]
               == "ACTIVE", 30, f"consumer {own} ACTIVE")
    out = {name: tmp_path / name for name in (a, b)}
    listing = tmp_path / "streams.txt"
    listing.write_text(f"{a}\n")
    keys = {k: v for k, v in base_properties(moto_url, a, unique_name, f"{sys.executable} {RECORDER}",
                                             retrievalMode="FANOUT", kinesisEndpoint=efo_proxy.url,
                                             streamListFile=listing, streamListReadIntervalMillis=1000).items()
            if k != "streamName"}
    keys[f"stream.{a}.consumerArn"] = own
    for name, directory in out.items():  # each stream's records apart: shard ids repeat across streams
        directory.mkdir()
        keys[f"stream.{name}.executableName"] = f"env RECORDER_DIR={directory} {sys.executable} {RECORDER}"
    daemon = Daemon(write_properties(tmp_path / "app.properties", **keys), tmp_path / "run.log",
                    env={"RECORDER_CHECKPOINT_EVERY": "50"})
    already = len(efo_proxy.subscribed)
    try:
        def delivered(name: str) -> bool:
            return len(records_only(recorded(out[name]))) >= len(puts[name])

        wait_until(lambda: delivered(a), 60, f"every record of {a} delivered")
        listing.write_text(f"{a}\n{b}\n")
        wait_until(lambda: delivered(b), 60, f"every record of {b}, appended, delivered")
        daemon.stop_gracefully()
    finally:
        daemon.kill()
    for name in (a, b):
        got = Counter((e["_shard"], e["seq"], e["sub"]) for e in records_only(recorded(out[name])))
        assert got == Counter((p.shard_id, p.sequence_number, p.sub_sequence_number) for p in puts[name]), name
    used: dict[str, set[str]] = {}
    for consumer, shard in efo_proxy.subscribed[already:]:
        used.setdefault(consumer, set()).add(shard)
    registered = next(arn for arn in used if arn != own)
    assert kinesis.describe_stream_consumer(ConsumerARN=registered)["ConsumerDescription"]["ConsumerName"] == unique_name
    assert registered.startswith(stream_arn[b] + "/consumer/"), registered
    assert used == {own: {p.shard_id for p in puts[a]}, registered: {p.shard_id for p in puts[b]}}, used

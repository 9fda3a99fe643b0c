"""FanOutFetcher's decisions against a stub of the parsed SubscribeToShard stream.

The integration tests run it against kinesis-mock (test_end_to_end, test_fanout), but
kinesis-mock never ends a subscription at shard end: it keeps sending events with the
last continuation and no ChildShards. AWS ends the shard with an event that carries
ChildShards and no ContinuationSequenceNumber; only a stub can send that here.
"""

from __future__ import annotations

import logging
import random

from botocore.exceptions import ClientError

from kcl_mp.config import InitialPosition, RetrievalSettings
from kcl_mp.retrieval.fanout import FanOutFetcher
from kcl_mp.retrieval.polling import Fetched, ShardEnded
from kcl_mp.sequence import ExtendedSequenceNumber


def _record(seq: str) -> dict:
    return {"SequenceNumber": seq, "Data": "YQ==", "PartitionKey": "k", "ApproximateArrivalTimestamp": 1700000000.0}


def _event(records: list[str], continuation: str | None, children: list | None = None) -> dict:
    body: dict = {"Records": [_record(s) for s in records], "MillisBehindLatest": 0}
    if continuation is not None:
        body["ContinuationSequenceNumber"] = continuation
    if children is not None:
        body["ChildShards"] = children
    return {"SubscribeToShardEvent": body}


class _Stream(list):
    def close(self) -> None:
        pass


class StubKinesis:
    """Each subscribe_to_shard call takes the next script: a list of events, or an exception."""

    def __init__(self, scripts: list):
        self.scripts = scripts
        self.positions: list[dict] = []

    def subscribe_to_shard(self, ConsumerARN: str, ShardId: str, StartingPosition: dict) -> dict:
        self.positions.append(StartingPosition)
        script = self.scripts.pop(0)
        if isinstance(script, Exception):
            raise script
        return {"EventStream": _Stream(script)}


class _Sequences(list):
    """The sequence numbers of a batch, as the encoder here makes it (a line of its length)."""

    @property
    def line(self) -> bytes:
        return b"x" * len(self)


ROOMY = RetrievalSettings(max_pending_process_records_input=100)  # _drain takes only once the fetcher is done


def _fetcher(kinesis: StubKinesis, start: ExtendedSequenceNumber, settings: RetrievalSettings = ROOMY) -> FanOutFetcher:
    return FanOutFetcher(kinesis, "s", "shardId-0", start, InitialPosition("TRIM_HORIZON"), settings,
                         lambda users, behind: _Sequences(u[2] for u in users), logging.getLogger("test"),
                         rng=random.Random(1), consumer_arn="arn:consumer")


def _drain(fetcher: FanOutFetcher) -> list:
    fetcher._poll()  # on this thread: the stub's scripts end it
    out = []
    while (item := fetcher.results.get(0)) is not None:
        out.append(item)
    return out


def test_records_then_shard_end_with_the_children():
    children = [{"ShardId": "shardId-1", "ParentShards": ["shardId-0"], "HashKeyRange": {}}]
    kinesis = StubKinesis([[_event(["10", "11"], "11"), _event([], "11"), _event(["12"], None, children)]])
    got = _drain(_fetcher(kinesis, ExtendedSequenceNumber("TRIM_HORIZON")))
    assert [item.batch for item in got if isinstance(item, Fetched)] == [["10", "11"], ["12"]]
    assert got[-1] == ShardEnded(tuple(children))
    assert kinesis.positions == [{"Type": "TRIM_HORIZON"}]


def test_a_subscription_that_ends_or_breaks_resumes_after_the_continuation():
    throttled = ClientError({"Error": {"Code": "ResourceInUseException", "Message": "busy"}}, "SubscribeToShard")
    kinesis = StubKinesis([
        [_event(["5", "6"], "7")],  # ends (five minutes)
        throttled,  # the previous subscription still closing
        [_event(["8"], "9"), _event([], None, [])],  # then the shard ends with no children
    ])
    fetcher = _fetcher(kinesis, ExtendedSequenceNumber("5"))
    fetcher.backoff = type(fetcher.backoff)(base_s=0.0, cap_s=0.0)
    got = _drain(fetcher)
    assert [item.batch for item in got if isinstance(item, Fetched)] == [["6"], ["8"]], "5 is the checkpoint"
    assert kinesis.positions == [
        {"Type": "AT_SEQUENCE_NUMBER", "SequenceNumber": "5"},
        {"Type": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": "7"},
        {"Type": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": "7"},
    ]
    assert got[-1] == ShardEnded(())


def test_a_batch_over_maxRecordsCount_is_handed_over_in_several_in_order():
    kinesis = StubKinesis([[_event(["10", "11", "12", "13", "14"], "14"), _event([], None, [])]])
    settings = RetrievalSettings(max_pending_process_records_input=100, max_records_count=2)
    fetcher = _fetcher(kinesis, ExtendedSequenceNumber("TRIM_HORIZON"), settings)
    fetcher.start()  # its queue holds 2 records: each batch waits for the one before to be taken
    got: list = []
    while not got or not isinstance(got[-1], ShardEnded):
        item = fetcher.next(5.0)
        assert item is not None, got
        got.append(item)
    fetcher.stop()
    assert [(item.batch, item.count) for item in got if isinstance(item, Fetched)] == [
        (["10", "11"], 2), (["12", "13"], 2), (["14"], 1)]

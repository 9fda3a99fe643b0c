"""Enhanced fan-out: the stream consumer, and SubscribeToShard retrieval for one shard.

The consumer (``consumerArn``, or ``consumerName`` which defaults to applicationName, as
in Java) is registered once per host by the supervisor before it takes leases, or found
if it exists, and waited for until ACTIVE. A multi-stream application has one per stream
(``stream.<name>.consumerArn``, else consumerName registered on that stream, as Java's
FanOutConfig does for a multi-stream tracker), found or registered when the stream is
first read: at start-up, or when it is appended to the list. Each shard worker then reads its shard with
``FanOutFetcher``, which hands over what the polling ``Fetcher`` does (Fetched,
ShardEnded, FetchFailed) from the events of a subscription:

    subscribe      StartingPosition from the checkpoint (AT_SEQUENCE_NUMBER, records at or
                   below it dropped, as in polling; TRIM_HORIZON, LATEST, AT_TIMESTAMP)
    each event     its records (deaggregated) -> Fetched; the queue is bounded, so a slow
                   processor stops the reading and TCP holds the stream back
    stream ends    (a subscription lasts five minutes) -> subscribe again AFTER the last
                   ContinuationSequenceNumber: nothing skipped, nothing twice
    error          backoff, then subscribe again from the same place
                   (ResourceInUseException: the previous subscription is still closing)
    shard end      an event with ChildShards and no ContinuationSequenceNumber -> ShardEnded

Checkpoints are the same as with polling: the processor checkpoints sequence numbers;
the subscription position is only the fetcher's own.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from kcl_mp.aws.errors import AWS_ERRORS, error_code, translate
from kcl_mp.config import Config
from kcl_mp.config.settings import StreamSettings
from kcl_mp.errors import ConfigError, DependencyError
from kcl_mp.logs import ShardLog
from kcl_mp.retrieval import kinesis_shards
from kcl_mp.retrieval.kinesis_stream import KinesisStream
from kcl_mp.retrieval.polling import Fetcher, Positioned, ShardEnded

CONSUMER_WAIT_S = 120.0  # a consumer is ACTIVE within seconds; AWS allows itself a few
_IN_USE = "ResourceInUseException"


def consumer_arn(config: Config, stream_arn: str, kinesis: Any, log: ShardLog,
                 stream: StreamSettings | None = None, wait_s: float = CONSUMER_WAIT_S) -> str:
    """The ACTIVE consumer's ARN: the configured one (``stream``'s, for a stream of a
    multi-stream application), or the consumer named consumerName (applicationName by
    default), registered on ``stream_arn`` when it does not exist (``active_consumer``)."""
    settings = config.retrieval
    configured = stream.consumer_arn if stream is not None else settings.consumer_arn
    return active_consumer(kinesis, stream_arn, configured or None,
                           settings.consumer_name or config.application_name, log, wait_s)


def active_consumer(kinesis: Any, stream_arn: str, arn: str | None, name: str, log: Any,
                    wait_s: float = CONSUMER_WAIT_S) -> str:
    """The ARN of consumer ``arn`` once ACTIVE, or of the consumer ``name`` on ``stream_arn``,
    registered when it does not exist. Not ACTIVE within ``wait_s``: a DependencyError (0:
    asked once, for a caller that must not block and asks again later; registering again
    finds the consumer registered the first time). ``log``: anything with ``info``."""
    if not arn:
        try:
            arn = kinesis.register_stream_consumer(StreamARN=stream_arn, ConsumerName=name)["Consumer"]["ConsumerARN"]
            log.info("registered stream consumer %s on %s", name, stream_arn)
        except AWS_ERRORS as exc:
            if error_code(exc) != _IN_USE:
                raise translate(exc, f"RegisterStreamConsumer {name}") from exc
            arn = _describe(kinesis, {"StreamARN": stream_arn, "ConsumerName": name})["ConsumerARN"]
    deadline = time.monotonic() + wait_s
    for _ in range(10_000):  # bounded by the deadline
        consumer = _describe(kinesis, {"ConsumerARN": arn})
        if consumer.get("StreamARN", stream_arn) != stream_arn:  # it would read another stream's shards
            raise ConfigError(f"consumerArn {arn}: a consumer of {consumer['StreamARN']}, not of the stream "
                              f"{stream_arn}")
        if consumer["ConsumerStatus"] == "ACTIVE":
            log.info("enhanced fan-out through consumer %s", arn)
            return str(arn)
        if consumer["ConsumerStatus"] == "DELETING" or time.monotonic() > deadline:
            raise DependencyError(f"stream consumer {arn} is {consumer['ConsumerStatus']}, not ACTIVE "
                                  f"(waited {wait_s:.0f} s)", retriable=False)
        time.sleep(0.5)
    raise DependencyError(f"stream consumer {arn} never became ACTIVE", retriable=False)


def _describe(kinesis: Any, kwargs: dict[str, str]) -> dict[str, Any]:
    arn = kwargs.get("ConsumerARN")
    try:
        return kinesis.describe_stream_consumer(**kwargs)["ConsumerDescription"]
    except AWS_ERRORS as exc:
        code = error_code(exc)
        if arn and code == "ResourceNotFoundException":
            raise ConfigError(f"consumerArn {arn}: no such stream consumer") from exc
        if arn and code in ("ValidationException", "InvalidArgumentException"):
            raise ConfigError(str(translate(exc, f"consumerArn {arn}"))) from exc  # malformed
        raise translate(exc, f"describing stream consumer {arn or kwargs.get('ConsumerName')}") from exc


class FanOutFetcher(Fetcher):
    """SubscribeToShard in place of GetRecords; everything else is the polling fetcher's."""

    def __init__(self, kinesis: Any, stream_name: str, *args: Any, consumer_arn: str, **kwargs: Any):
        self.kinesis_stream = KinesisStream(kinesis, stream_name)
        super().__init__(self.kinesis_stream, *args, **kwargs)
        self.kinesis = kinesis
        self.consumer_arn = consumer_arn
        self.subscriptions = 0
        self._stream: Any = None  # the open event stream, closed by stop() to end a blocked read

    def stop(self, wait_s: float = 5.0) -> None:
        self._stop.set()
        stream = self._stream
        if stream is not None:
            try:
                stream.close()
            except Exception:  # already closed, or closing under the reader: either way it ends
                pass
        super().stop(wait_s)

    def _poll(self) -> None:
        attempt = 0
        while not self._stop.is_set():
            try:
                if self._subscription():
                    return
                attempt = 0  # the subscription ran its course (five minutes): the next one
            except Exception as exc:
                if self._stop.is_set():
                    return  # stop() closed the stream under the reader: whatever it raised is expected
                if not isinstance(exc, AWS_ERRORS):
                    raise
                error = translate(exc, f"SubscribeToShard on {self.shard_id}")
                kinesis_shards.check_gone(self.kinesis, self.kinesis_stream.stream_name, self.shard_id, exc)
                if not error.retriable:
                    raise error from exc
                delay = self.backoff.next_delay(attempt, self.rng)
                attempt += 1
                # ResourceInUse: the last subscription is still closing (one a shard each 5 s): expected
                level = logging.INFO if error_code(exc) == _IN_USE else logging.WARNING
                self.log.log(level, "%s; subscribing again in %.2f s after %s", error, delay,
                             self._last_read or "the checkpoint")
                if not self._sleep(delay):
                    return

    def _subscription(self) -> bool:
        """One subscription, to its end: True when done (shard end, or stopping), False when
        it simply ended."""
        at = self._position()
        position: dict[str, Any] = {"Type": at.kind}
        if at.sequence_number is not None:
            position["SequenceNumber"] = at.sequence_number
        if at.timestamp is not None:
            position["Timestamp"] = at.timestamp
        response = self.kinesis.subscribe_to_shard(ConsumerARN=self.consumer_arn, ShardId=self.shard_id,
                                                   StartingPosition=position)
        self.subscriptions += 1
        self._stream = stream = response["EventStream"]
        try:
            if self.subscriptions == 1 and not self._put(Positioned()):
                return True
            for event in stream:
                if self._stop.is_set():
                    return True
                body = event.get("SubscribeToShardEvent")
                if body is None:
                    continue
                if not self._hand_over(body.get("Records") or [], body.get("MillisBehindLatest")):
                    return True
                continuation = body.get("ContinuationSequenceNumber")
                if not continuation:  # the shard is closed and read to its end
                    self._put(ShardEnded(tuple(body.get("ChildShards") or ())))
                    return True
                self._last_read = continuation
            return False
        finally:
            self._stream = None
            try:
                stream.close()
            except Exception:  # the connection is gone already
                pass

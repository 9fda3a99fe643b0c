"""Shard sync of a multi-stream application: a ``ShardSyncer`` per stream, behind the one
syncer's interface the lease coordinator and the supervisor call (``describe_stream``,
``sync_shards``, ``audit``, ``create_children``, ``poll_parents``).

Each stream's lease keys carry its identifier (``leases.multi_stream``): its account, from
DescribeStreamSummary at start-up, and its creation epoch, chosen once by ``choose_epoch`` from
the first view of the whole table this host syncs from (the leader's in a 3.x fleet, every
host's in a 2.x one). A DynamoDB stream's is the adapter's: its ARN's account, the adapter's
name for it, epoch 1 (DescribeStream at start-up only checks that it can be read). A host
that only reads a shard to its end creates its children under that lease's own identifier, so
it never needs to choose.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kcl_mp.config import Config
from kcl_mp.config.settings import StreamKind, StreamSettings
from kcl_mp.errors import ConfigError
from kcl_mp.leases.lease import Lease
from kcl_mp.leases.multi_stream import ADAPTER_EPOCH, StreamIdentifier, choose_epoch, split_key
from kcl_mp.leases.shard_syncer import ShardSyncer, TableView
from kcl_mp.leases.table import LeaseTable
from kcl_mp.logs import ShardLog
from kcl_mp.retrieval import kinesis_shards
from kcl_mp.retrieval.streams import listed_stream


class StreamSyncers:
    def __init__(self, config: Config, table: LeaseTable, client: Any, log: ShardLog, view: TableView):
        """``client``: the streams' (``retrieval.streams.stream_client``)."""
        self.config, self.table, self.client, self.log, self.view = config, table, client, log, view
        self.streams = {stream.name: stream for stream in config.streams}  # synced: the list, as it changes
        self.known = dict(self.streams)  # every stream listed since start-up (a drained one's leases may end)
        self.described: dict[str, tuple[str, int]] = {}  # name -> its ARN and creation time (ms)
        self.chosen: dict[str, StreamIdentifier] = {}  # name -> the identifier its new leases get
        self.syncers: dict[StreamIdentifier, ShardSyncer] = {}

    def describe_stream(self) -> str:
        """Every stream described at start-up, before anything is written (a ConfigError names
        one that does not exist); their ARNs, for messages."""
        return ", ".join(self.describe(stream) for stream in self.streams.values())

    def describe(self, stream: StreamSettings) -> str:
        """DescribeStreamSummary of ``stream``, at start-up or when it is appended to the list (a
        ConfigError names one that does not exist); its ARN."""
        if stream.kind is StreamKind.DYNAMODB:
            self.described[stream.name] = (listed_stream(self.config, self.client, stream).describe(), ADAPTER_EPOCH)
        else:
            self.described[stream.name] = kinesis_shards.describe_summary(self.client, stream.name, stream.arn)
        return self.described[stream.name][0]

    def streams_changed(self, streams: tuple[StreamSettings, ...]) -> None:
        """The streams synced from now on, each described already (``describe``). A stream that
        left keeps its syncer for the shard ends of its leases still held; one that comes back
        chooses its epoch again, from its leases."""
        self.streams = {stream.name: stream for stream in streams}
        self.known.update(self.streams)
        self.chosen = {name: identifier for name, identifier in self.chosen.items() if name in self.streams}

    def sync_shards(self, leases: Mapping[str, Lease], why: str) -> bool:
        """Each stream's shard sync (``ShardSyncer.sync_shards``); False if any listing failed."""
        results = [self._syncer(identifier).sync_shards(leases, f"{why}, stream {identifier.name}")
                   for identifier in self._identifiers()]
        return all(results)

    def audit(self) -> bool:
        results = [self._syncer(identifier).audit() for identifier in self._identifiers()]
        return all(results)

    @property
    def confirming(self) -> bool:
        """A stream's last audit saw a gap for the first time (``ShardSyncer.confirming``)."""
        return any(self._syncer(identifier).confirming for identifier in self._identifiers())

    def create_children(self, key: str, children: Sequence[Mapping[str, Any]]) -> bool:
        split = split_key(key)
        assert split is not None, key  # a multi-stream application's table shows it no other lease
        return self._syncer(split[0]).create_children(key, children)

    def poll_parents(self, keys: Iterable[str]) -> None:
        by_stream: dict[StreamIdentifier, list[str]] = {}
        for key in keys:
            split = split_key(key)
            assert split is not None, key
            by_stream.setdefault(split[0], []).append(key)
        for identifier, parents in by_stream.items():
            self._syncer(identifier).poll_parents(parents)

    def _identifiers(self) -> list[StreamIdentifier]:
        """Each stream's identifier, its epoch chosen once from this host's view of the table."""
        for name, stream in self.streams.items():
            if name not in self.chosen:
                self.chosen[name] = self._choose(stream)
        return list(self.chosen.values())

    def _choose(self, stream: StreamSettings) -> StreamIdentifier:
        arn, created_ms = self.described[stream.name]
        account = arn.split(":")[4]
        if stream.kind is StreamKind.DYNAMODB:
            identifier = StreamIdentifier(account, stream.name, ADAPTER_EPOCH)
            self.log.info("stream of table %s: lease keys %s:<shard id> (the DynamoDB Streams adapter's)",
                          stream.key_name, identifier.serialized)
            return identifier
        choice = choose_epoch(account, stream.name, self.view.last_seen, stream.creation_epoch, created_ms)
        if choice is None:  # not reached: DescribeStreamSummary always gives the creation time
            raise ConfigError(f"stream {stream.name}: no creation epoch; set stream.{stream.name}.creationEpoch")
        identifier = StreamIdentifier(account, stream.name, choice.epoch)
        self.log.info("stream %s: lease keys %s:<shard id> (the epoch from %s)", stream.name, identifier.serialized,
                      choice.source)
        if choice.warning:
            self.log.warning("%s", choice.warning)
        return identifier

    def _syncer(self, identifier: StreamIdentifier) -> ShardSyncer:
        if identifier not in self.syncers:
            stream = self.known[identifier.name]
            self.syncers[identifier] = ShardSyncer(
                self.config, self.table, self.client, self.log, self.view,
                stream=listed_stream(self.config, self.client, stream),
                identifier=identifier,
                initial=stream.initial_position)
        return self.syncers[identifier]

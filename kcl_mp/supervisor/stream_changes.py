"""A multi-stream application's streams while it runs: the list looked at again every
streamListReadIntervalMillis, each look decided by ``leases.stream_changes.plan_streams`` and
carried out here (read, decide, write: this class decides nothing itself).

    read     streamListFile again (without one the list never changes, but former streams of the
             table are still found and their leases deleted per the strategy); a file that cannot
             be read or holds a bad line is logged with its file and line and the last good list
             kept, so a typo never stops every stream
    start    a stream appended is described, and with enhanced fan-out its consumer found or
             registered (one that does not exist, or a consumer not ACTIVE yet, which is not
             waited for, is logged and tried again at the next look), shown to the table's view
             and to the shard syncers; the host that syncs shards (every 2.x host, the 3.x
             leader) audits at once, so the new stream's leases are created and taken or
             assigned within a scan
    drain    a stream removed is taken and assigned by nobody from now on; each of its leases held
             here has its shard told shutdownRequested (the processor may checkpoint, as on a
             graceful stop) and is released once the processor made its last checkpoint or ended,
             or after shutdownGraceMillis; then this host stops renewing it (``drain``, every
             turn of the loop). The stream stays in the table's view until nothing of it is held
    delete   the host that syncs shards deletes the leases of a former stream whose wait is over

Every step is logged with its ``StreamEvent`` (the JSON log's ``event`` and ``stream``), and the
looks are counted as Java's MultiStreamTracker metrics (ActiveStreams, StreamsPendingDeletion,
DeletedStreams).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone

from kcl_mp.config import Config
from kcl_mp.config.load import read_stream_list
from kcl_mp.config.settings import StreamSettings
from kcl_mp.config.stream_list import file_streams
from kcl_mp.errors import ConfigError, DependencyError
from kcl_mp.leases.multi_stream import split_key
from kcl_mp.leases.stream_changes import plan_streams
from kcl_mp.leases.stream_syncers import StreamSyncers
from kcl_mp.logs import LeaseEvent, ShardLog, StreamEvent, lease_event, stream_event
from kcl_mp.metrics.catalogue import Recorder
from kcl_mp.retrieval import fanout
from kcl_mp.supervisor.coordinator import LeaseCoordinator
from kcl_mp.supervisor.shard_life import CHECKPOINTED, Event
from kcl_mp.supervisor.shards import Shards


class StreamChanges:
    def __init__(self, config: Config, leases: LeaseCoordinator, shards: Shards, log: ShardLog, metrics: Recorder,
                 clock: Callable[[], float], wall: Callable[[], float] = time.time):
        self.config, self.leases, self.shards, self.log, self.metrics = config, leases, shards, log, metrics
        self.clock, self.wall = clock, wall
        self.listed: dict[str, StreamSettings] = {stream.name: stream for stream in config.streams}
        self.removed: dict[str, StreamSettings] = {}  # streams that left the list, as they were listed
        self.draining: dict[str, float] = {}  # stream -> when its drain began (the clock's)
        self.pending: Mapping[str, int] = {}  # former stream -> when its leases are deleted (ms since 1970)
        self.refused: str | None = None  # the last refusal of the list file logged (said once)
        self.consumers: dict[str, str] = {}  # stream -> its enhanced fan-out consumer's ARN (FANOUT only)

    @property
    def streams(self) -> tuple[StreamSettings, ...]:
        """The streams this host reads or drains: the list's, then the ones draining."""
        return (*self.listed.values(), *(self.removed[name] for name in self.draining if name not in self.listed))

    def stream_of(self, key: str) -> StreamSettings | None:
        """The settings of the stream lease ``key`` reads, as the list has them now."""
        name = _stream_name(key)
        return self.listed.get(name) or self.removed.get(name)

    def consumer_of(self, key: str) -> str | None:
        """The enhanced fan-out consumer lease ``key``'s shard is read through (None: polling)."""
        return self.consumers.get(_stream_name(key))

    def find_consumers(self) -> None:
        """At start-up, with enhanced fan-out: each listed stream's consumer, found or registered
        and ACTIVE (a ConfigError or DependencyError stops the start-up, naming it)."""
        for stream in self.listed.values():
            self._find_consumer(stream, fanout.CONSUMER_WAIT_S)

    def _find_consumer(self, stream: StreamSettings, wait_s: float) -> None:
        sync = self.leases.sync
        assert isinstance(sync, StreamSyncers)  # a multi-stream application's, each stream described already
        arn = sync.described[stream.name][0]
        self.consumers[stream.name] = fanout.consumer_arn(self.config, arn, self.leases.kinesis, self.log, stream,
                                                          wait_s)

    # -- a look at the list ------------------------------------------------------------

    def look(self) -> bool:
        """Read the list, decide, carry the plan out. True when a stream was appended: sync now."""
        now = self.clock()
        listed = self._read() if self.config.stream_list.file else None
        if listed is None:
            listed = tuple(self.listed.values())
        listed = tuple(stream for stream in listed if stream.name in self.listed or self._described(stream))
        may_delete = self.leases.runs_shard_sync()
        plan = plan_streams(tuple(self.listed), tuple(stream.name for stream in listed), self._in_table(),
                            self.pending, self.config.former_streams, int(self.wall() * 1000), may_delete)
        for name in plan.revived:
            self.log.info("stream %s is back in the list: its leases are kept", name,
                          extra=stream_event(StreamEvent.REVIVED, name))
        for name in plan.drain:
            self.removed[name] = self.listed[name]
            self.draining[name] = now
        self.listed = {stream.name: stream for stream in listed}
        for name in plan.start:
            self.log.info("stream %s added to the list: its shards are synced and its leases consumed", name,
                          extra=stream_event(StreamEvent.ADDED, name))
        for name in plan.drain:
            self._ask_shutdown(name)
        for name in plan.scheduled:
            at = plan.pending[name]
            self.log.info("stream %s is a former stream: its leases are deleted at %s unless it is listed again "
                          "(%s)", name, datetime.fromtimestamp(at / 1000, timezone.utc).isoformat(timespec="seconds"),
                          self.config.former_streams.strategy, extra=stream_event(StreamEvent.SCHEDULED, name, at=at))
        deleted = sum(self._delete(name) for name in plan.delete)
        self.pending = plan.pending
        self.leases.streams_changed(self.streams, frozenset(self.draining))
        self.metrics.add("active_streams", len(self.listed))
        if may_delete:
            self.metrics.add("streams_pending_deletion", len(self.pending))
            self.metrics.add("deleted_streams", deleted)
        return bool(plan.start)

    def _read(self) -> tuple[StreamSettings, ...] | None:
        """The list file's streams; None (logged once per distinct fault) when it cannot be used."""
        path = self.config.stream_list.file
        assert path is not None
        try:
            text = read_stream_list(path, "streamListFile")
            streams = file_streams(text, path, self.config.kinesis.region, self.config.stream_list.templates,
                                   self.config.processor.command, self.config.initial_position,
                                   self.config.stream_kind)
        except ConfigError as exc:
            if str(exc) != self.refused:
                self.log.error("%s: keeping the last good list (%s)", exc, ", ".join(self.listed),
                               extra=stream_event(StreamEvent.LIST_REFUSED, path))
            self.refused = str(exc)
            return None
        self.refused = None
        return streams

    def _described(self, stream: StreamSettings) -> bool:
        """An appended stream, described before anything is written for it; False (logged) if it cannot be."""
        sync = self.leases.sync
        assert isinstance(sync, StreamSyncers)  # a multi-stream application's
        try:
            arn = sync.describe(stream)
            if self.config.retrieval.mode == "FANOUT":  # not waited for: the loop renews leases
                self._find_consumer(stream, 0.0)
        except (ConfigError, DependencyError) as exc:
            self.log.error("stream %s is listed but cannot be read (%s): not consumed; tried again at the next look",
                           stream.name, exc)
            return False
        self.log.debug("stream %s appended: %s", stream.name, arn)
        return True

    def _in_table(self) -> set[str]:
        """The streams the lease table holds leases of, by name, as the last scan saw them."""
        keys = [*self.leases.last_seen, *(row.key for row in self.leases.table.others)]
        return {name for key in keys if (name := _stream_name(key))}

    def _delete(self, name: str) -> int:
        try:
            keys = self.leases.delete_stream(name)
        except DependencyError as exc:
            self.log.warning("deleting the leases of former stream %s failed (%s); tried again at the next look",
                             name, exc)
            return 0
        if not keys:  # another host (2.x) deleted them first
            return 0
        self.log.info("deleted the %d leases of former stream %s (%s)", len(keys), name,
                      self.config.former_streams.strategy, extra=stream_event(StreamEvent.DELETED, name,
                                                                              leases=len(keys)))
        return 1

    # -- draining ----------------------------------------------------------------------

    def _held(self, name: str) -> list[str]:
        return [key for key in self.leases.held if _stream_name(key) == name]

    def _ask_shutdown(self, name: str) -> None:
        held = self._held(name)
        self.log.info("stream %s removed from the list: draining its %d leases held here (shutdownRequested, then "
                      "released)", name, len(held), extra=stream_event(StreamEvent.DRAINING, name, leases=len(held)))
        for key in held:
            shard = self.shards.active.get(key)
            if shard is not None and shard.exit_code is None:
                self.shards.ask_shutdown(shard, Event.STOP)

    def drain(self) -> None:
        """Every turn: release the leases of draining streams whose processors are done (or out of
        time); a stream nothing of which is held here any more is drained."""
        if not self.draining:
            return
        now = self.clock()
        grace_s = self.config.processor.shutdown_grace_ms / 1000.0
        for name, since in list(self.draining.items()):
            for key in self._held(name):
                shard = self.shards.active.get(key)
                done = shard is None or shard.exit_code is not None or shard.state in CHECKPOINTED
                if done or now - since >= grace_s:
                    checkpoint = str(shard.progress.checkpoint if shard else self.leases.held[key].lease.checkpoint)
                    released = self.leases.release(key)
                    self.log.info("%s lease %s of drained stream %s (checkpoint %s)",
                                  "released" if released else "stopped renewing", key, name, checkpoint,
                                  extra={"shard": key, **lease_event(LeaseEvent.RELEASED, key, stream=name,
                                                                     checkpoint=checkpoint)})
            if not self._held(name) and not any(_stream_name(key) == name for key in self.leases.handoffs.incoming):
                del self.draining[name]
                self.log.info("stream %s drained: nothing of it is held here", name,
                              extra=stream_event(StreamEvent.DRAINED, name))
                self.leases.streams_changed(self.streams, frozenset(self.draining))


def _stream_name(key: str) -> str:
    split = split_key(key)
    return split[0].name if split else ""

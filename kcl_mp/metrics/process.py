"""The metrics process: CloudWatch publishing and the Prometheus endpoint, off the supervisor.

Forked by the supervisor at start, before any pool process and before any thread, when
metricsLevel is not NONE or kclmp.metricsPort is set. Why a process: a slow CloudWatch
call or a slow scrape never holds the supervisor's GIL or its renewals, and the supervisor
keeps no threads, so forking pool processes stays safe.

    supervisor --(pipe: one JSON line a second)--> metrics process
        samples (statistic sets recorded since the last line), gauges (the current view),
        state (leases held, seconds since the oldest held lease was renewed)

    metrics process
        main thread   reads the pipe, folds samples into the Prometheus counters and the
                      CloudWatch buffer (``metrics.catalogue.CloudWatchBuffer``)
        publisher     PutMetricData when the buffer is due (metricsBufferTimeMillis or
                      metricsMaxQueueSize), in batches; a failure keeps the data for the
                      next try
        http          /metrics (prometheus-client text format), /healthz (``metrics.health``):
                      one thread, bounded connections and timeouts (``metrics.http``)

The supervisor never blocks on the pipe: a line that does not fit waits for the next turn
and the supervisor goes on recording into the same statistic sets, so nothing is lost,
only delayed. The process ends when the pipe closes (the supervisor stopped or died),
after a last publish. It ignores SIGINT and SIGTERM: its end is the supervisor's.
"""

from __future__ import annotations

import atexit
import logging
import os
import select
import signal
import socket
import threading
import time
from collections.abc import Iterable
from typing import Any

import multiprocess
import orjson

from kcl_mp import logs
from kcl_mp.config import Config
from kcl_mp.metrics import http
from kcl_mp.metrics.catalogue import (
    CATALOGUE,
    CloudWatchBuffer,
    Samples,
    Stat,
    decode_samples,
    fold_worker_gauges,
    put_batches,
    put_request,
)
from kcl_mp.metrics.health import health

STOP_WAIT_S = 15.0  # the last publish at shutdown
PUBLISH_TIMEOUT_S = 10.0


class Link:
    """The supervisor's end of the pipe: non-blocking, one whole line in flight at most."""

    def __init__(self, process: Any, fd: int):
        self.process = process
        self.fd = fd
        self.pending = b""

    def idle(self) -> bool:
        """True when the last line is out (write more first if not)."""
        if self.pending:
            try:
                written = os.write(self.fd, self.pending)
                self.pending = self.pending[written:]
            except BlockingIOError:
                pass
            except OSError:  # the metrics process is gone: say so once, then stop trying
                logging.getLogger("kcl_mp.supervisor").error("the metrics process is gone; metrics are off")
                self.pending = b""
                self.forget()
        return not self.pending and self.fd >= 0

    def send(self, line: bytes) -> None:
        self.pending = line
        self.idle()

    def forget(self) -> None:
        """In a forked child: close the inherited write end (only the supervisor writes)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def flush(self, timeout_s: float) -> None:
        """Wait (bounded) until the line in flight is out."""
        deadline = time.monotonic() + timeout_s
        while self.pending and self.fd >= 0 and time.monotonic() < deadline:
            if not self.idle():
                time.sleep(0.01)

    def close(self) -> None:
        """Close the pipe; wait for the last publish (bounded), then make sure it is gone."""
        self.flush(2.0)
        self.forget()
        self.process.join(STOP_WAIT_S)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5.0)


def start(config: Config, log_level: str, log_format: str) -> Link:
    """Fork the metrics process (the supervisor does when ``config.metrics.enabled``).

    The supervisor closes the link on its way out; should anything end it first (an
    exception, an interrupt between the fork and the link), the link closes at exit anyway,
    before ``multiprocess`` joins its children: the metrics process ends at EOF, so an exit
    that kept the pipe open would wait for it forever."""
    settings = config.metrics
    server = http.listen(settings.address, settings.port) if settings.port is not None else None
    read_fd, write_fd = os.pipe()
    process = multiprocess.get_context("fork").Process(
        target=_run, args=(config, log_level, log_format, read_fd, write_fd, server),
        name="kcl-mp metrics", daemon=False)
    signals = {signal.SIGINT, signal.SIGTERM}
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, signals)  # no KeyboardInterrupt between fork and link
    try:
        process.start()
        os.close(read_fd)
        os.set_blocking(write_fd, False)
        link = Link(process, write_fd)
        atexit.register(link.close)  # runs before multiprocess's own exit handler (registered at its import)
        os.register_at_fork(after_in_child=link.forget)  # pool processes must not hold the pipe open
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    log = logging.getLogger("kcl_mp.supervisor")
    if server is not None:
        host, port = server.getsockname()[:2]
        server.close()
        log.info("metrics process started (pid %d): Prometheus http://%s:%d/metrics and /healthz; "
                 "CloudWatch metricsLevel %s", process.pid, host, port, settings.level)
    else:
        log.info("metrics process started (pid %d): CloudWatch metricsLevel %s", process.pid, settings.level)
    return link


# -- the process ------------------------------------------------------------------------


class Exporter:
    """What /metrics and /healthz show: counters summed over every snapshot, the latest gauges."""

    def __init__(self, config: Config):
        self.lock = threading.Lock()
        self.totals: Samples = {}
        self.gauges: dict[str, dict[str, float]] = {}
        self.lease_gauges: dict[tuple[str, str], float] = {}  # measured by the shards' drivers: the last sample
        self.state: dict[str, Any] = {}
        self.received_at: float | None = None
        self.info = {"worker": config.worker_id, "application": config.application_name,
                     "stream": config.stream_name, "stream_kind": config.stream_kind.value}

    def apply(self, samples: Samples, gauges: dict[str, dict[str, float]], state: dict, leases: Iterable[str],
              now: float) -> None:
        """Fold in one snapshot. Per-lease series exist while this worker holds the lease
        (a counter that comes back with the lease restarts at 0, which Prometheus reads as
        a reset), so their number stays bounded by the leases held, whatever the resharding."""
        held = set(leases)
        with self.lock:
            for key, stat in samples.items():
                if CATALOGUE[key[0]].kind == "gauge":
                    if CATALOGUE[key[0]].label == "shard":
                        self.lease_gauges[key] = stat.last
                    continue
                total = self.totals.get(key)
                if total is None:
                    self.totals[key] = Stat(stat.count, stat.total, stat.low, stat.high, stat.last)
                else:
                    total.merge(stat)
            self.totals = {key: stat for key, stat in self.totals.items()
                           if CATALOGUE[key[0]].label != "shard" or key[1] in held}
            self.lease_gauges = {key: value for key, value in self.lease_gauges.items() if key[1] in held}
            self.gauges = fold_worker_gauges({m: v for m, v in gauges.items() if m in CATALOGUE}, self.info["worker"])
            for (metric, label), value in self.lease_gauges.items():  # the supervisor's view first
                if metric not in gauges:
                    self.gauges.setdefault(metric, {})[label] = value
            self.state = state
            self.received_at = now

    def collect(self) -> Iterable[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, SummaryMetricFamily

        with self.lock:
            totals = dict(self.totals)
            gauges = {m: dict(v) for m, v in self.gauges.items()}
        yield InfoMetricFamily("kclmp", "this kcl-mp worker", value=self.info)
        for metric, spec in CATALOGUE.items():
            labels = [spec.label] if spec.label else []
            if spec.kind == "gauge":
                family = GaugeMetricFamily(spec.prom, spec.doc, labels=labels)
                for label, value in sorted(gauges.get(metric, {}).items()):
                    family.add_metric([label] if labels else [], value)
                yield family
                continue
            rows = sorted((label, stat) for (m, label), stat in totals.items() if m == metric)
            if spec.kind == "timer":
                summary = SummaryMetricFamily(spec.prom, spec.doc, labels=labels)
                for label, stat in rows:
                    summary.add_metric([label] if labels else [], count_value=stat.count, sum_value=stat.total)
                yield summary
            elif spec.kind == "success":
                done = CounterMetricFamily(spec.prom, spec.doc, labels=labels)
                failed = CounterMetricFamily(spec.prom + "_failed", spec.doc + ": the failed ones", labels=labels)
                for label, stat in rows:
                    done.add_metric([label] if labels else [], stat.count)
                    failed.add_metric([label] if labels else [], stat.count - stat.total)
                yield done
                yield failed
            else:
                counter = CounterMetricFamily(spec.prom, spec.doc, labels=labels)
                for label, stat in rows:
                    counter.add_metric([label] if labels else [], stat.total)
                yield counter

    def healthz(self, failover_s: float) -> tuple[bool, dict]:
        with self.lock:
            return health(time.monotonic(), self.received_at, dict(self.state), failover_s)


def _app(exporter: Exporter, failover_s: float) -> http.App:
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(exporter)

    def app(path: str) -> http.Answer:
        if path == "/metrics":
            return 200, CONTENT_TYPE_LATEST, generate_latest(registry)
        if path == "/healthz":
            ok, report = exporter.healthz(failover_s)
            return 200 if ok else 503, "application/json", orjson.dumps(report) + b"\n"
        return 404, "text/plain", b"kcl-mp serves /metrics and /healthz\n"

    return app


class Publisher:
    """PutMetricData on its own thread, so a slow CloudWatch never delays reading the pipe."""

    def __init__(self, config: Config, log: logs.ShardLog):
        from kcl_mp.aws.clients import client as aws_client

        settings = config.metrics
        self.namespace = config.application_name
        self.buffer = CloudWatchBuffer(config.worker_id, settings.level, settings.enabled_dimensions,
                                       settings.buffer_time_ms / 1000.0, settings.max_queue_size)
        self.cloudwatch = aws_client("cloudwatch", config.cloudwatch)
        self.log = log
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.stopping = False
        self.reported_drops = 0
        self.calls = 0
        self.thread = threading.Thread(target=self._run, name="cloudwatch", daemon=True)

    def add(self, samples: Samples) -> None:
        with self.lock:
            self.buffer.add(samples, time.time())
            if self.buffer.due(time.time()):
                self.wake.set()

    def _run(self) -> None:
        while not self.stopping:
            self.wake.wait(0.5)
            self.wake.clear()
            with self.lock:
                due = self.buffer.due(time.time())
            if due:
                self.publish()

    def publish(self) -> None:
        """Send everything waiting; what fails goes back into the buffer for the next try."""
        with self.lock:
            at, taken = self.buffer.take()
            drops, self.reported_drops = self.buffer.dropped - self.reported_drops, self.buffer.dropped
        if drops:
            self.log.warning("dropped %d metric datums: metricsMaxQueueSize (%d) was reached while CloudWatch "
                             "could not be reached", drops, self.buffer.max_queue_size)
        batches = put_batches(taken)
        for index, batch in enumerate(batches):
            try:
                self.cloudwatch.put_metric_data(**put_request(self.namespace, at, batch))
                self.calls += 1
            except Exception as exc:  # botocore errors of every kind: the data waits, the process goes on
                rest = {key: stat for later in batches[index:] for key, stat in later}
                with self.lock:
                    self.buffer.give_back(at, rest)
                self.log.warning("PutMetricData to namespace %s failed (%s); %d datums kept for the next try",
                                 self.namespace, exc, len(rest))
                return

    def stop(self) -> None:
        self.stopping = True
        self.wake.set()
        self.thread.join(PUBLISH_TIMEOUT_S)
        self.publish()


def _run(config: Config, log_level: str, log_format: str, read_fd: int, write_fd: int,
         server: socket.socket | None) -> None:
    """Process entry point (the forked child)."""
    os.close(write_fd)
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # ends when the supervisor closes the pipe
    logs.setup(log_level, log_format, config.worker_id)
    log = logs.ShardLog(logging.getLogger("kcl_mp.metrics"), config.worker_id)
    exporter = Exporter(config)
    publisher = Publisher(config, log) if config.metrics.level != "NONE" else None
    if publisher is not None:
        publisher.thread.start()
    endpoint = None
    if server is not None:
        endpoint = http.Endpoint(server, _app(exporter, config.lease.failover_time_ms / 1000.0), log)
        endpoint.start()
    try:
        _read(read_fd, exporter, publisher, log)
    finally:
        if publisher is not None:
            publisher.stop()
            log.info("metrics process stopped after %d PutMetricData calls", publisher.calls)
        if endpoint is not None:
            endpoint.stop()
    os._exit(0)


def _read(fd: int, exporter: Exporter, publisher: Publisher | None, log: logs.ShardLog) -> None:
    """Apply each line the supervisor writes, until the pipe closes."""
    buffered = b""
    while True:  # ends at EOF: when the supervisor closes the pipe or dies
        ready, _, _ = select.select([fd], [], [], 1.0)
        if not ready:
            continue
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return
        buffered += chunk
        *lines, buffered = buffered.split(b"\n")
        for line in lines:
            try:
                snapshot = orjson.loads(line)
                samples = decode_samples(snapshot["samples"])
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                log.error("unreadable metrics line from the supervisor skipped (%s)", exc)
                continue
            exporter.apply(samples, snapshot.get("gauges", {}), snapshot.get("state", {}),
                           snapshot.get("leases", ()), time.monotonic())
            if publisher is not None:
                publisher.add(samples)


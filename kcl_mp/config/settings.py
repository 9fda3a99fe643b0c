"""The configuration's shape: frozen dataclasses, one per concern, built once by ``load_config``.

Every field has one properties key (or a few spellings of it) declared in
``kcl_mp.config.keys``; derived timings (the renew and take intervals) are properties here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Literal, get_args

# Java KCL's epsilon for the lease timers (DynamoDBLeaseCoordinator).
LEASE_EPSILON_MS = 25

# clientVersionConfig's values (Java's ClientVersionConfig; the last one is 3.5's).
ClientVersionConfig = Literal["CLIENT_VERSION_CONFIG_3X", "CLIENT_VERSION_CONFIG_COMPATIBLE_WITH_2X",
                              "CLIENT_VERSION_CONFIG_COMPATIBLE_WITH_2X_PHASE1"]
CLIENT_VERSION_CONFIGS: tuple[ClientVersionConfig, ...] = get_args(ClientVersionConfig)


class StreamKind(Enum):
    """What ``streamArn`` (or ``streamName``) names: decided once, where the configuration is parsed."""

    KINESIS = "kinesis"
    DYNAMODB = "dynamodb"  # a DynamoDB stream (arn:...:table/T/stream/LABEL)


# kclmp.skipRecordsBehavior: the DynamoDB Streams Kinesis Adapter's names for what a trimmed
# position does (its default skips to TRIM_HORIZON: records are lost, by design).
SkipRecordsBehavior = Literal["SKIP_RECORDS_TO_TRIM_HORIZON", "KCL_RETRY"]
# kclmp.dynamodbRecordFormat: the record object of the adapter 2.x (partitionKey = the sequence
# number, subSequenceNumber 0) or of the 1.x StreamsMultiLangDaemon (both null).
DynamoDBRecordFormat = Literal["ADAPTER_V2", "ADAPTER_V1"]


@dataclass(frozen=True)
class DynamoDBStreamsSettings:
    """DynamoDB Streams through the adapter's rules (docs/dynamodb-streams.md)."""

    skip_records_behavior: SkipRecordsBehavior = "SKIP_RECORDS_TO_TRIM_HORIZON"
    record_format: DynamoDBRecordFormat = "ADAPTER_V2"


@dataclass(frozen=True)
class CredentialProvider:
    """One element of an ``AwsCredentialsProvider`` chain, with v1 names mapped to v2.

    ``name`` is the simple SDK v2 name (``DefaultCredentialsProvider``,
    ``EnvironmentVariableCredentialsProvider``, ``ProfileCredentialsProvider``,
    ``StsAssumeRoleCredentialsProvider`` ...); ``args`` the positional ``|`` arguments;
    ``nested`` the ``key=value`` arguments.
    """

    name: str
    args: tuple[str, ...] = ()
    nested: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ClientSettings:
    """How to reach one AWS service: region, endpoint override, credential chain."""

    region: str | None
    endpoint: str | None
    credentials: tuple[CredentialProvider, ...]


@dataclass(frozen=True)
class InitialPosition:
    """Where a shard without a checkpoint starts: LATEST, TRIM_HORIZON or AT_TIMESTAMP."""

    kind: str = "LATEST"
    timestamp: float | None = None  # seconds since the epoch, for AT_TIMESTAMP


# formerStreamsLeasesDeletionStrategy: Java's FormerStreamsLeasesDeletionStrategy.StreamsLeasesDeletionType
# names (PROVIDED_STREAMS_DEFERRED_DELETION deletes the streams of formerStreamsToDelete).
FormerStreamsStrategy = Literal["NO_STREAMS_LEASES_DELETION", "FORMER_STREAMS_AUTO_DETECTION_DEFERRED_DELETION",
                                "PROVIDED_STREAMS_DEFERRED_DELETION"]

# kclmp.leaseAssignmentStrategy: Java's LeaseAssignmentStrategy names (3.4.3), and kcl-mp's COST_BASED.
LeaseAssignmentStrategy = Literal["WORKER_UTILIZATION_AWARE", "COST_BASED", "LEASE_COUNT_BASED"]


@dataclass(frozen=True)
class StreamSettings:
    """One stream of a multi-stream application (``streamArns`` or ``streamNames``), with its
    ``stream.<name>.*`` overrides applied and the application's settings where it has none."""

    name: str
    arn: str | None  # None when named by streamNames: its account is learnt at start (DescribeStreamSummary)
    initial_position: InitialPosition
    command: tuple[str, ...]  # stream.<name>.executableName, else executableName
    consumer_arn: str | None = None  # stream.<name>.consumerArn: its enhanced fan-out consumer
    creation_epoch: int | None = None  # stream.<name>.creationEpoch; None: the table's leases, else its creation time
    # A DynamoDB stream is named by its ARN; its name is then the adapter's (values.adapter_stream_name,
    # what its lease keys carry) and its stream.<table>.* keys are its table's.
    kind: StreamKind = StreamKind.KINESIS

    @property
    def account(self) -> str | None:
        """The account of its ARN (None: not known before start-up).

        >>> StreamSettings("a", "arn:aws:kinesis:us-east-1:123456789012:stream/a", InitialPosition(), ()).account
        '123456789012'
        """
        return self.arn.split(":")[4] if self.arn else None

    @property
    def by_arn(self) -> bool:
        """Read through its ARN (listed by ARN: maybe another account's stream), not by name."""
        return self.arn is not None

    @property
    def key_name(self) -> str:
        """The name its ``stream.<name>.*`` keys use: a DynamoDB stream's table, else its name.

        >>> arn = "arn:aws:dynamodb:us-east-1:123456789012:table/Orders/stream/2026-01-02T03:04:05.678"
        >>> StreamSettings("us-east-1$123456789012$Orders$2026-01-02T03_04_05.678", arn, InitialPosition(), (),
        ...                kind=StreamKind.DYNAMODB).key_name
        'Orders'
        """
        if self.kind is StreamKind.DYNAMODB and self.arn:
            return self.arn.split("/")[1]
        return self.name


@dataclass(frozen=True)
class FormerStreamsSettings:
    """What becomes of the leases of a stream that left the list (Java's FormerStreamsLeasesDeletionStrategy)."""

    strategy: FormerStreamsStrategy = "NO_STREAMS_LEASES_DELETION"
    wait_ms: int = 3600000  # waitPeriodToDeleteFormerStreamsMillis: the deferral before deleting them
    provided: tuple[str, ...] = ()  # formerStreamsToDelete: PROVIDED_STREAMS_DEFERRED_DELETION's streams


@dataclass(frozen=True)
class StreamListSettings:
    """streamListFile: a multi-stream application's streams in a file, read again while it runs."""

    file: str | None = None  # its path (relative ones from the properties file's directory); None: no file
    read_interval_ms: int = 60000  # streamListReadIntervalMillis (Java's NEW_STREAM_CHECK_INTERVAL_MILLIS)
    # Each stream a stream.<name>.* key names, with its overrides (its ARN unset): what a stream
    # appended to the file later gets.
    templates: tuple[StreamSettings, ...] = ()


@dataclass(frozen=True)
class RetrievalSettings:
    mode: str = "FANOUT"  # resolved: "POLLING" or "FANOUT" (CONFIG.md section 9)
    max_records: int = 10000
    idle_time_between_reads_ms: int = 1500
    millis_behind_latest_threshold_for_reduced_tps_ms: int = 0
    call_process_records_even_for_empty_record_list: bool = False
    consumer_name: str | None = None
    consumer_arn: str | None = None
    # Java's prefetch bounds (SimpleRecordsFetcherFactory; no properties keys in Java, kclmp.
    # ones here), counted on the processRecords lines; a larger batch is split (docs/configuration.md).
    max_pending_process_records_input: int = 3
    max_byte_size: int = 8 << 20
    max_records_count: int = 30000
    worker_process_max_byte_size: int = 128 << 20  # kcl-mp's: every shard of one pool process together


@dataclass(frozen=True)
class LeaseSettings:
    table_name: str
    failover_time_ms: int = 10000
    max_leases_for_worker: int = 2147483647
    max_leases_to_steal_at_one_time: int = 1
    max_lease_renewal_threads: int = 20  # a renewal round runs this many renewals at once
    cleanup_leases_upon_shard_completion: bool = True
    ignore_unexpected_child_shards: bool = False
    shard_sync_interval_ms: int = 60000
    graceful_lease_handoff_enabled: bool = True
    graceful_lease_handoff_timeout_ms: int = 30000
    list_shards_backoff_ms: int = 1500
    max_list_shards_retry_attempts: int = 50
    deletion_protection_enabled: bool = False
    pitr_enabled: bool = False
    skip_shard_sync_at_startup_if_leases_exist: bool = False
    parent_shard_poll_interval_ms: int = 10000

    @property
    def renew_interval_s(self) -> float:
        """Java: failoverTimeMillis / 3 - epsilon (3308 ms at the default)."""
        return (self.failover_time_ms / 3 - LEASE_EPSILON_MS) / 1000.0

    @property
    def take_interval_s(self) -> float:
        """Java: 2 * (failoverTimeMillis + epsilon) (20050 ms at the default)."""
        return 2 * (self.failover_time_ms + LEASE_EPSILON_MS) / 1000.0

    @property
    def watch_interval_s(self) -> float:
        """kcl-mp: failoverTimeMillis + epsilon (half the take interval).

        The table is scanned this often so a dead worker's leases are seen expired, and
        taken, within failoverTimeMillis + one take interval of its last renewal (scanning
        only every take interval, as Java does, can take two). Steals still happen only
        every take interval.
        """
        return (self.failover_time_ms + LEASE_EPSILON_MS) / 1000.0

    @property
    def handoff_timeout_s(self) -> float:
        return self.graceful_lease_handoff_timeout_ms / 1000.0


@dataclass(frozen=True)
class Kcl3Settings:
    """KCL 3.x fleets (docs/kcl3-facts.md section 8 has Java's defaults)."""

    # Java's default, so a Java daemon's properties file joins a Java 3.x fleet as Java would.
    client_version_config: ClientVersionConfig = "CLIENT_VERSION_CONFIG_3X"
    client_version_config_from: str | None = None  # where it was set ("app.properties line 12", "--set"); None: unset
    lease_assignment_interval_ms: int | None = None  # None: 2 x failoverTimeMillis
    max_throughput_per_host_kbps: float = float("inf")
    dampening_percentage: int = 60
    rebalance_threshold_percentage: int = 10
    variance_balancing_frequency: int = 3  # rebalance on a new leader's first round, then every N-th
    coordinator_state_table_name: str | None = None  # None: <app>-CoordinatorState
    worker_metrics_table_name: str | None = None  # None: <app>-WorkerMetricStats
    worker_metrics_reporter_freq_ms: int = 30000
    migrate_all_entities_to_lease_table: bool = False
    table_migration_complete_bake_s: int = 86400  # tableMigrationCompleteBakeTimeSeconds (Java clamps it)
    leader_lease_duration_ms: int | None = None  # kclmp.leaderLockLeaseDurationMillis; None: failoverTimeMillis
    stale_worker_metrics_s: float = 86400.0  # staleWorkerMetricsEntryCleanupDuration (P1D)
    worker_metric: str = "AUTO"  # kclmp.workerMetric: AUTO (as a Java worker here), DEFAULT (empty sts/opr) or CPU
    lease_assignment_strategy: LeaseAssignmentStrategy = "WORKER_UTILIZATION_AWARE"  # kclmp.leaseAssignmentStrategy
    cost_band_percent: float = 10.0  # kclmp.costBandPercent
    cost_min_gain_percent: float = 2.0  # kclmp.costMinGainPercent
    cost_moves_per_round: int = 2  # kclmp.costMovesPerRound


@dataclass(frozen=True)
class ProcessorSettings:
    command: tuple[str, ...]  # executableName split on runs of spaces (CONFIG.md section 4)
    timeout_s: float | None = None  # timeoutInSeconds: max wait for each awaited line
    # shutdownGraceMillis: Java's default 0 means "do not wait"; kcl-mp waits this long
    # for processors to checkpoint on SIGTERM, 20 s when the key is absent.
    shutdown_grace_ms: int = 20000
    # kcl-mp's own (``kclmp.`` keys): what a failing processor costs.
    on_failure: str = "RESTART"  # RESTART: only its shard; EXIT: the whole host, as the Java daemon does
    max_restarts: int = 5  # failures in a row before the lease is released for another host to try
    memory_limit_mb: int = 0  # restart a processor whose process tree's RSS exceeds this (0: no limit)
    stderr_lines_per_10s: int = 10000  # stderr lines logged per 10 s; the rest are counted (0: no limit)
    stderr_bytes_per_10s: int = 10 << 20  # and their bytes (0: no limit)
    stderr_level: str = "WARNING"  # the level its stderr lines are logged at (the Java daemon: ERROR)
    worker_processes: int | None = None  # pool processes driving the shards (None: one per CPU core)


@dataclass(frozen=True)
class MetricsSettings:
    level: str = "DETAILED"  # NONE, SUMMARY, DETAILED
    buffer_time_ms: int = 10000
    max_queue_size: int = 10000
    enabled_dimensions: tuple[str, ...] = ("ALL",)
    # kcl-mp's own: the Prometheus endpoint (/metrics, /healthz); None: off
    port: int | None = None
    address: str = "127.0.0.1"  # this host only; deployments that are probed or scraped say so

    @property
    def enabled(self) -> bool:
        """Anything to measure for: CloudWatch, or the Prometheus endpoint."""
        return self.level != "NONE" or self.port is not None


@dataclass(frozen=True)
class Config:
    source: str  # the properties file's path, for messages
    application_name: str
    stream_name: str  # the stream; a multi-stream application's names, comma-separated, for messages
    stream_arn: str | None
    worker_id: str
    kinesis: ClientSettings
    dynamodb: ClientSettings
    cloudwatch: ClientSettings
    initial_position: InitialPosition
    retrieval: RetrievalSettings
    lease: LeaseSettings
    processor: ProcessorSettings
    metrics: MetricsSettings
    kcl3: Kcl3Settings = field(default_factory=Kcl3Settings)
    stream_kind: StreamKind = StreamKind.KINESIS
    dynamodb_streams: DynamoDBStreamsSettings = field(default_factory=DynamoDBStreamsSettings)
    # A multi-stream application's streams (streamArns / streamNames / streamListFile at start-up), in the order
    # listed; () for one stream.
    streams: tuple[StreamSettings, ...] = ()
    former_streams: FormerStreamsSettings = field(default_factory=FormerStreamsSettings)
    stream_list: StreamListSettings = field(default_factory=StreamListSettings)
    # Keys accepted for compatibility whose setting kcl-mp does not use, with why.
    ignored: tuple[tuple[str, str], ...] = field(default=())
    # Everything load_config warned about (unknown keys, duplicates, renamed values...).
    warnings: tuple[str, ...] = field(default=())

    @property
    def stream_names(self) -> tuple[str, ...]:
        """A multi-stream application's streams by name (the lease table shows their leases alone); ()."""
        return tuple(stream.name for stream in self.streams)

    @property
    def assignment_interval_s(self) -> float:
        """leaseAssignmentIntervalMillis (default 2 x failoverTimeMillis): the 3.x leader's round."""
        ms = self.kcl3.lease_assignment_interval_ms or 2 * self.lease.failover_time_ms
        return ms / 1000.0

    @property
    def leader_lock_ms(self) -> int:
        """The lease duration a kcl-mp leader writes in the lock item (kclmp.leaderLockLeaseDurationMillis,
        default failoverTimeMillis): contenders, Java's included, take a dead leader's lock that long
        after they first saw its last heartbeat, so a dead leader costs about what a dead worker does."""
        return self.kcl3.leader_lease_duration_ms or self.lease.failover_time_ms

    @property
    def leader_heartbeat_s(self) -> float:
        """The lock's heartbeat and a contender's check: a quarter of the lease duration (Java: 30 s of
        120 s). Both run in the renewal round, so at the default (failover) they run every renewal."""
        return self.leader_lock_ms / 4000.0

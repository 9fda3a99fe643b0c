"""Every properties key the Java MultiLangDaemon accepts, each declared once (CONFIG.md).

A ``Key`` carries its parser, default, one-line doc and the ``Config`` field it feeds
(``"lease.failover_time_ms"``: section ``lease``, field ``failover_time_ms``; an empty
field means ``load_config`` combines it with other keys). Keys that kcl-mp accepts for
compatibility but does not use carry an ``ignored`` reason instead; ``notice`` says
whether ignoring it changes behaviour a user may count on (a warning) or only concerns
Java internals (an info line).

Key matching follows the Java daemon: names are case-sensitive, except the
``AwsCredentialsProvider`` prefix of the three credential keys, which 3.x lower-cases
(``AWSCredentialsProvider``, ``awscredentialsprovider`` are the same key). Aliases are
other spellings of the same setting (``pollingConfig.maxRecords``, ``workerIdentifier``).

The parsers of the values are in ``values``.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from kcl_mp.config.settings import (
    CLIENT_VERSION_CONFIGS,
    DynamoDBRecordFormat,
    FormerStreamsStrategy,
    LeaseAssignmentStrategy,
    SkipRecordsBehavior,
)
from kcl_mp.config.values import (
    INT_MAX,
    LONG_MAX,
    Parser,
    boolean,
    canonical_credential_key,
    choice,
    choices_of,
    credential_chain,
    decimal,
    dimension_list,
    duration,
    former_stream_list,
    integer,
    region,
    stream_arn,
    stream_arn_list,
    stream_name_list,
    tags,
    text,
    url,
)

# --- the keys ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Key:
    name: str
    parse: Parser
    default: Any
    doc: str
    field: str = ""  # "section.field" of Config; "" when load_config combines it with others
    aliases: tuple[str, ...] = ()
    ignored: str | None = None  # why kcl-mp accepts but does not use it
    notice: bool = False  # ignoring it changes behaviour a user may count on: warn


def _k(name: str, parse: Parser, default: Any, doc: str, field: str = "", *aliases: str) -> Key:
    return Key(name, parse, default, doc, field, aliases)


def _ignored(name: str, parse: Parser, doc: str, reason: str, *aliases: str, notice: bool = False) -> Key:
    return Key(name, parse, None, doc, "", aliases, reason, notice)


_KCL3 = "KCL 3.x tuning kcl-mp's leader does not use (its balance rule: fleet/assignment.py)"
_KCL3_TABLE = "kcl-mp creates the KCL 3.x tables PAY_PER_REQUEST with no options (as Java's defaults)"
_JAVA = "Java daemon internals (thread pools, SDK wiring) with no kcl-mp equivalent"
_POLL = "pollingConfig."
_FAN = "fanoutConfig."
_KCLMP = "kclmp."

KEYS: tuple[Key, ...] = (
    # daemon, stream, identity
    _k("executableName", text, None, "the processor command line, split on spaces (required)"),
    _k("applicationName", text, None, "application: lease table name, metrics namespace (required)"),
    _k("streamName", text, None, "the stream (required unless streamArn)"),
    _k("streamArn", stream_arn, None, "the stream by ARN (Kinesis, or a DynamoDB table's stream); its name overrides "
       "streamName", "top.stream_arn"),
    # many streams in one application (kcl-mp only; docs/configuration.md, "Many streams")
    _k("streamArns", stream_arn_list, None, "the application's streams by ARN, comma-separated, all in the Kinesis "
       "client's region (instead of streamName/streamArn): Kinesis streams, or DynamoDB streams (one kind)"),
    _k("streamNames", stream_name_list, None, "or by name, comma-separated, in the region of regionName or "
       "kinesisClient.region"),
    _k("streamListFile", text, None, "or a file of them (ARNs or names, one a line, # comments), read again every "
       "streamListReadIntervalMillis: streams appended are consumed, streams removed drained", "stream_list.file"),
    _k("streamListReadIntervalMillis", integer(1000), 60000, "how often streamListFile is read again (Java checks "
       "its stream list every 60 s)", "stream_list.read_interval_ms"),
    _k("formerStreamsLeasesDeletionStrategy", choices_of(FormerStreamsStrategy), "NO_STREAMS_LEASES_DELETION",
       "the leases of a stream that left the list: kept, or deleted after the next key's wait (those of "
       "formerStreamsToDelete with PROVIDED_STREAMS_DEFERRED_DELETION)", "former_streams.strategy"),
    _k("formerStreamsToDelete", former_stream_list, (), "PROVIDED_STREAMS_DEFERRED_DELETION: the streams whose "
       "leases are deleted once out of the list for the wait, by name or ARN (a DynamoDB stream: by ARN), "
       "comma-separated", "former_streams.provided"),
    _k("waitPeriodToDeleteFormerStreamsMillis", integer(0), 3600000,
       "how long a stream must stay out of the list before its leases are deleted", "former_streams.wait_ms"),
    _k("tableName", text, None, "DynamoDB lease table (default: applicationName)"),
    _k("workerId", text, None, "this worker's lease owner id (default: a random UUID)", "", "workerIdentifier"),
    _ignored("processingLanguage", text, "the processor's language", "informational in Java too (a user-agent suffix)"),
    _k("timeoutInSeconds", integer(1, INT_MAX), None, "max wait for each processor reply (default: forever)",
       "processor.timeout_s"),
    _k("shutdownGraceMillis", integer(0), 20000, "wait for processors to checkpoint on SIGTERM (Java: 0)",
       "processor.shutdown_grace_ms"),
    # credentials, region, endpoints
    _k("AwsCredentialsProvider", credential_chain, None, "credential provider chain (Kinesis, and the default)"),
    _k("AwsCredentialsProviderDynamoDB", credential_chain, None, "credential chain for DynamoDB"),
    _k("AwsCredentialsProviderCloudWatch", credential_chain, None, "credential chain for CloudWatch"),
    _k("regionName", region, None, "region of all clients (default: AWS_REGION / profile)"),
    _k("kinesisClient.region", region, None, "Kinesis client region (over regionName)"),
    _k("dynamoDbClient.region", region, None, "DynamoDB client region (over regionName)"),
    _k("cloudWatchClient.region", region, None, "CloudWatch client region (over regionName)"),
    _k("kinesisEndpoint", url, None, "Kinesis endpoint override", "", "kinesisClient.endpointOverride"),
    _k("dynamoDBEndpoint", url, None, "DynamoDB endpoint override", "", "dynamoDbClient.endpointOverride"),
    _k("cloudWatchClient.endpointOverride", url, None, "CloudWatch endpoint override"),
    # initial position and retrieval
    _k("initialPositionInStream", choice("LATEST", "TRIM_HORIZON", "AT_TIMESTAMP"), "LATEST",
       "where a shard without checkpoint starts (AT_TIMESTAMP needs the next key)"),
    _k("initialPositionInStreamExtended", integer(0), None, "AT_TIMESTAMP at these seconds since the epoch"),
    _k("retrievalMode", choice("DEFAULT", "POLLING", "FANOUT"), "DEFAULT",
       "DEFAULT: polling if a polling key is set, else fan-out"),
    _k("maxRecords", integer(1, 10000), 10000, "records per GetRecords", "retrieval.max_records",
       _POLL + "maxRecords"),
    _k("idleTimeBetweenReadsInMillis", integer(0), 1500, "pause between GetRecords (min 200)",
       "retrieval.idle_time_between_reads_ms", _POLL + "idleTimeBetweenReadsInMillis"),
    _k("millisBehindLatestThresholdForReducedTps", integer(0), 0, "near the tip, poll less (0: off)",
       "retrieval.millis_behind_latest_threshold_for_reduced_tps_ms",
       _POLL + "millisBehindLatestThresholdForReducedTps"),
    _ignored("retryGetRecordsInSeconds", integer(1, INT_MAX), "parallel GetRecords retry after this wait", _JAVA,
             _POLL + "retryGetRecordsInSeconds"),
    _ignored("maxGetRecordsThreadPool", integer(1, INT_MAX), "threads for those retries", _JAVA,
             _POLL + "maxGetRecordsThreadPool"),
    _k("callProcessRecordsEvenForEmptyRecordList", boolean, False, "send processRecords with no records",
       "retrieval.call_process_records_even_for_empty_record_list"),
    _k(_FAN + "consumerArn", text, None, "registered enhanced fan-out consumer", "retrieval.consumer_arn"),
    _k(_FAN + "consumerName", text, None, "fan-out consumer name (default: applicationName)",
       "retrieval.consumer_name"),
    _ignored(_FAN + "maxDescribeStreamSummaryRetries", integer(1, INT_MAX), "fan-out setup retries", _JAVA),
    _ignored(_FAN + "maxDescribeStreamConsumerRetries", integer(1, INT_MAX), "fan-out setup retries", _JAVA),
    _ignored(_FAN + "registerStreamConsumerRetries", integer(1, INT_MAX), "fan-out setup retries", _JAVA),
    _ignored(_FAN + "retryBackoffMillis", integer(0), "fan-out setup backoff", _JAVA),
    # leases and shard sync
    _k("failoverTimeMillis", integer(1000), 10000, "lease duration", "lease.failover_time_ms"),
    _k("maxLeasesForWorker", integer(1, INT_MAX), INT_MAX, "cap on leases held", "lease.max_leases_for_worker"),
    _k("maxLeaseRenewalThreads", integer(1, INT_MAX), 20, "held leases renewed at once (threads per round)",
       "lease.max_lease_renewal_threads"),
    _k("maxLeasesToStealAtOneTime", integer(1, INT_MAX), 1, "leases stolen per round",
       "lease.max_leases_to_steal_at_one_time"),
    _k("cleanupLeasesUponShardCompletion", boolean, True, "delete finished shards' leases (false honoured)",
       "lease.cleanup_leases_upon_shard_completion"),
    _k("ignoreUnexpectedChildShards", boolean, False, "skip children whose parents have no lease",
       "lease.ignore_unexpected_child_shards"),
    _k("shardSyncIntervalMillis", integer(1), 60000, "ListShards -> new leases period", "lease.shard_sync_interval_ms"),
    _ignored("enablePriorityLeaseAssignment", boolean, "take long-expired leases first",
             "kcl-mp always takes unowned leases before other expired ones, within the target (Java 3.x also "
             "exceeds the target for leases expired 3 x failoverTimeMillis: not done)"),
    _k("isGracefulLeaseHandoffEnabled", boolean, True, "shutdownRequested before handing a lease over",
       "lease.graceful_lease_handoff_enabled"),
    _k("gracefulLeaseHandoffTimeoutMillis", integer(0), 30000, "max wait for that",
       "lease.graceful_lease_handoff_timeout_ms"),
    _k("listShardsBackoffTimeInMillis", integer(0), 1500, "backoff between ListShards retries",
       "lease.list_shards_backoff_ms"),
    _k("maxListShardsRetryAttempts", integer(1, INT_MAX), 50, "ListShards retries",
       "lease.max_list_shards_retry_attempts"),
    _k("leaseTableDeletionProtectionEnabled", boolean, False, "deletion protection on a new lease table",
       "lease.deletion_protection_enabled"),
    _k("leaseTablePitrEnabled", boolean, False, "point-in-time recovery on a new lease table", "lease.pitr_enabled"),
    _k("skipShardSyncAtWorkerInitializationIfLeasesExist", boolean, False, "no start-up sync if leases exist",
       "lease.skip_shard_sync_at_startup_if_leases_exist"),
    _k("parentShardPollIntervalMillis", integer(1), 10000, "child shard waits for parents this often",
       "lease.parent_shard_poll_interval_ms"),
    _ignored("taskBackoffTimeMillis", integer(0), "backoff after a failed task",
             "the Java scheduler's task retry; kcl-mp backs a failing shard off with kclmp.processorMaxRestarts"),
    _k("clientVersionConfig", choice(*CLIENT_VERSION_CONFIGS), "CLIENT_VERSION_CONFIG_3X",
       "KCL 3.x or 2.x-compatible fleet mode (the fleet's Migration3.0 state decides once it exists)",
       "kcl3.client_version_config"),
    _k("leaseAssignmentIntervalMillis", integer(1), None, "3.x leader's assignment period (2 x failoverTimeMillis)",
       "kcl3.lease_assignment_interval_ms"),
    _ignored("initialLeaseTableReadCapacity", integer(1, INT_MAX), "provisioned capacity",
             "the lease table is created PAY_PER_REQUEST, as by the Java daemon"),
    _ignored("initialLeaseTableWriteCapacity", integer(1, INT_MAX), "provisioned capacity",
             "the lease table is created PAY_PER_REQUEST, as by the Java daemon"),
    _ignored("leaseTableScanTotalSegments", integer(1, INT_MAX), "parallel scan segments", _JAVA),
    _ignored("schedulerInitializationBackoffTimeMillis", integer(0), "start-up retry backoff", _JAVA),
    _ignored("shardPrioritization", text, "shard order", "not settable from text in Java either"),
    _k("migrateAllEntitiesToLeaseTable", boolean, False, "KCL 3.5 table migration phase 2: state and worker "
       "metrics written to the lease table, the leader moves the rest (COMPLETE overrides it)",
       "kcl3.migrate_all_entities_to_lease_table"),
    _k("tableMigrationCompleteBakeTimeSeconds", integer(0), 86400, "KCL 3.5 table migration: PENDING held this long "
       "before COMPLETE (clamped to 3600..604800 as Java)", "kcl3.table_migration_complete_bake_s"),
    _ignored("logWarningForTaskAfterMillis", integer(0), "slow task warning", _JAVA),
    _ignored("maxActiveThreads", integer(-INT_MAX - 1, INT_MAX), "Java child I/O thread pool", _JAVA),
    _ignored("validateSequenceNumberBeforeCheckpointing", boolean, "1.x feature",
             "ignored by the Java 2.x/3.x daemons too"),
    # metrics
    _k("metricsLevel", choice("NONE", "SUMMARY", "DETAILED"), "DETAILED", "CloudWatch metrics level",
       "metrics.level"),
    _k("metricsBufferTimeMillis", integer(1), 10000, "max metrics buffering", "metrics.buffer_time_ms"),
    _k("metricsMaxQueueSize", integer(1, INT_MAX), 10000, "max buffered metrics", "metrics.max_queue_size"),
    _k("metricsEnabledDimensions", dimension_list, ("ALL",), "dimensions kept (Operation always)",
       "metrics.enabled_dimensions"),
    # KCL 3.x tables and load balancing (CONFIG.md section 13)
    _k("coordinatorStateTableName", text, None, "KCL 3.x coordinator-state table (<app>-CoordinatorState)",
       "kcl3.coordinator_state_table_name"),
    _k("workerMetricsTableName", text, None, "KCL 3.x worker-metrics table (<app>-WorkerMetricStats)",
       "kcl3.worker_metrics_table_name"),
    *(
        _ignored(prefix + suffix, parse, "KCL 3.x " + prefix + " table", _KCL3_TABLE)
        for prefix in ("coordinatorState", "workerMetrics")
        for suffix, parse in (
            ("BillingMode", choice("PAY_PER_REQUEST", "PROVISIONED")),
            ("ReadCapacity", integer(1)), ("WriteCapacity", integer(1)),
            ("PointInTimeRecoveryEnabled", boolean), ("DeletionProtectionEnabled", boolean), ("Tags", tags),
        )
    ),
    _ignored("inMemoryWorkerMetricsCaptureFrequencyMillis", integer(1), "CPU sampling period", _KCL3),
    _k("workerMetricsReporterFreqInMillis", integer(1), 30000, "worker metrics write period",
       "kcl3.worker_metrics_reporter_freq_ms"),
    _ignored("noOfPersistedMetricsPerWorkerMetrics", integer(1, INT_MAX), "worker metrics history", _KCL3),
    _ignored("disableWorkerMetrics", boolean, "throughput-only balancing", _KCL3),
    _k("maxThroughputPerHostKBps", decimal(0), float("inf"), "3.x leader: per-worker throughput cap",
       "kcl3.max_throughput_per_host_kbps"),
    _k("dampeningPercentage", integer(1, 100), 60, "3.x leader: share of excess load moved",
       "kcl3.dampening_percentage"),
    _k("reBalanceThresholdPercentage", integer(1, 100), 10, "3.x leader: allowed deviation",
       "kcl3.rebalance_threshold_percentage"),
    _ignored("allowThroughputOvershoot", boolean, "overshoot allowed", _KCL3),
    _k("varianceBalancingFrequency", integer(1, INT_MAX), 3, "3.x leader: rebalance every N assignment rounds",
       "kcl3.variance_balancing_frequency"),
    _ignored("workerMetricsEMAAlpha", decimal(0), "smoothing factor", _KCL3),
    _k("staleWorkerMetricsEntryCleanupDuration", duration, 86400.0,
       "3.x leader: delete worker-metrics items not updated for this long (ISO-8601, P1D)",
       "kcl3.stale_worker_metrics_s"),
    # kcl-mp's own keys: the Java daemon has no equivalent (it exits on any processor failure)
    _k(_KCLMP + "processorFailure", choice("RESTART", "EXIT"), "RESTART",
       "RESTART: a failed processor costs only its shard; EXIT: stop the host with status 1, as Java does",
       "processor.on_failure"),
    _k(_KCLMP + "processorMaxRestarts", integer(1, 1000), 5,
       "failures in a row before the lease is released so another host can try", "processor.max_restarts"),
    _k(_KCLMP + "processorMemoryLimitMB", integer(0), 0, "restart a processor whose RSS exceeds this (0: off)",
       "processor.memory_limit_mb"),
    _k(_KCLMP + "processorStderrLinesPer10s", integer(0, INT_MAX), 10000,
       "a processor's stderr lines logged per 10 s; the rest counted and reported (0: no limit)",
       "processor.stderr_lines_per_10s"),
    _k(_KCLMP + "processorStderrBytesPer10s", integer(0, INT_MAX), 10 << 20,
       "bytes of a processor's stderr lines logged per 10 s; the rest counted and reported (0: no limit)",
       "processor.stderr_bytes_per_10s"),
    _k(_KCLMP + "processorStderrLevel", choice("DEBUG", "INFO", "WARNING", "ERROR"), "WARNING",
       "the level a processor's stderr lines are logged at (Java: ERROR)", "processor.stderr_level"),
    _k(_KCLMP + "workerProcesses", integer(1, 1024), None,
       "pool processes driving this host's shards, each many (unset: one per CPU core)",
       "processor.worker_processes"),
    _k(_KCLMP + "metricsPort", integer(0, 65535), None,
       "serve Prometheus /metrics and /healthz on this port (0: any free port; unset: off)", "metrics.port"),
    _k(_KCLMP + "leaderLockLeaseDurationMillis", integer(1000), None,
       "3.x leader lock's lease duration a kcl-mp leader writes (unset: failoverTimeMillis, so a dead leader "
       "is replaced within about failover; Java's lock client: 120000, no key)",
       "kcl3.leader_lease_duration_ms"),
    _k(_KCLMP + "workerMetric", choice("AUTO", "DEFAULT", "CPU"), "AUTO",
       "3.x worker metric published: AUTO (what a Java worker on this host would: CPU on EC2/ECS/EKS, "
       "else none), DEFAULT (none) or CPU (/proc/stat) (docs/kcl3-facts.md section 4)",
       "kcl3.worker_metric"),
    _k(_KCLMP + "leaseAssignmentStrategy", choices_of(LeaseAssignmentStrategy), "WORKER_UTILIZATION_AWARE",
       "3.x leader's rebalance: WORKER_UTILIZATION_AWARE (Java's rule, fleet/assignment.py), COST_BASED (by "
       "each lease's measured CPU, fleet/cost_balance.py) or LEASE_COUNT_BASED (Java 3.4.3: counts only)",
       "kcl3.lease_assignment_strategy"),
    _k(_KCLMP + "costBandPercent", decimal(0), 10.0,
       "COST_BASED: points of its capacity a host may sit above the fleet's mean CPU before it gives leases",
       "kcl3.cost_band_percent"),
    _k(_KCLMP + "costMinGainPercent", decimal(0), 2.0,
       "COST_BASED: the least a move must lower the hotter host (points of capacity)", "kcl3.cost_min_gain_percent"),
    _k(_KCLMP + "costMovesPerRound", integer(1, 1000), 2, "COST_BASED: handoffs per assignment round at most",
       "kcl3.cost_moves_per_round"),
    _k(_KCLMP + "metricsAddress", text, "127.0.0.1",
       "the address that port listens on (0.0.0.0: every interface, as a probed pod needs)", "metrics.address"),
    _k(_KCLMP + "maxPendingProcessRecordsInput", integer(1, 1000), 3,
       "processRecords batches a shard reads ahead (Java's RecordsFetcherFactory setting of that name)",
       "retrieval.max_pending_process_records_input"),
    _k(_KCLMP + "maxByteSize", integer(1024, INT_MAX), 8 << 20,
       "bytes of processRecords lines a shard reads ahead; a longer batch is split (Java's maxByteSize)",
       "retrieval.max_byte_size"),
    _k(_KCLMP + "maxRecordsCount", integer(1, INT_MAX), 30000,
       "user records a shard reads ahead, and the most one processRecords carries (Java's maxRecordsCount)",
       "retrieval.max_records_count"),
    _k(_KCLMP + "workerProcessMaxByteSize", integer(1024, LONG_MAX), 128 << 20,
       "bytes of processRecords lines all shards of one pool process read ahead together",
       "retrieval.worker_process_max_byte_size"),
    # DynamoDB Streams (a streamArn of a DynamoDB stream), the adapter's rules
    _k(_KCLMP + "skipRecordsBehavior", choices_of(SkipRecordsBehavior), "SKIP_RECORDS_TO_TRIM_HORIZON",
       "DynamoDB Streams: a position past the 24 h trim skips to TRIM_HORIZON, logged and counted (the adapter's "
       "default), or KCL_RETRY: retried until it is read or the lease moves", "dynamodb_streams.skip_records_behavior"),
    _k(_KCLMP + "dynamodbRecordFormat", choices_of(DynamoDBRecordFormat), "ADAPTER_V2",
       "DynamoDB Streams records as the adapter 2.x gives them (partitionKey = the sequence number) or ADAPTER_V1, "
       "as the 1.x StreamsMultiLangDaemon did (partitionKey and subSequenceNumber null)",
       "dynamodb_streams.record_format"),
)

# Per-stream overrides of a multi-stream application: ``stream.<name>.<suffix>``, <name> one of
# streamArns' or streamNames' streams (a stream name may hold dots: the suffix is after the last).
STREAM_PREFIX = "stream."
STREAM_KEYS: tuple[Key, ...] = (
    _k("initialPositionInStream", choice("LATEST", "TRIM_HORIZON"), None,
       "where that stream's shards without a checkpoint start (default: initialPositionInStream)"),
    _k("executableName", text, None, "that stream's processor command line (default: executableName)"),
    _k("consumerArn", text, None, "that stream's registered enhanced fan-out consumer"),
    _k("creationEpoch", integer(1), None, "that stream's creation epoch in its lease keys (default: the one its "
       "leases carry, else its creation time in ms)"),
)
_STREAM_KEYS = {key.name: key for key in STREAM_KEYS}


def stream_key(name: str) -> tuple[str, Key] | None:
    """The stream and the per-stream key a ``stream.<name>.<suffix>`` name refers to, or None.

    >>> stream, key = stream_key("stream.orders.v2.executableName")
    >>> stream, key.name
    ('orders.v2', 'executableName')
    """
    stream, _, suffix = name.removeprefix(STREAM_PREFIX).rpartition(".")
    key = _STREAM_KEYS.get(suffix)
    return (stream, key) if name.startswith(STREAM_PREFIX) and stream and key else None


# Any of these set to a non-zero value makes retrievalMode DEFAULT mean polling (section 9).
POLLING_KEYS = ("maxRecords", "idleTimeBetweenReadsInMillis", "millisBehindLatestThresholdForReducedTps",
                "retryGetRecordsInSeconds", "maxGetRecordsThreadPool")
CLIENT_PREFIXES = ("kinesisClient.", "dynamoDbClient.", "cloudWatchClient.")
_BY_NAME: dict[str, Key] = {}
for _key in KEYS:
    for _name in (_key.name, *_key.aliases):
        assert _name not in _BY_NAME, _name
        _BY_NAME[_name] = _key


def lookup(name: str) -> Key | None:
    """The key a properties name refers to, following Java's matching rules."""
    return _BY_NAME.get(canonical_credential_key(name) or name)


def client_builder_key(name: str) -> bool:
    """``kinesisClient.<setting>`` other than region/endpointOverride: accepted, not used."""
    return name.startswith(CLIENT_PREFIXES) and name not in _BY_NAME


def suggest(name: str) -> str | None:
    """The closest declared name, for a 'did you mean' hint."""
    if _FAN + name in _BY_NAME:
        return _FAN + name
    lowered = {n.lower(): n for n in _BY_NAME}
    if name.lower() in lowered:
        return lowered[name.lower()]
    # A known key inside the name ("leaseTableName" -> "tableName") beats a similar spelling.
    inside = [n for n in lowered if n in name.lower() and len(n) >= 0.6 * len(name)]
    if inside:
        return lowered[max(inside, key=len)]
    close = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[close[0]] if close else None

package kclmp.peers;

import com.amazonaws.services.dynamodbv2.streamsadapter.AmazonDynamoDBStreamsAdapterClient;
import com.amazonaws.services.dynamodbv2.streamsadapter.StreamsSchedulerFactory;
import com.amazonaws.services.dynamodbv2.streamsadapter.polling.DynamoDBStreamsPollingConfig;
import java.net.URI;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.Set;
import software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider;
import software.amazon.awssdk.regions.Region;
import software.amazon.awssdk.services.cloudwatch.CloudWatchAsyncClient;
import software.amazon.awssdk.services.dynamodb.DynamoDbAsyncClient;
import software.amazon.awssdk.services.dynamodb.streams.DynamoDbStreamsClient;
import software.amazon.kinesis.common.ConfigsBuilder;
import software.amazon.kinesis.common.InitialPositionInStream;
import software.amazon.kinesis.common.InitialPositionInStreamExtended;
import software.amazon.kinesis.common.StreamIdentifier;
import software.amazon.kinesis.coordinator.CoordinatorConfig;
import software.amazon.kinesis.coordinator.Scheduler;
import software.amazon.kinesis.leases.LeaseManagementConfig;
import software.amazon.kinesis.metrics.NullMetricsFactory;
import software.amazon.kinesis.processor.FormerStreamsLeasesDeletionStrategy;
import software.amazon.kinesis.processor.ShardRecordProcessor;
import software.amazon.kinesis.processor.ShardRecordProcessorFactory;
import software.amazon.kinesis.processor.StreamTracker;
import software.amazon.kinesis.retrieval.RetrievalConfig;

/**
 * One worker of a DynamoDB Streams Kinesis Adapter 2.x application, as a user writes it: a KCL 3.x
 * Scheduler from {@link StreamsSchedulerFactory} in its default (3.x) mode or the one
 * {@code clientVersionConfig} names (CLIENT_VERSION_CONFIG_COMPATIBLE_WITH_2X), on one table's stream
 * ({@code streamArn}) or, in multi-stream mode, on several ({@code streamArns}: the adapter's
 * multi-stream tracker, each from TRIM_HORIZON, former streams' leases kept), every client pointed
 * at one endpoint (the tests' emulator), credentials from the environment.
 *
 * <pre>java -cp ... kclmp.peers.AdapterConsumer endpoint=http://127.0.0.1:PORT
 *     (streamArn=ARN | streamArns=ARN,ARN) application=APP worker=ID failoverMillis=6000 assignmentMillis=4000 reportMillis=30000 idleMillis=500
 *     checkpointEvery=20 out=DIR [region=us-east-1]
 *     [clientVersionConfig=CLIENT_VERSION_CONFIG_COMPATIBLE_WITH_2X]</pre>
 *
 * <p>Each processor records what it gets into DIR as the tests' Python recorder does
 * ({@link Recorder}; in multi-stream mode with the serialized stream identifier of its lease,
 * {@code account:region$account$table$label:1}). SIGTERM shuts the Scheduler down gracefully
 * (each processor checkpoints what it delivered) for at most 10 s, then the JVM exits 143
 * ({@link Peer#run}).
 */
public final class AdapterConsumer {
    private static final Set<String> REQUIRED = Set.of("endpoint", "application", "worker",
            "failoverMillis", "assignmentMillis", "reportMillis", "idleMillis", "checkpointEvery", "out");

    private AdapterConsumer() {}

    public static void main(String[] args) throws Exception {
        Map<String, String> arg = Peer.arguments(args, REQUIRED, Set.of("region", "streamArn", "streamArns",
                "clientVersionConfig"));
        URI endpoint = URI.create(arg.get("endpoint"));
        Region region = Region.of(arg.getOrDefault("region", "us-east-1"));
        String streamArn = arg.get("streamArn");
        String streamArns = arg.get("streamArns");
        if ((streamArn == null) == (streamArns == null)) {
            throw new IllegalArgumentException("one of streamArn=ARN and streamArns=ARN,ARN");
        }
        InitialPositionInStreamExtended trimHorizon =
                InitialPositionInStreamExtended.newInitialPosition(InitialPositionInStream.TRIM_HORIZON);
        StreamTracker tracker = streamArn != null
                ? StreamsSchedulerFactory.createSingleStreamTracker(streamArn, trimHorizon)
                : StreamsSchedulerFactory.createMultiStreamTracker(List.of(streamArns.split(",")), trimHorizon,
                        new FormerStreamsLeasesDeletionStrategy.NoLeaseDeletionStrategy());
        EnvironmentVariableCredentialsProvider credentials = EnvironmentVariableCredentialsProvider.create();

        DynamoDbStreamsClient streams = DynamoDbStreamsClient.builder()
                .endpointOverride(endpoint).region(region).credentialsProvider(credentials).build();
        AmazonDynamoDBStreamsAdapterClient adapter = new AmazonDynamoDBStreamsAdapterClient(streams, region);
        DynamoDbAsyncClient dynamodb = DynamoDbAsyncClient.builder()
                .endpointOverride(endpoint).region(region).credentialsProvider(credentials).build();
        CloudWatchAsyncClient cloudwatch = CloudWatchAsyncClient.builder()
                .endpointOverride(endpoint).region(region).credentialsProvider(credentials).build();

        String worker = arg.get("worker");
        Path out = Path.of(arg.get("out"));
        int every = Integer.parseInt(arg.get("checkpointEvery"));
        ShardRecordProcessorFactory processors = new ShardRecordProcessorFactory() {
            // the adapter's createScheduler calls this one to check the processor's type
            @Override
            public ShardRecordProcessor shardRecordProcessor() {
                return new Recorder(out, worker, null, every);
            }

            @Override
            public ShardRecordProcessor shardRecordProcessor(StreamIdentifier stream) {
                return new Recorder(out, worker, streamArns == null ? null : stream.serialize(), every);
            }
        };
        ConfigsBuilder configs = new ConfigsBuilder(tracker, arg.get("application"), adapter, dynamodb, cloudwatch,
                worker, processors);
        // ConfigsBuilder makes a new config object at each call: keep the one changed. The
        // adapter 2.0.1 sets shardSyncIntervalMillis to 0 after its lease management factory has
        // copied it (2.1 dropped the line), so a worker starting on an empty table would sleep the
        // default 60 s after its first shard sync: set it first, as the adapter means it.
        LeaseManagementConfig leases = configs.leaseManagementConfig()
                .shardSyncIntervalMillis(0)
                .failoverTimeMillis(Long.parseLong(arg.get("failoverMillis")))
                .leaseAssignmentIntervalMillis(Long.parseLong(arg.get("assignmentMillis")));
        CoordinatorConfig coordinator = configs.coordinatorConfig();
        if (arg.containsKey("clientVersionConfig")) {
            coordinator.clientVersionConfig(
                    CoordinatorConfig.ClientVersionConfig.valueOf(arg.get("clientVersionConfig")));
        }
        // how often it writes its worker metrics; as leader, a worker not heard of for two periods is gone
        leases.workerUtilizationAwareAssignmentConfig()
                .workerMetricsReporterFreqInMillis(Long.parseLong(arg.get("reportMillis")));
        DynamoDBStreamsPollingConfig polling = (streamArn != null
                ? new DynamoDBStreamsPollingConfig(streamArn, adapter) : new DynamoDBStreamsPollingConfig(adapter))
                .idleTimeBetweenReadsInMillis(Long.parseLong(arg.get("idleMillis")));
        RetrievalConfig retrieval = configs.retrievalConfig().retrievalSpecificConfig(polling);

        Scheduler scheduler = StreamsSchedulerFactory.createScheduler(
                configs.checkpointConfig(), coordinator, leases,
                configs.lifecycleConfig(), configs.metricsConfig().metricsFactory(new NullMetricsFactory()),
                configs.processorConfig(), retrieval, adapter);
        Peer.run(scheduler, worker);
    }
}

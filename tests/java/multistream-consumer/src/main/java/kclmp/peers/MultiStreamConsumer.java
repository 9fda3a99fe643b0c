package kclmp.peers;

import java.net.URI;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import software.amazon.awssdk.arns.Arn;
import software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider;
import software.amazon.awssdk.regions.Region;
import software.amazon.awssdk.services.cloudwatch.CloudWatchAsyncClient;
import software.amazon.awssdk.services.dynamodb.DynamoDbAsyncClient;
import software.amazon.awssdk.services.kinesis.KinesisAsyncClient;
import software.amazon.kinesis.common.ConfigsBuilder;
import software.amazon.kinesis.common.InitialPositionInStream;
import software.amazon.kinesis.common.InitialPositionInStreamExtended;
import software.amazon.kinesis.common.KinesisClientUtil;
import software.amazon.kinesis.common.StreamConfig;
import software.amazon.kinesis.common.StreamIdentifier;
import software.amazon.kinesis.coordinator.CoordinatorConfig;
import software.amazon.kinesis.coordinator.Scheduler;
import software.amazon.kinesis.leases.LeaseManagementConfig;
import software.amazon.kinesis.metrics.NullMetricsFactory;
import software.amazon.kinesis.processor.FormerStreamsLeasesDeletionStrategy;
import software.amazon.kinesis.processor.MultiStreamTracker;
import software.amazon.kinesis.processor.ShardRecordProcessor;
import software.amazon.kinesis.processor.ShardRecordProcessorFactory;
import software.amazon.kinesis.retrieval.RetrievalConfig;
import software.amazon.kinesis.retrieval.polling.PollingConfig;

/**
 * One worker of a Java KCL 3.5 multi-stream application, as a user writes it: a Scheduler with a
 * {@link MultiStreamTracker} over the streams named on its command line (each from TRIM_HORIZON,
 * former streams' leases kept), polling, every client pointed at one endpoint (the tests'
 * emulator), credentials from the environment, in the 2.x-compatible mode (the lease taker: no
 * leader lock to wait for).
 *
 * <pre>java -cp ... kclmp.peers.MultiStreamConsumer endpoint=http://127.0.0.1:PORT application=APP
 *     worker=ID streams=ARN@EPOCH,ARN@EPOCH failoverMillis=4000 idleMillis=500 checkpointEvery=20 out=DIR
 *     [region=us-east-1]</pre>
 *
 * <p>A stream's identifier is its ARN's account and name with the EPOCH given (the stream's
 * creation time in ms, as kcl-mp takes it). Each processor records what it gets into DIR
 * ({@link StreamRecorder}). SIGTERM shuts the Scheduler down gracefully
 * (each processor checkpoints what it delivered) for at most 10 s, then the JVM exits 143
 * ({@link Peer#run}).
 */
public final class MultiStreamConsumer {
    private static final Set<String> REQUIRED = Set.of("endpoint", "application", "worker", "streams",
            "failoverMillis", "idleMillis", "checkpointEvery", "out");

    private MultiStreamConsumer() {}

    public static void main(String[] args) throws Exception {
        Map<String, String> arg = Peer.arguments(args, REQUIRED, Set.of("region"));
        URI endpoint = URI.create(arg.get("endpoint"));
        Region region = Region.of(arg.getOrDefault("region", "us-east-1"));
        EnvironmentVariableCredentialsProvider credentials = EnvironmentVariableCredentialsProvider.create();
        KinesisAsyncClient kinesis = KinesisClientUtil.createKinesisAsyncClient(KinesisAsyncClient.builder()
                .endpointOverride(endpoint).region(region).credentialsProvider(credentials));
        DynamoDbAsyncClient dynamodb = DynamoDbAsyncClient.builder()
                .endpointOverride(endpoint).region(region).credentialsProvider(credentials).build();
        CloudWatchAsyncClient cloudwatch = CloudWatchAsyncClient.builder()
                .endpointOverride(endpoint).region(region).credentialsProvider(credentials).build();

        List<StreamConfig> streams = new ArrayList<>();
        for (String stream : arg.get("streams").split(",")) {
            String[] arnAndEpoch = stream.split("@", 2);
            if (arnAndEpoch.length != 2) {
                throw new IllegalArgumentException("streams: " + stream + " is not ARN@EPOCH");
            }
            streams.add(new StreamConfig(
                    StreamIdentifier.multiStreamInstance(Arn.fromString(arnAndEpoch[0]),
                            Long.parseLong(arnAndEpoch[1])),
                    InitialPositionInStreamExtended.newInitialPosition(InitialPositionInStream.TRIM_HORIZON)));
        }
        MultiStreamTracker tracker = new MultiStreamTracker() {
            @Override
            public List<StreamConfig> streamConfigList() {
                return streams;
            }

            @Override
            public FormerStreamsLeasesDeletionStrategy formerStreamsLeasesDeletionStrategy() {
                return new FormerStreamsLeasesDeletionStrategy.NoLeaseDeletionStrategy();
            }
        };

        String worker = arg.get("worker");
        Path out = Path.of(arg.get("out"));
        int every = Integer.parseInt(arg.get("checkpointEvery"));
        ShardRecordProcessorFactory processors = new ShardRecordProcessorFactory() {
            @Override
            public ShardRecordProcessor shardRecordProcessor() {
                throw new UnsupportedOperationException("a multi-stream application names the stream");
            }

            @Override
            public ShardRecordProcessor shardRecordProcessor(StreamIdentifier stream) {
                return new StreamRecorder(out, worker, stream.serialize(), every);
            }
        };
        ConfigsBuilder configs = new ConfigsBuilder(tracker, arg.get("application"), kinesis, dynamodb, cloudwatch,
                worker, processors);
        // ConfigsBuilder makes a new config object at each call: keep the one changed
        CoordinatorConfig coordinator = configs.coordinatorConfig()
                .clientVersionConfig(CoordinatorConfig.ClientVersionConfig.CLIENT_VERSION_CONFIG_COMPATIBLE_WITH_2X);
        // the initial shard sync sleeps shardSyncIntervalMillis (60 s) after each stream's: none
        LeaseManagementConfig leases = configs.leaseManagementConfig()
                .shardSyncIntervalMillis(0)
                .failoverTimeMillis(Long.parseLong(arg.get("failoverMillis")));
        RetrievalConfig retrieval = configs.retrievalConfig().retrievalSpecificConfig(
                new PollingConfig(kinesis).idleTimeBetweenReadsInMillis(Long.parseLong(arg.get("idleMillis"))));

        Scheduler scheduler = new Scheduler(configs.checkpointConfig(), coordinator, leases,
                configs.lifecycleConfig(), configs.metricsConfig().metricsFactory(new NullMetricsFactory()),
                configs.processorConfig(), retrieval);
        Peer.run(scheduler, worker);
    }
}

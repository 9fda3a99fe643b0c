package kclmp.peers;

import java.nio.file.Path;
import software.amazon.kinesis.lifecycle.events.InitializationInput;
import software.amazon.kinesis.lifecycle.events.LeaseLostInput;
import software.amazon.kinesis.lifecycle.events.ShardEndedInput;
import software.amazon.kinesis.lifecycle.events.ShutdownRequestedInput;

/**
 * The lifecycle of a peer's processor that records into a {@link RecordLog}: the methods every
 * KCL processor interface shares. A peer's processor extends it, implements its interface
 * (ShardRecordProcessor, the adapter's DynamoDBStreamsShardRecordProcessor) and adds its
 * processRecords, which hands each record to {@link #log}.
 */
abstract class RecordingProcessor {
    protected final RecordLog log;
    private final String stream;

    /** ``stream``: the serialized stream identifier of a multi-stream lease, else null. */
    RecordingProcessor(Path dir, String worker, String stream, int every) {
        this.log = new RecordLog(dir, worker, every);
        this.stream = stream;
    }

    public void initialize(InitializationInput input) {
        log.initialize(input.shardId(), stream, input.extendedSequenceNumber());
    }

    public void leaseLost(LeaseLostInput input) {
        log.leaseLost();
    }

    public void shardEnded(ShardEndedInput input) {
        log.shardEnded(input.checkpointer());
    }

    public void shutdownRequested(ShutdownRequestedInput input) {
        log.shutdownRequested(input.checkpointer());
    }
}

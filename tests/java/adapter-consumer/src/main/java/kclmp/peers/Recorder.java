package kclmp.peers;

import com.amazonaws.services.dynamodbv2.streamsadapter.adapter.DynamoDBStreamsClientRecord;
import com.amazonaws.services.dynamodbv2.streamsadapter.model.DynamoDBStreamsProcessRecordsInput;
import com.amazonaws.services.dynamodbv2.streamsadapter.processor.DynamoDBStreamsShardRecordProcessor;
import java.nio.file.Path;

/**
 * The tests' recorder ({@link RecordLog}) for the Java adapter: a record's data is the adapter's
 * JSON of the stream record. The adapter takes only a {@link DynamoDBStreamsShardRecordProcessor}
 * (its processRecords gets the adapter's records), so the multi-stream consumer's processors are
 * this one too, with the stream identifier of their lease, not tests/java/multistream-consumer's.
 */
final class Recorder extends RecordingProcessor implements DynamoDBStreamsShardRecordProcessor {
    /** ``stream``: the serialized stream identifier of a multi-stream lease, else null. */
    Recorder(Path dir, String worker, String stream, int every) {
        super(dir, worker, stream, every);
    }

    @Override
    public void processRecords(DynamoDBStreamsProcessRecordsInput input) {
        double got = System.currentTimeMillis() / 1000.0;
        for (DynamoDBStreamsClientRecord record : input.records()) {
            log.record(record.partitionKey(), record.data(), record.sequenceNumber(), record.subSequenceNumber(),
                    record.approximateArrivalTimestamp(), got);
        }
        log.batchDone(input.checkpointer(), input.records().size());
    }
}

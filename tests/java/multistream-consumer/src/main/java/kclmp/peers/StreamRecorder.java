package kclmp.peers;

import java.nio.file.Path;
import software.amazon.kinesis.lifecycle.events.ProcessRecordsInput;
import software.amazon.kinesis.processor.ShardRecordProcessor;
import software.amazon.kinesis.retrieval.KinesisClientRecord;

/** The tests' recorder ({@link RecordLog}) as a Java KCL processor of one stream's shard. */
final class StreamRecorder extends RecordingProcessor implements ShardRecordProcessor {
    StreamRecorder(Path dir, String worker, String stream, int every) {
        super(dir, worker, stream, every);
    }

    @Override
    public void processRecords(ProcessRecordsInput input) {
        double got = System.currentTimeMillis() / 1000.0;
        for (KinesisClientRecord record : input.records()) {
            log.record(record.partitionKey(), record.data(), record.sequenceNumber(), record.subSequenceNumber(),
                    record.approximateArrivalTimestamp(), got);
        }
        log.batchDone(input.checkpointer(), input.records().size());
    }
}

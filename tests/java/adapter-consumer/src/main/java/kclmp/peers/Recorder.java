package kclmp.peers;

import com.amazonaws.services.dynamodbv2.streamsadapter.adapter.DynamoDBStreamsClientRecord;
import com.amazonaws.services.dynamodbv2.streamsadapter.model.DynamoDBStreamsProcessRecordsInput;
import com.amazonaws.services.dynamodbv2.streamsadapter.processor.DynamoDBStreamsShardRecordProcessor;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.io.Writer;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
import software.amazon.kinesis.lifecycle.events.InitializationInput;
import software.amazon.kinesis.lifecycle.events.LeaseLostInput;
import software.amazon.kinesis.lifecycle.events.ShardEndedInput;
import software.amazon.kinesis.lifecycle.events.ShutdownRequestedInput;
import software.amazon.kinesis.processor.RecordProcessorCheckpointer;

/**
 * The tests' recorder (tests/processors/recorder.py) for the Java adapter: the same JSON lines in
 * the same files, so one reader (tests/integration/harness.recorded) reads both kinds of consumer.
 * Each processor appends to DIR/SHARD.N.jsonl (N: this JVM's pid times 1000 plus a count, unique
 * like the Python children's pids): an initialize line (the checkpoint it starts from, the worker
 * as host), one line per record (partition key, the adapter's JSON as data, sequence numbers,
 * when it arrived), and checkpoint, leaseLost, shardEnded, shutdownRequested events. It
 * checkpoints its last record once EVERY records have come since the last checkpoint, at shard
 * end, and when a shutdown is requested.
 */
final class Recorder implements DynamoDBStreamsShardRecordProcessor {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final AtomicLong INSTANCES = new AtomicLong(ProcessHandle.current().pid() * 1000);

    private final Path dir;
    private final String worker;
    private final int every;
    private Writer out;
    private String lastSequence;
    private long lastSub;
    private int since;

    Recorder(Path dir, String worker, int every) {
        this.dir = dir;
        this.worker = worker;
        this.every = every;
    }

    @Override
    public void initialize(InitializationInput input) {
        try {
            out = Files.newBufferedWriter(dir.resolve(input.shardId() + "." + INSTANCES.incrementAndGet() + ".jsonl"),
                    StandardCharsets.UTF_8, StandardOpenOption.CREATE, StandardOpenOption.APPEND);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        Map<String, Object> line = event("initialize");
        line.put("shard", input.shardId());
        line.put("seq", input.extendedSequenceNumber().sequenceNumber());
        line.put("sub", input.extendedSequenceNumber().subSequenceNumber());
        line.put("host", worker);
        write(line);
    }

    @Override
    public void processRecords(DynamoDBStreamsProcessRecordsInput input) {
        double got = System.currentTimeMillis() / 1000.0;
        for (DynamoDBStreamsClientRecord record : input.records()) {
            ByteBuffer data = record.data().duplicate();
            byte[] bytes = new byte[data.remaining()];
            data.get(bytes);
            Map<String, Object> line = new LinkedHashMap<>();
            line.put("pk", record.partitionKey());
            line.put("data", new String(bytes, StandardCharsets.UTF_8));
            line.put("seq", record.sequenceNumber());
            line.put("sub", record.subSequenceNumber());
            line.put("ts", record.approximateArrivalTimestamp().toEpochMilli());
            line.put("got", got);
            write(line);
            lastSequence = record.sequenceNumber();
            lastSub = record.subSequenceNumber();
        }
        since += input.records().size();
        if (since >= every && lastSequence != null) {
            checkpoint(input.checkpointer(), lastSequence, lastSub);
            since = 0;
        }
    }

    @Override
    public void leaseLost(LeaseLostInput input) {
        write(event("leaseLost"));
    }

    @Override
    public void shardEnded(ShardEndedInput input) {
        write(event("shardEnded"));
        checkpoint(input.checkpointer(), null, 0);
    }

    @Override
    public void shutdownRequested(ShutdownRequestedInput input) {
        write(event("shutdownRequested"));
        if (lastSequence != null) {
            checkpoint(input.checkpointer(), lastSequence, lastSub);
        }
    }

    /** ``sequence`` null: at shard end, the checkpointer's own end. */
    private void checkpoint(RecordProcessorCheckpointer checkpointer, String sequence, long sub) {
        Map<String, Object> line = event("checkpoint");
        line.put("asked", System.currentTimeMillis() / 1000.0);
        line.put("seq", sequence);
        line.put("sub", sequence == null ? null : sub);
        try {
            if (sequence == null) {
                checkpointer.checkpoint();
            } else {
                checkpointer.checkpoint(sequence, sub);
            }
            line.put("error", null);
        } catch (Exception e) {
            line.put("error", e.getClass().getSimpleName());
        }
        write(line);
    }

    private static Map<String, Object> event(String name) {
        Map<String, Object> line = new LinkedHashMap<>();
        line.put("event", name);
        return line;
    }

    private void write(Map<String, Object> line) {
        line.putIfAbsent("at", System.currentTimeMillis() / 1000.0);
        try {
            out.write(JSON.writeValueAsString(line) + "\n");
            out.flush();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}

package kclmp.peers;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.io.Writer;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Instant;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
import software.amazon.kinesis.processor.RecordProcessorCheckpointer;
import software.amazon.kinesis.retrieval.kpl.ExtendedSequenceNumber;

/**
 * The tests' recorder (tests/processors/recorder.py) for the Java peers' processors: the same
 * JSON lines in the same files, so one reader (tests/support/harness.recorded) reads every kind
 * of consumer. Each processor appends to DIR/SHARD.N.jsonl (N: this JVM's pid times 1000 plus a
 * count, unique like the Python children's pids): an initialize line (the checkpoint it starts
 * from, the worker as host, the stream of a multi-stream lease), one line per record (partition
 * key, data, sequence numbers, when it arrived), and checkpoint, leaseLost, shardEnded,
 * shutdownRequested events. It checkpoints its last record once EVERY records have come since
 * the last checkpoint, at shard end, and when a shutdown is requested.
 *
 * <p>Shared by the peers' processors (tests/java/common, added to each peer's sources): each
 * hands its events here.
 */
final class RecordLog {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final AtomicLong INSTANCES = new AtomicLong(ProcessHandle.current().pid() * 1000);

    private final Path dir;
    private final String worker;
    private final int every;
    private Writer out;
    private String lastSequence;
    private long lastSub;
    private int since;

    RecordLog(Path dir, String worker, int every) {
        this.dir = dir;
        this.worker = worker;
        this.every = every;
    }

    /** ``stream``: the serialized stream identifier of a multi-stream lease, else null. */
    void initialize(String shardId, String stream, ExtendedSequenceNumber from) {
        try {
            out = Files.newBufferedWriter(dir.resolve(shardId + "." + INSTANCES.incrementAndGet() + ".jsonl"),
                    StandardCharsets.UTF_8, StandardOpenOption.CREATE, StandardOpenOption.APPEND);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        Map<String, Object> line = event("initialize");
        line.put("shard", shardId);
        if (stream != null) {
            line.put("stream", stream);
        }
        line.put("seq", from.sequenceNumber());
        line.put("sub", from.subSequenceNumber());
        line.put("host", worker);
        write(line);
    }

    /** One record of a batch that arrived at ``got`` (s since 1970). */
    void record(String partitionKey, ByteBuffer data, String sequence, long sub, Instant arrival, double got) {
        ByteBuffer copy = data.duplicate();
        byte[] bytes = new byte[copy.remaining()];
        copy.get(bytes);
        Map<String, Object> line = new LinkedHashMap<>();
        line.put("pk", partitionKey);
        line.put("data", new String(bytes, StandardCharsets.UTF_8));
        line.put("seq", sequence);
        line.put("sub", sub);
        line.put("ts", arrival.toEpochMilli());
        line.put("got", got);
        write(line);
        lastSequence = sequence;
        lastSub = sub;
    }

    /** After a batch of ``count`` records: a checkpoint once EVERY have come since the last. */
    void batchDone(RecordProcessorCheckpointer checkpointer, int count) {
        since += count;
        if (since >= every && lastSequence != null) {
            checkpoint(checkpointer, lastSequence, lastSub);
            since = 0;
        }
    }

    void leaseLost() {
        write(event("leaseLost"));
    }

    void shardEnded(RecordProcessorCheckpointer checkpointer) {
        write(event("shardEnded"));
        checkpoint(checkpointer, null, 0);
    }

    void shutdownRequested(RecordProcessorCheckpointer checkpointer) {
        write(event("shutdownRequested"));
        if (lastSequence != null) {
            checkpoint(checkpointer, lastSequence, lastSub);
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

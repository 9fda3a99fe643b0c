package kclmp.peers;

import java.util.Arrays;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import software.amazon.kinesis.coordinator.Scheduler;

/** What every Java peer's main does alike: read its key=value arguments, run its Scheduler. */
final class Peer {
    private Peer() {}

    /** key=value arguments; an unknown or missing key is an error naming it. */
    static Map<String, String> arguments(String[] args, Set<String> required, Set<String> optional) {
        Map<String, String> out = new TreeMap<>();
        for (String arg : args) {
            String[] pair = arg.split("=", 2);
            if (pair.length != 2 || !(required.contains(pair[0]) || optional.contains(pair[0]))) {
                throw new IllegalArgumentException("unknown argument " + arg + ": expected key=value, keys "
                        + required + " and " + optional);
            }
            out.put(pair[0], pair[1]);
        }
        for (String key : required) {
            if (!out.containsKey(key)) {
                throw new IllegalArgumentException("missing argument " + key + "=... (got " + Arrays.toString(args)
                        + ")");
            }
        }
        return out;
    }

    /**
     * Run ``scheduler`` until the JVM is told to stop. KCL 3.x's graceful shutdown can wait for
     * ever on a processor that never gets its shutdown notification (one waiting on its parent
     * shard), renewing and taking leases meanwhile: SIGTERM gives it 10 s, then the JVM exits
     * 143 (what it delivered since its last checkpoint is delivered again by the next owner).
     */
    static void run(Scheduler scheduler, String worker) {
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                scheduler.startGracefulShutdown().get(10, TimeUnit.SECONDS);
            } catch (Exception e) {
                System.err.println("graceful shutdown of " + worker + " did not finish: " + e);
            }
        }, "graceful-shutdown"));
        scheduler.run();
    }
}

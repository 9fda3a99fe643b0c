package kclmp.peers;

import software.amazon.kinesis.coordinator.Scheduler;
import software.amazon.kinesis.multilang.MultiLangDaemon;
import software.amazon.kinesis.retrieval.RetrievalConfig;

/**
 * The MultiLangDaemon, unchanged, after one line on stderr saying which KCL it runs on:
 *
 * <pre>kcl-core 3.5.1 from .../amazon-kinesis-client-3.5.1.jar, multilang from .../amazon-kinesis-client-multilang-3.1.3.jar</pre>
 *
 * The version is the one the core sends in its user agent (RetrievalConfig), the jars those the
 * class loader took the Scheduler and the daemon from: the proof a test reads that the 3.1.3
 * multilang layer runs on the 3.5.1 core, not on a 3.1.3 core found first on the class path.
 */
public final class VersionedDaemon {
    private VersionedDaemon() {}

    public static void main(String[] args) throws Exception {
        System.err.println("kcl-core " + RetrievalConfig.KINESIS_CLIENT_LIB_USER_AGENT_VERSION
                + " from " + Scheduler.class.getProtectionDomain().getCodeSource().getLocation().getPath()
                + ", multilang from "
                + MultiLangDaemon.class.getProtectionDomain().getCodeSource().getLocation().getPath());
        System.err.flush();
        MultiLangDaemon.main(args);
    }
}

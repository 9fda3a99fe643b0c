package kclmp.peers;

import java.util.Properties;

import software.amazon.kinesis.coordinator.Scheduler;
import software.amazon.kinesis.multilang.MultiLangDaemon;
import software.amazon.kinesis.multilang.TableMigrationDaemon;
import software.amazon.kinesis.multilang.config.TableMigrationKeys;
import software.amazon.kinesis.retrieval.RetrievalConfig;

/**
 * The MultiLangDaemon, unchanged, after one line on stderr saying which KCL it runs on:
 *
 * <pre>kcl-core 3.5.1 from .../amazon-kinesis-client-3.5.1.jar, multilang from .../amazon-kinesis-client-multilang-3.1.3.jar</pre>
 *
 * The version is the one the core sends in its user agent (RetrievalConfig), the jars those the
 * class loader took the Scheduler and the daemon from: the proof a test reads that the 3.1.3
 * multilang layer runs on the 3.5.1 core, not on a 3.1.3 core found first on the class path.
 *
 * <p>A properties file that sets KCL 3.5's table-migration keys (which 3.5.1's multilang layer
 * reads and 3.1.3's does not know) runs {@link TableMigrationDaemon} instead: the same daemon,
 * those keys set on its CoordinatorConfig (a second stderr line says their values).
 */
public final class VersionedDaemon {
    private VersionedDaemon() {}

    public static void main(String[] args) throws Exception {
        System.err.println("kcl-core " + RetrievalConfig.KINESIS_CLIENT_LIB_USER_AGENT_VERSION
                + " from " + Scheduler.class.getProtectionDomain().getCodeSource().getLocation().getPath()
                + ", multilang from "
                + MultiLangDaemon.class.getProtectionDomain().getCodeSource().getLocation().getPath());
        System.err.flush();
        final String file = propertiesFile(args);
        final Properties properties = file == null ? new Properties() : TableMigrationDaemon.read(file);
        if (TableMigrationKeys.present(properties)) {
            TableMigrationDaemon.main(args, properties);
        } else {
            MultiLangDaemon.main(args);
        }
    }

    /** The file the daemon will read: --properties-file / -p, else the one positional argument. */
    private static String propertiesFile(final String[] args) {
        String positional = null;
        for (int i = 0; i < args.length; i++) {
            if ((args[i].equals("--properties-file") || args[i].equals("-p")) && i + 1 < args.length) {
                return args[i + 1];
            }
            if (!args[i].startsWith("-")) {
                positional = args[i];
            }
        }
        return positional;
    }
}

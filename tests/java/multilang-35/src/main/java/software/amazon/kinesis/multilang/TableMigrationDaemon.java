package software.amazon.kinesis.multilang;

import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.util.Properties;

import com.beust.jcommander.JCommander;
import software.amazon.kinesis.coordinator.Scheduler;
import software.amazon.kinesis.multilang.config.TableMigrationKeys;

/**
 * The 3.1.3 MultiLangDaemon with KCL 3.5's table-migration keys honoured
 * ({@link TableMigrationKeys}): its main, line for line, with this subclass, whose Scheduler
 * carries them. In this package because the daemon's steps are package-private.
 */
public final class TableMigrationDaemon extends MultiLangDaemon {
    private final Properties properties;

    private TableMigrationDaemon(final Properties properties) {
        this.properties = properties;
    }

    /** The properties file's keys (java.util.Properties, as the daemon's own parser reads it). */
    public static Properties read(final String propertiesFile) throws IOException {
        final Properties properties = new Properties();
        try (InputStream in = new FileInputStream(propertiesFile)) {
            properties.load(in);
        }
        return properties;
    }

    @Override
    Scheduler buildScheduler(final MultiLangDaemonConfig config) {
        return TableMigrationKeys.scheduler(config, properties);
    }

    /** MultiLangDaemon.main (3.1.3) with this daemon; {@code properties} the file's keys. */
    public static void main(final String[] args, final Properties properties) {
        int exitCode = 1;
        final MultiLangDaemon daemon = new TableMigrationDaemon(properties);
        final MultiLangDaemonArguments arguments = new MultiLangDaemonArguments();
        final JCommander jCommander = daemon.buildJCommanderAndParseArgs(arguments, args);
        try {
            final String propertiesFileName = daemon.validateAndGetPropertiesFileName(arguments);
            daemon.configureLogging(arguments.logConfiguration);
            final MultiLangDaemonConfig config = daemon.buildMultiLangDaemonConfig(propertiesFileName);

            final Scheduler scheduler = daemon.buildScheduler(config);
            final MultiLangRunner runner = new MultiLangRunner(scheduler);

            daemon.setupShutdownHook(Runtime.getRuntime(), runner, config);
            exitCode = daemon.submitRunnerAndWait(config, runner);
        } catch (Throwable t) {
            t.printStackTrace(System.err);
            daemon.printUsage(jCommander, t.getMessage());
            System.err.println("For more information, visit: https://github.com/awslabs/amazon-kinesis-client");
        }
        daemon.exit(exitCode);
    }
}

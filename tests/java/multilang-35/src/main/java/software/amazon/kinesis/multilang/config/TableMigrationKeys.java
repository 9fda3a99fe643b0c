package software.amazon.kinesis.multilang.config;

import java.util.Properties;

import software.amazon.kinesis.coordinator.CoordinatorConfig;
import software.amazon.kinesis.coordinator.Scheduler;
import software.amazon.kinesis.multilang.MultiLangDaemonConfig;

/**
 * The two CoordinatorConfig keys KCL 3.5's multilang layer reads from the properties file
 * (MultiLangDaemonConfiguration at v3.5.1: {@code migrateAllEntitiesToLeaseTable},
 * {@code tableMigrationCompleteBakeTimeSeconds}) and the 3.1.3 one, the newest on Maven Central,
 * does not know: the Scheduler is built as 3.1.3's {@code MultiLangDaemonConfiguration.build}
 * builds it, then those keys set on its CoordinatorConfig as 3.5.1's layer would set them.
 * In this package because the resolved configuration is package-private.
 */
public final class TableMigrationKeys {
    public static final String MIGRATE_ALL = "migrateAllEntitiesToLeaseTable";
    public static final String COMPLETE_BAKE = "tableMigrationCompleteBakeTimeSeconds";

    private TableMigrationKeys() {}

    public static boolean present(final Properties properties) {
        return properties.getProperty(MIGRATE_ALL) != null || properties.getProperty(COMPLETE_BAKE) != null;
    }

    public static Scheduler scheduler(final MultiLangDaemonConfig config, final Properties properties) {
        final MultiLangDaemonConfiguration.ResolvedConfiguration resolved =
                config.getMultiLangDaemonConfiguration().resolvedConfiguration(config.getRecordProcessorFactory());
        final CoordinatorConfig coordinator = resolved.getCoordinatorConfig();
        final String migrateAll = properties.getProperty(MIGRATE_ALL);
        if (migrateAll != null) {
            coordinator.migrateAllEntitiesToLeaseTable(Boolean.parseBoolean(migrateAll.trim()));
        }
        final String bake = properties.getProperty(COMPLETE_BAKE);
        if (bake != null) {
            coordinator.tableMigrationCompleteBakeTimeSeconds(Long.parseLong(bake.trim()));
        }
        System.err.println("kcl-core 3.5 keys: " + MIGRATE_ALL + "=" + coordinator.migrateAllEntitiesToLeaseTable()
                + ", " + COMPLETE_BAKE + "=" + coordinator.tableMigrationCompleteBakeTimeSeconds());
        System.err.flush();
        return resolved.build();
    }
}

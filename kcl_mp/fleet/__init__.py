"""What a KCL 3.x fleet keeps beside its leases, the way the Java KCL keeps it.

Where the state lives: the ``Migration3.0`` client version, the leader lock and (KCL 3.5) the
table migration's status in the coordinator-state table, or in the lease table itself once a
3.5 fleet has moved to one table; each worker's metrics in the worker-metrics table (or the
lease table). The modules, with their Java counterparts:

- ``role``: this host's part: join (client version, table migration), follow, lead, rescue
  (Java's Scheduler with its MigrationStateMachine);
- ``client_version`` (pure) and ``state_store``: the client version and the state tables
  (ClientVersion, CoordinatorStateDAO); ``table_migration`` (pure) and ``table_migrator``: 3.5's
  move to one table;
- ``leader``: the lock (DynamoDBLockBasedLeaderDecider); ``assignment`` (pure): the leader's
  round (LeaseAssignmentManager, VarianceBasedLeaseAssignmentDecider);
- ``worker_metrics``, ``fleet_metrics``, ``host_metric`` (pure), ``host_probe``: this host's
  metrics item, everyone's as the leader reads them, and which CPU metric a Java worker on this
  host would publish (WorkerMetricStatsReporter, worker/platform);
- ``discovery``: a follower finds the leases assigned to it.

Only the supervisor runs this package: the pool processes never import it.
"""

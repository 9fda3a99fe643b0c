"""The 3.x leader's side of the worker-metrics items: read every worker's, delete stale ones.

Each round the Java LeaseAssignmentManager scans the worker-metrics items, keeps the live
ones as the fleet's workers, and after assigning deletes the items whose ``lut`` is older
than ``staleWorkerMetricsEntryCleanupDuration`` (P1D; LeaseManagementConfig
.WorkerUtilizationAwareAssignmentConfig), each with a DeleteItem conditioned on the ``lut``
it read (WorkerMetricStatsDAO.deleteMetrics, 3.5 WorkerMetricStatsDAODelegate)::

    DeleteItem  key wid (own table) / leaseKey (lease table)
                ConditionExpression  #key = :value AND attribute_exists (wid | leaseKey)
                #key = lut, :value = the lut read

so a worker that reported again meanwhile keeps its item.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from kcl_mp.aws.dynamodb import scan_all
from kcl_mp.aws.errors import CONDITION_FAILED, call
from kcl_mp.fleet import assignment
from kcl_mp.fleet.state_store import StateTables
from kcl_mp.leases.lease import ENTITY_TYPE, LEASE_KEY
from kcl_mp.leases.rows import WORKER_METRIC_STATS, WorkerMetrics, read_items


def worker_load(metrics: WorkerMetrics, now_s: float, live_s: float) -> assignment.WorkerLoad | None:
    """A worker the leader may assign to, from its metrics item; None when it is dead (``lut``
    older than ``live_s``) or failing (a latest value of -1). CPU is the EMA (alpha 0.5) of
    its values ignoring -1; no CPU metric: Java's default worker (balanced by load).

    >>> worker_load(WorkerMetrics("w", 100, {}, {}, None), 110, 60)
    WorkerLoad(worker_id='w', utilisation=None, max_utilisation=100.0, cores=None)
    >>> worker_load(WorkerMetrics("w", 100, {"C": (40.0, 60.0)}, {"C": (90,)}, None), 110, 60).utilisation
    50.0
    >>> worker_load(WorkerMetrics("w", 100, {"C": (40.0, -1.0)}, {"C": (90,)}, None), 110, 60) is None
    True
    """
    if now_s - metrics.updated_at_s > live_s:
        return None
    if any(values and values[-1] == -1 for values in metrics.stats.values()):
        return None
    cpu = [v for v in metrics.stats.get("C", ()) if v != -1]
    if not cpu:
        return assignment.WorkerLoad(metrics.worker_id, cores=metrics.cores)
    ema = cpu[0]
    for value in cpu[1:]:
        ema = 0.5 * value + 0.5 * ema
    top = metrics.operating_range.get("C", (100,))
    return assignment.WorkerLoad(metrics.worker_id, ema, float(top[0]) if top else 100.0, metrics.cores)


def read_worker_metrics(client: Any, tables: StateTables) -> list[WorkerMetrics]:
    """Every worker's metrics item (a consistent scan of its table)."""
    table = tables.metrics_table
    kwargs: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
    if tables.shared:  # the lease table: only the worker rows
        kwargs.update(FilterExpression="#et = :et", ExpressionAttributeNames={"#et": ENTITY_TYPE},
                      ExpressionAttributeValues={":et": {"S": WORKER_METRIC_STATS}})
    items = scan_all(client, f"scanning worker metrics in {table}", missing_is_empty=not tables.shared, **kwargs)
    if not tables.shared:  # the own table: every item is a worker's, keyed wid
        items = [{**item, LEASE_KEY: item["wid"], ENTITY_TYPE: {"S": WORKER_METRIC_STATS}}
                 for item in items if "wid" in item]
    return [row.view for row in read_items(items).others if isinstance(row.view, WorkerMetrics)]


def live_workers(rows: list[WorkerMetrics], now_s: float, live_s: float) -> list[assignment.WorkerLoad]:
    return [load for row in rows if (load := worker_load(row, now_s, live_s)) is not None]


def delete_stale(client: Any, tables: StateTables, rows: list[WorkerMetrics], now_s: float,
                 stale_s: float) -> list[str]:
    """Delete the items whose ``lut`` is older than ``stale_s``, each conditioned on the ``lut``
    read; the worker ids deleted (a condition failing means the worker reported again)."""
    deleted = []
    key = tables.metrics_key
    for row in rows:
        if now_s - row.updated_at_s <= stale_s:
            continue
        gone = call(f"deleting the stale worker metrics of {row.worker_id} in {tables.metrics_table}", partial(
            client.delete_item, TableName=tables.metrics_table, Key={key: {"S": row.worker_id}},
            ConditionExpression=f"#key = :value AND attribute_exists ({key})",
            ExpressionAttributeNames={"#key": "lut"},
            ExpressionAttributeValues={":value": {"N": str(row.updated_at_s)}}), {CONDITION_FAILED: None})
        if gone is not None:
            deleted.append(row.worker_id)
    return deleted

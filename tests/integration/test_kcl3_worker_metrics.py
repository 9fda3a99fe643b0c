"""The worker-metrics item (kcl_mp.fleet.worker_metrics) written to a real moto server and
compared with the items the Java KCL writes (3.1.3 from a real run, 3.5 from its serializers)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from kcl_mp.fleet import fleet_metrics
from kcl_mp.fleet.host_probe import capacity
from kcl_mp.fleet.state_store import StateTables
from kcl_mp.fleet.worker_metrics import WorkerMetricsReporter
from kcl_mp.leases.rows import WorkerMetrics, read_items
from kcl_mp.leases.table import LeaseTable

from ..support.clock import Clock

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def shape(value):
    """An attribute's DynamoDB types, recursively (the values left out)."""
    (kind, inner), = value.items()
    if kind == "M":
        return {"M": {name: shape(v) for name, v in inner.items()}}
    if kind == "L":
        return {"L": sorted({json.dumps(shape(v), sort_keys=True) for v in inner})}
    return kind


def _stat_file(tmp_path: Path, lines: list[str]):
    """A real file standing for /proc/stat, rewritten before each capture."""
    path = tmp_path / "stat"
    pending = list(lines)

    def read_line() -> str:
        path.write_text(pending.pop(0) + "\ncpu0 1 2 3 4 5\n")
        with open(path, encoding="ascii") as f:
            return f.readline()
    return read_line


def test_own_table_item_is_the_java_313_item(dynamodb, unique_name, tmp_path):
    reference = json.loads((FIXTURES / "java_kcl_3.1.3_tables.json").read_text())["while_running"]
    java_table = reference["kclbench-0-WorkerMetricStats"]
    tables = StateTables.separate(unique_name)
    clock, wall = Clock(50.0), Clock(1_795_343_483.7)
    lines = ["cpu  100 0 50 800 50 0 0 0 0 0", "cpu  160 0 70 900 70 0 0 0 0 0",
             "cpu  200 20 90 960 70 0 0 0 0 0"]
    reporter = WorkerMetricsReporter(dynamodb, tables, "kclmp-1", read_line=_stat_file(tmp_path, lines),
                                     clock=clock, wall=wall)
    assert reporter.ensure_table() is True
    table = dynamodb.describe_table(TableName=f"{unique_name}-WorkerMetricStats")["Table"]
    assert table["KeySchema"] == java_table["KeySchema"]
    assert table["AttributeDefinitions"] == java_table["AttributeDefinitions"]
    assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    written = []
    for _ in range(3):  # captures at 0, 1, 2 s; the first report at 2 s
        written.append(reporter.tick())
        clock.now += 1.0
    assert written == [False, False, True]
    item = dynamodb.get_item(TableName=tables.metrics_table, Key={"wid": {"S": "kclmp-1"}})["Item"]
    java_item = java_table["items"][0]
    # the same attributes of the same types (Java's run reported no metric: its maps are empty)
    assert {k: next(iter(v)) for k, v in item.items()} == {k: next(iter(v)) for k, v in java_item.items()}
    # samples 0 (the first), 50 (100 busy of 200), 57.142857 (80 of 140): their mean
    assert item["sts"] == {"M": {"C": {"L": [{"N": "35.714286"}]}}}
    assert item["opr"] == {"M": {"C": {"L": [{"N": "100"}]}}}
    assert item["lut"] == {"N": "1795343483"}
    # nothing sampled before the next report: -1, and the history grows (10 kept)
    reporter.cpu.read_line = lambda: "not a cpu line"
    clock.now += 30
    assert reporter.tick() is True
    item = dynamodb.get_item(TableName=tables.metrics_table, Key={"wid": {"S": "kclmp-1"}})["Item"]
    assert item["sts"]["M"]["C"]["L"] == [{"N": "35.714286"}, {"N": "-1.0"}]


def test_lease_table_row_is_the_java_35_row_and_reads_as_worker_metrics(dynamodb, unique_name, tmp_path):
    java_rows = json.loads((FIXTURES / "java_kcl_3.5_rows.json").read_text())["rows"]
    java_row = next(r for r in java_rows if r["entityType"]["S"] == "WORKER_METRIC_STATS")
    LeaseTable(dynamodb, unique_name).ensure_table()
    tables = StateTables.in_lease_table(unique_name)
    clock = Clock(0.0)
    reporter = WorkerMetricsReporter(dynamodb, tables, "kclmp-2", read_line=_stat_file(
        tmp_path, [f"cpu  {100 + 10 * i} 0 50 {800 + 30 * i} 50 0 0 0" for i in range(40)]), clock=clock)
    assert reporter.ensure_table() is False  # the lease table is Java's and ours already
    for _ in range(40):
        reporter.tick()
        clock.now += 1.0
    items = dynamodb.scan(TableName=unique_name)["Items"]
    assert len(items) == 1
    assert {k: shape(v) for k, v in items[0].items()} == {k: shape(v) for k, v in java_row.items()}
    scan = read_items(items)
    assert scan.leases == ()
    view = scan.others[0].view
    assert isinstance(view, WorkerMetrics) and view.worker_id == "kclmp-2" and view.support_code == 1
    assert view.operating_range == {"C": (100,)}
    assert len(view.stats["C"]) == 2 and view.stats["C"][-1] == 25.0  # 10 busy of 40 per second

    # The leader's clean-up in the single table: the Java 3.5 row, two days old, is stale after P1D;
    # ours is not. Rewritten between the leader's read and its delete, it survives (conditioned on lut).
    now_s = time.time()
    dynamodb.put_item(TableName=unique_name, Item={**java_row, "lut": {"N": str(int(now_s) - 2 * 86400)}})
    rows = fleet_metrics.read_worker_metrics(dynamodb, tables)
    assert sorted(r.worker_id for r in rows) == sorted(["kclmp-2", java_row["leaseKey"]["S"]])
    dynamodb.update_item(TableName=unique_name, Key={"leaseKey": java_row["leaseKey"]}, UpdateExpression="SET lut = :lut",
                         ExpressionAttributeValues={":lut": {"N": str(int(now_s) - 2 * 86400 + 30)}})
    assert fleet_metrics.delete_stale(dynamodb, tables, rows, now_s, 86400.0) == []
    rows = fleet_metrics.read_worker_metrics(dynamodb, tables)
    assert fleet_metrics.delete_stale(dynamodb, tables, rows, now_s, 86400.0) == [java_row["leaseKey"]["S"]]
    assert [item["leaseKey"]["S"] for item in dynamodb.scan(TableName=unique_name)["Items"]] == ["kclmp-2"]


def test_real_proc_stat_gives_a_utilisation_in_range(dynamodb, unique_name):
    tables = StateTables.separate(unique_name)
    reporter = WorkerMetricsReporter(dynamodb, tables, "kclmp-3", cores=capacity())
    reporter.ensure_table()
    deadline = time.monotonic() + 20
    while not reporter.tick():
        assert time.monotonic() < deadline
        time.sleep(reporter.due_in() + 0.01)
    item = dynamodb.get_item(TableName=tables.metrics_table, Key={"wid": {"S": "kclmp-3"}})["Item"]
    (value,) = item["sts"]["M"]["C"]["L"]
    assert 0.0 <= float(value["N"]) <= 100.0
    assert abs(int(item["lut"]["N"]) - time.time()) < 30
    # kcl-mp's own kclmpCores: the leader weighs this host by it (a Java worker's item has none)
    assert item["kclmpCores"] == {"N": repr(capacity())}
    (load,) = fleet_metrics.live_workers(fleet_metrics.read_worker_metrics(dynamodb, tables), time.time(), 60)
    assert load.cores == capacity() and load.utilisation is not None

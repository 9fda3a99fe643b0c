"""Shared fixtures: a real moto server on loopback, and safe AWS settings for every test.

Credentials are throwaway values and instance metadata is off, so nothing a test does
can reach beyond 127.0.0.1. A moto server that cannot start fails the tests that need
it; nothing is skipped.
"""

from __future__ import annotations

import os
import uuid

import boto3
import pytest

from kcl_mp.embedded import EMBEDDED_ENV, start_emulator

for _key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE"):
    os.environ.pop(_key, None)
os.environ.update(EMBEDDED_ENV)
os.environ["AWS_REGION"] = EMBEDDED_ENV["AWS_DEFAULT_REGION"]
# Every JVM the tests start (the Java peers, Spark's jobs): the client JIT only and the serial
# collector. The peers mostly wait on lease timers; C2's compiles and G1's threads were a fifth of
# their CPU (tests/e2e/test_java_leader.py: 13.3 s of CPU with the defaults, 10.9 s with these).
os.environ["JDK_JAVA_OPTIONS"] = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


# The Java peers' tests in two groups of five to six minutes each on this stop's machine (each was
# its phase's longest worker): the 3.x fleet's (171-207 s) with the lock test and the adapter's
# multi-stream consumer's; the 2.x mixed fleet's with the DynamoDB Streams adapter's fleet, the
# multi-stream consumer's and the 3.5 table migration's. Spark's in one group, but for the `heavy` ones
# (make test's last phase, two at a time), in two of about three minutes each here (measured two
# at a time, in s: pipeline kills 96 + D3 64; D2 74 + the wheel's on PySpark 4.0.5 96).
JAVA_B = frozenset({"test_mixed_fleet.py", "test_dynamodb_streams_java_adapter.py", "test_multi_stream_java.py",
                    "test_kcl3_table_migration.py"})
HEAVY_SPARK_B = frozenset({"test_the_spark_extra_leaves_the_clusters_pyspark_in_place",
                           "test_every_id_once_through_kills_task_failures_a_twin_and_reshards"})


# The timing tests that keep most of a core busy for their whole run (measured per test, with
# their processes: each fault run 49-51 CPU s in 75-79 s, the cost-based fleet 27 in 32, the
# 64-lease host 12 in 23): one after another on one worker, so the timing phase runs three at a
# time (the others mostly wait on lease timers: 0.1-0.3 of a core) and never two of these at once.
TIMING_CPU = frozenset({"test_faults.py", "test_cost_balance.py", "test_pool.py"})


def _group(item: pytest.Item) -> str | None:
    if item.get_closest_marker("timing") and item.path.name in TIMING_CPU:
        return "timing-cpu"
    if item.get_closest_marker("java"):
        return "java-b" if item.path.name in JAVA_B else "java"
    if item.get_closest_marker("spark"):
        return "spark-b" if item.get_closest_marker("heavy") and item.originalname in HEAVY_SPARK_B else "spark"
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups into the node ids
def pytest_collection_modifyitems(items):
    """Under pytest-xdist (`make test`), the Java peers' tests run one after another in two
    groups and Spark's in one (two in the heavy phase), so at most two Java fleets run at once
    (once started they mostly wait on their lease timers) and one Spark job (two when nothing
    else runs); the timing tests that keep a core busy run one after another (``TIMING_CPU``)."""
    for item in items:
        group = _group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(scope="session")
def moto_url(tmp_path_factory):
    emulator = start_emulator(log_path=str(tmp_path_factory.mktemp("moto") / "moto.log"))
    try:
        yield emulator.url
    finally:
        emulator.stop()


@pytest.fixture
def kinesis(moto_url):
    return boto3.client("kinesis", endpoint_url=moto_url, region_name="us-east-1")


@pytest.fixture
def dynamodb(moto_url):
    return boto3.client("dynamodb", endpoint_url=moto_url, region_name="us-east-1")


@pytest.fixture
def streams(moto_url):
    """A DynamoDB Streams client of the embedded emulator."""
    return boto3.client("dynamodbstreams", endpoint_url=moto_url, region_name="us-east-1")


@pytest.fixture
def steer(moto_url):
    """POSTs an admin action to the emulator's DynamoDB Streams; its settings are put back after the test."""
    from kcl_mp.embedded.dynamodb_streams import Settings

    from .support.dynamodb_streams import admin

    def post(**body):
        return admin(moto_url, **body)

    yield post
    post(action="configure", **Settings().__dict__)


@pytest.fixture
def unique_name():
    return "t" + uuid.uuid4().hex[:12]


@pytest.fixture
def java_rows(dynamodb):
    """``java_rows(table)`` puts a Java KCL 3.5 fleet's rows that are not leases into the lease
    table (tests/support/harness.put_java_rows); at teardown each must be byte for byte
    what it was, raw attribute values and types included."""
    from tests.support.harness import assert_java_rows_untouched, put_java_rows

    placed: dict[str, list[dict]] = {}

    def put(table: str) -> list[dict]:
        placed[table] = put_java_rows(dynamodb, table)
        return placed[table]

    yield put
    for table, before in placed.items():
        assert_java_rows_untouched(dynamodb, table, before)


@pytest.fixture(scope="session")
def kinesis_mock_url(tmp_path_factory):
    from tests.support.kinesis_mock import start_kinesis_mock

    emulator = start_kinesis_mock(tmp_path_factory.mktemp("kinesis-mock") / "kinesis-mock.log")
    try:
        yield emulator.url
    finally:
        emulator.stop()


@pytest.fixture(scope="session")
def efo_proxy(kinesis_mock_url):
    """kinesis-mock behind the proxy that adds SubscribeToShard's initial-response event
    (tests/support/efo_proxy.py says why)."""
    from tests.support.efo_proxy import EfoProxy

    proxy = EfoProxy(kinesis_mock_url)
    try:
        yield proxy
    finally:
        proxy.stop()

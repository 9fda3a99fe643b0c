"""kcl_mp.spark.tables' pure parts: when a batch is a replay, the trigger, when an emulated
availableNow run is done, the S3 settings each writer gets, and the paths delta-rs and
pyiceberg take; the landing source's availableNow option."""

from __future__ import annotations

import pytest

from kcl_mp.spark.source import Options
from kcl_mp.spark.tables import IcebergCatalog, S3Settings, Trigger, caught_up, object_store_uri, replayed


@pytest.mark.parametrize(("recorded", "batch_id", "replay"), [
    (None, 0, False),  # a new table, or a query that never wrote to it
    (None, 7, False),
    (3, 2, True),  # Spark replays the batch it had not committed (and never an older one: still a replay)
    (3, 3, True),
    (3, 4, False),  # the next batch
])
def test_a_batch_at_or_below_the_recorded_one_is_a_replay(recorded, batch_id, replay):
    assert replayed(recorded, batch_id) is replay


def test_a_trigger_is_available_now_or_a_processing_time_exactly():
    assert Trigger(available_now=True).spark_kwargs() == {"availableNow": True}
    assert Trigger(processing_time="5 seconds").spark_kwargs() == {"processingTime": "5 seconds"}
    for wrong in ({}, {"available_now": True, "processing_time": "5 seconds"}):
        with pytest.raises(ValueError, match="exactly one"):
            Trigger(**wrong)


WAITING, NEXT = "Waiting for data to arrive", "Waiting for next trigger"


@pytest.mark.parametrize(("message", "data", "active", "done"), [
    ("Initializing sources", False, False, False),  # no trigger yet (a pending replay has not run)
    ("Processing new data", True, True, False),  # a batch (the replay, or new data) runs
    (NEXT, False, False, False),  # a batch ran; the next trigger has not planned yet
    (WAITING, False, True, False),  # the next trigger started: let it end
    (WAITING, False, False, True),  # a trigger found nothing new: done
    (WAITING, True, False, False),  # never both, but data is never left behind
])
def test_an_emulated_available_now_run_ends_at_a_trigger_that_found_nothing(message, data, active, done):
    assert caught_up({"message": message, "isDataAvailable": data, "isTriggerActive": active}) is done


@pytest.mark.parametrize(("value", "parsed"), [(None, False), ("true", True), ("TRUE", True), ("false", False)])
def test_the_landing_sources_available_now_option(value, parsed):
    options = {"path": "/landing"} | ({"availableNow": value} if value is not None else {})
    assert Options.parse(options).available_now is parsed


def test_a_wrong_available_now_option_is_named():
    with pytest.raises(ValueError, match="option availableNow='yes' must be true or false"):
        Options.parse({"path": "/landing", "availableNow": "yes"})


def test_s3a_paths_are_s3_for_delta_rs_and_pyiceberg():
    assert object_store_uri("s3a://bucket/tables/events") == "s3://bucket/tables/events"
    assert object_store_uri("s3://bucket/t") == "s3://bucket/t"
    assert object_store_uri("/data/t") == "/data/t"


def test_one_s3_settings_gives_spark_delta_rs_and_pyiceberg_the_same_endpoint():
    s3 = S3Settings(region="eu-west-1", endpoint="http://127.0.0.1:5000", path_style=True)
    assert s3.spark_conf() == {
        "spark.hadoop.fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.s3a.endpoint.region": "eu-west-1",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.aws.credentials.provider":
            "software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider",
        "spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:5000",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
    }
    assert s3.storage_options() == {"AWS_REGION": "eu-west-1", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
                                    "AWS_ENDPOINT_URL": "http://127.0.0.1:5000", "AWS_ALLOW_HTTP": "true"}
    assert s3.iceberg_properties() == {"s3.region": "eu-west-1", "s3.endpoint": "http://127.0.0.1:5000",
                                       "s3.force-virtual-addressing": "false"}
    aws = S3Settings()
    assert "spark.hadoop.fs.s3a.endpoint" not in aws.spark_conf()
    assert aws.storage_options() == {"AWS_REGION": "us-east-1", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "true"}


def test_an_iceberg_catalogs_properties_are_frozen():
    catalog = IcebergCatalog("glue", {"type": "glue"})
    with pytest.raises(TypeError):
        catalog.properties["type"] = "rest"  # type: ignore[index]

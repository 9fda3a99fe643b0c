"""The Spark 3.5 reader (Glue 5, EMR 7: no Python data sources): Spark's file source over the
landing area, duplicates dropped within a window.

    records = read_deduplicated(spark, "s3a://bucket/landing", window="30 minutes")

Exactly once only **within the window**: a copy of a record landed more than ``window`` after
the first (a host down longer, checkpoints failing for longer) comes out twice, and rows whose
``ingestTime`` (the writer host's clock) is more than ``window`` behind the watermark are
dropped as late (``numRowsDroppedByWatermark``). The dedup state holds every key of the window.
The file source also lists the whole landing area on every trigger. On Spark >= 4.0 use the
``kclmp_landing`` source, which has none of these limits.
"""

from __future__ import annotations

from typing import Any

KEY = ["stream", "shardId", "sequenceNumber", "subSequenceNumber"]
SCHEMA = ("stream string, shardId string, sequenceNumber string, subSequenceNumber bigint, partitionKey string, "
          "approximateArrivalTimestamp timestamp, data binary, ingestTime timestamp")


def read_deduplicated(spark: Any, landing: str, window: str = "30 minutes", files_per_trigger: int = 100) -> Any:
    """A streaming DataFrame of the landed records, each (stream, shard, sequence, sub-sequence)
    once within ``window`` of ``ingestTime``; files are found under every stream and shard."""
    records = (spark.readStream.schema(SCHEMA).option("recursiveFileLookup", "true")
               .option("maxFilesPerTrigger", files_per_trigger).parquet(landing))
    return records.withWatermark("ingestTime", window).dropDuplicatesWithinWatermark(KEY)

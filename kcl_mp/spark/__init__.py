"""kcl-mp for PySpark: the landing sink (:mod:`kcl_mp.spark.sink`), its layout and chain rule
(:mod:`kcl_mp.spark.layout`), the ``kclmp_landing`` source (:mod:`kcl_mp.spark.source`), the
``kclmp_kinesis`` source that reads Kinesis itself (:mod:`kcl_mp.spark.kinesis_source`), the
Spark 3.5 fallback reader (:mod:`kcl_mp.spark.fallback`) and a job (:mod:`kcl_mp.spark.job`).

    import kcl_mp.spark
    kcl_mp.spark.register(spark)
    spark.readStream.format("kclmp_landing").load("s3://bucket/landing")

PySpark comes from the cluster; importing this package does not import it.
"""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Register the ``kclmp_landing`` and ``kclmp_kinesis`` sources with ``spark`` (a
    SparkSession; PySpark >= 4.0)."""
    from kcl_mp.spark.kinesis_source import KinesisSource
    from kcl_mp.spark.source import LandingSource

    spark.dataSource.register(LandingSource)
    spark.dataSource.register(KinesisSource)

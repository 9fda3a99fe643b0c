"""The environment that runs a PySpark job in local mode from outside, as spark-submit would:
the tests, the benchmarks and the demo each start the job this way instead of restating it."""

from __future__ import annotations

import sys
from collections.abc import Iterable

SUBMIT = ("--master local[2] --driver-memory 512m --conf spark.ui.enabled=false "
          "--conf spark.ui.showConsoleProgress=false --conf spark.sql.shuffle.partitions=2 "
          "--conf 'spark.driver.extraJavaOptions=-XX:+UseSerialGC -XX:TieredStopAtLevel=1'")


def local_spark_env(python: str = sys.executable, jars: Iterable[str] = ()) -> dict[str, str]:
    """``PYSPARK_SUBMIT_ARGS`` for local[2] on a small machine (the UI off, a serial GC) with
    ``jars`` on the class path, and Spark's Python workers on ``python``: the interpreter that
    has pyarrow and kcl_mp, not whatever python3 is first on PATH."""
    listed = ",".join(jars)
    submit = SUBMIT + (f" --jars {listed}" if listed else "") + " pyspark-shell"
    return {"SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": python, "PYSPARK_SUBMIT_ARGS": submit}

"""The environment that runs a PySpark job in local mode from outside, as spark-submit would:
the tests, the benchmarks and the demo each start the job this way instead of restating it."""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

SUBMIT = ("--master local[2] --driver-memory 512m --conf spark.ui.enabled=false "
          "--conf spark.ui.showConsoleProgress=false --conf spark.sql.shuffle.partitions=2 "
          "--conf 'spark.driver.extraJavaOptions=-XX:+UseSerialGC -XX:TieredStopAtLevel=1'")


def local_spark_env(python: str = sys.executable, jars: Iterable[str] = ()) -> dict[str, str]:
    """``PYSPARK_SUBMIT_ARGS`` for local[2] on a small machine (the UI off, a serial GC) with
    ``jars`` on the class path, and Spark's Python workers on ``python``: the interpreter that
    has pyarrow and kcl_mp, not whatever python3 is first on PATH. On this interpreter, also a
    ``SPARK_HOME`` of its PySpark without ``python/lib`` (see :func:`spark_home_without_zips`)."""
    listed = ",".join(jars)
    submit = SUBMIT + (f" --jars {listed}" if listed else "") + " pyspark-shell"
    env = {"SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": python, "PYSPARK_SUBMIT_ARGS": submit}
    # the same path, not the same binary: every venv's python links to its base interpreter's
    if os.path.abspath(python) == os.path.abspath(sys.executable) and "SPARK_HOME" not in os.environ:
        home = spark_home_without_zips()
        if home is not None:
            env["SPARK_HOME"] = home
    return env


def job_env(python: str = sys.executable, jars: Iterable[str] = (), drop: Iterable[str] = ()) -> dict[str, str]:
    """This process's environment (less the names in ``drop``) with :func:`local_spark_env`'s on
    top, for a job on ``python``. On another interpreter, less an inherited ``SPARK_HOME`` too:
    one made for this interpreter's PySpark holds another Spark's jars (a 4.0 PySpark on 4.3's
    jars fails unpickling its own data source)."""
    other = os.path.abspath(python) != os.path.abspath(sys.executable)
    dropped = {*drop, *(("SPARK_HOME",) if other else ())}
    return {**{k: v for k, v in os.environ.items() if k not in dropped}, **local_spark_env(python, jars)}


def spark_home_without_zips() -> str | None:
    """A ``SPARK_HOME`` holding only links to the installed PySpark's ``bin`` and ``jars``.
    Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on each Python worker's path, and a
    zip import compiles PySpark again in every worker (0.6 s of CPU each, measured; a job
    starts one per query and per restart); without it the workers import the same PySpark
    from site-packages, bytecode cached. Made once per installation, in the temp directory."""
    try:
        import pyspark
    except ImportError:
        return None
    installed = Path(pyspark.__file__).parent
    if not (installed / "bin").is_dir() or not (installed / "jars").is_dir():
        return None
    digest = hashlib.sha256(str(installed).encode()).hexdigest()[:12]
    home = Path(tempfile.gettempdir()) / f"kcl-mp-spark-home-{os.getuid()}-{digest}"
    if not home.is_dir():
        building = Path(tempfile.mkdtemp(prefix=home.name + "-", dir=home.parent))
        for name in ("bin", "jars"):
            (building / name).symlink_to(installed / name)
        try:
            building.rename(home)  # atomic: a concurrent maker's home wins and this one goes
        except OSError:
            for name in ("bin", "jars"):
                (building / name).unlink()
            building.rmdir()
    return str(home)

"""kcl_mp.devtools.spark_local: the local-mode environment the tests, benchmarks and demo share."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pyspark

from kcl_mp.devtools.spark_local import job_env, local_spark_env, spark_home_without_zips


def test_on_this_interpreter_spark_home_is_pysparks_bin_and_jars_without_the_zips():
    home = Path(spark_home_without_zips() or "")
    installed = Path(pyspark.__file__).parent
    assert sorted(p.name for p in home.iterdir()) == ["bin", "jars"]
    assert (home / "bin").resolve() == (installed / "bin").resolve()
    assert (home / "jars").resolve() == (installed / "jars").resolve()
    assert not (home / "python").exists()  # so no worker puts pyspark.zip first on its path
    assert spark_home_without_zips() == str(home)  # made once


def test_another_interpreters_pyspark_keeps_its_own_spark_home(monkeypatch):
    monkeypatch.delenv("SPARK_HOME", raising=False)
    assert "SPARK_HOME" in local_spark_env(sys.executable)
    other = local_spark_env("/opt/cluster/venv/bin/python")  # its PySpark may be another version
    assert "SPARK_HOME" not in other and other["PYSPARK_PYTHON"] == "/opt/cluster/venv/bin/python"


def test_another_venv_on_the_same_base_interpreter_is_another_interpreter(tmp_path, monkeypatch):
    """A venv's python links to its base interpreter, as this one's does: same binary, other PySpark."""
    monkeypatch.delenv("SPARK_HOME", raising=False)
    link = tmp_path / "venv-python"
    link.symlink_to(os.path.realpath(sys.executable))
    assert "SPARK_HOME" not in local_spark_env(str(link))


def test_a_spark_home_already_set_is_left_alone(monkeypatch):
    monkeypatch.setenv("SPARK_HOME", "/opt/spark")
    assert "SPARK_HOME" not in local_spark_env(sys.executable)


def test_a_job_on_another_interpreter_gets_no_inherited_spark_home(monkeypatch):
    """job_env: this process's environment under local_spark_env's, less what ``drop`` names; an
    inherited SPARK_HOME (this PySpark's jars) only for a job on this very interpreter."""
    monkeypatch.setenv("SPARK_HOME", "/tmp/this-pyspark")
    monkeypatch.setenv("PYTHONPATH", "/checkout")
    mine = job_env(sys.executable)
    assert mine["SPARK_HOME"] == "/tmp/this-pyspark" and mine["PYTHONPATH"] == "/checkout"
    other = job_env("/opt/cluster/venv/bin/python", drop=("PYTHONPATH",))
    assert "SPARK_HOME" not in other and "PYTHONPATH" not in other
    assert other["PYSPARK_PYTHON"] == "/opt/cluster/venv/bin/python" and other["PATH"] == os.environ["PATH"]

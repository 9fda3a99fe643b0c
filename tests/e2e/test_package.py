"""The wheel, as a user gets it: built from the source, pip-installed into a fresh virtual
environment, then run from a directory with no checkout: ``kcl-mp --version``, ``--help``
and ``check-processor`` on a processor the wheel ships, with the kit the wheel ships.

Offline: the wheel is built without build isolation (setuptools and wheel come with the
test extra) and installed with ``--no-index --no-deps``; its dependencies (boto3 ...
and amazon_kclpy, the ``processors`` extra) are the ones this environment has, made
visible to the new one by a path file, never kcl_mp itself.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import boto3
import pytest
from deltalake import DeltaTable

import kcl_mp
from kcl_mp.cli.check_processor import load_scenarios
from kcl_mp.devtools.producer import produce
from kcl_mp.devtools.spark_local import job_env
from kcl_mp.spark.layout import START
from kcl_mp.spark.storage import Storage

from ..support.kinesis_mock import create_streams
from ..support.spark_support import land

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PROCESSOR = "kcl_mp.processors.python.sample_processor"


def run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{' '.join(argv)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result


def build_wheel(tmp_path: Path) -> Path:
    """The wheel, built from the source as a checkout holds it (links resolved), outside the
    repository, with this environment's setuptools."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "kcl_mp", src / "kcl_mp", ignore=shutil.ignore_patterns("node_modules", "__pycache__"))
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
         "-w", str(dist), str(src)], tmp_path, dict(os.environ))
    (wheel,) = dist.glob("kcl_mp-*.whl")
    return wheel


def test_the_wheel_installs_into_a_fresh_venv_and_works_without_a_checkout(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    wheel = build_wheel(tmp_path)
    assert wheel.name.startswith(f"kcl_mp-{kcl_mp.__version__}-")
    names = set(zipfile.ZipFile(wheel).namelist())
    for shipped in ("kcl_mp/kit/conformance/scenarios.json", "kcl_mp/kit/schema/multilang.schema.json",
                    "kcl_mp/kit/vectors/basic.jsonl", "kcl_mp/processors/python/sample_processor.py",
                    "kcl_mp/processors/python/parquet_sink.py", "kcl_mp/processors/nodejs/sample_processor.js",
                    "kcl_mp/processors/nodejs/package-lock.json", "kcl_mp/processors/shell/processor.sh",
                    "kcl_mp/spark/tables.py", "kcl_mp/spark/sink.py", "kcl_mp/spark/source.py"):
        assert shipped in names, f"{shipped} is not in {wheel.name}"
    vectors = {p.name for p in (ROOT / "kcl_mp" / "kit" / "vectors").glob("*.jsonl")}
    shipped_vectors = {n.rsplit("/", 1)[1] for n in names if n.startswith("kcl_mp/kit/vectors/")}
    assert {n for n in shipped_vectors if n.endswith(".jsonl")} == vectors
    assert not [n for n in names if "node_modules" in n or n.startswith("tests/")]

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path, env)
    python = venv / "bin" / "python"
    site = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                    tmp_path, env).stdout.strip())
    # this environment's packages serve as the dependencies; kcl_mp must come from the wheel
    (site / "dependencies.pth").write_text("\n".join(sorted({sysconfig.get_paths()["purelib"],
                                                             sysconfig.get_paths()["platlib"]})) + "\n")
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-index", "--no-deps",
         "--ignore-installed", str(wheel)], tmp_path, env)

    elsewhere = tmp_path / "elsewhere"  # no checkout here, nor above
    elsewhere.mkdir()
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    where = run(["python", "-c", "import kcl_mp; print(kcl_mp.__file__)"], elsewhere, env).stdout.strip()
    assert Path(where).is_relative_to(venv), where
    assert run(["kcl-mp", "--version"], elsewhere, env).stdout.strip() == f"kcl-mp {kcl_mp.__version__}"
    usage = run(["kcl-mp", "--help"], elsewhere, env).stdout
    for command in ("leases", "check-processor", "--properties", "--version", "examples:"):
        assert command in usage, f"kcl-mp --help does not mention {command}:\n{usage}"
    for command in ("leases", "check-processor"):
        assert "examples:\n  kcl-mp " + command in run(["kcl-mp", command, "--help"], elsewhere, env).stdout

    checked = run(["kcl-mp", "check-processor", "--", "python", "-m", PROCESSOR], elsewhere, env)
    scenarios, _ = load_scenarios()
    assert f"{len(scenarios)} passed, 0 warned, 0 failed" in checked.stdout, checked.stdout
    print(f"\n{wheel.name}: installed in a fresh venv; from {elsewhere}:\n{checked.stdout}")


def install_lines(text: str) -> list[str]:
    """The install commands of a document: its indented lines that build or install kcl-mp."""
    return [line.strip().split("  #")[0].strip() for line in text.splitlines()
            if line.startswith("    ") and ("/opt/kcl-mp/bin/pip install" in line or "pip wheel" in line)]


def test_the_documented_install_lines_work_as_written(tmp_path):
    """docs/deploy.md's three routes (a checkout, a wheel built from it, a git URL), each
    into a fresh virtual environment, as written there: only the clone's URL and the
    interpreter are put in (``/opt/kcl-mp/bin/pip`` is this environment's pip aimed at the
    new one, which saves installing pip three times), and pip is kept offline by its
    environment (the dependencies come from this environment, as above). README's lines
    are the same."""
    documented = install_lines((ROOT / "docs" / "deploy.md").read_text())
    checkout, wheel, installed, from_git = documented
    assert checkout == "/opt/kcl-mp/bin/pip install '.[processors]'", documented
    assert wheel.startswith("python3 -m pip wheel") and "dist/kcl_mp-*.whl" in installed, documented
    assert "@ git+<the URL you cloned kcl-mp from>" in from_git, documented
    readme = " ".join(install_lines((ROOT / "README.md").read_text()))
    for line in documented:
        assert line in readme, f"README.md does not say {line!r}"

    src = tmp_path / "kcl-mp"  # a clone: the source as a checkout holds it, in a git repository
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "kcl_mp", src / "kcl_mp", ignore=shutil.ignore_patterns("node_modules", "__pycache__"))
    git = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    base = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for argv in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "kcl-mp"]):
        run(argv, src, {**base, **git})
    offline = {**base, "PIP_NO_INDEX": "1", "PIP_NO_DEPS": "1", "PIP_NO_BUILD_ISOLATION": "0",
               "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for route, lines in (("checkout", [checkout]), ("wheel", [wheel, installed]), ("git", [from_git])):
        venv = tmp_path / route
        run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path, base)  # pip: this one's, below
        site = Path(run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                        tmp_path, base).stdout.strip())
        (site / "dependencies.pth").write_text("\n".join(sorted({sysconfig.get_paths()["purelib"],
                                                                 sysconfig.get_paths()["platlib"]})) + "\n")
        for line in lines:
            command = (line.replace("/opt/kcl-mp/bin/pip", f"{sys.executable} -m pip --python {venv}/bin/python")
                       .replace("python3 -m pip", f"{sys.executable} -m pip")
                       .replace("<the URL you cloned kcl-mp from>", f"file://localhost{src}"))  # pip 23: a host
            run(["bash", "-c", command], src, offline)
        where = run([str(venv / "bin" / "python"), "-c", "import kcl_mp; print(kcl_mp.__file__)"], elsewhere, base)
        assert Path(where.stdout.strip()).is_relative_to(venv), (route, where.stdout)
        version = run([str(venv / "bin" / "kcl-mp"), "--version"], elsewhere, base).stdout.strip()
        assert version == f"kcl-mp {kcl_mp.__version__}", (route, version)
        assert "examples:\n  kcl-mp check-config" in run([str(venv / "bin" / "kcl-mp"), "check-config", "--help"],
                                                          elsewhere, base).stdout


# A cluster's PySpark, older than the tests' 4.3.0 (4.0: EMR 8's line): the wheel `make test` builds
# from PyPI's sdist (the Makefile's OLDER_PYSPARK pins it), so no test builds 456 MB
OLDER_PYSPARK_WHEELS = ROOT / ".cache" / "pyspark-wheels"
PIP_CACHE = Path.home() / ".cache" / "kcl-mp" / "pip"  # the spark extra's libraries: downloaded once per machine


def older_pyspark() -> tuple[Path, str]:
    """The older PySpark's wheel and its version."""
    wheels = sorted(OLDER_PYSPARK_WHEELS.glob("pyspark-*.whl"))
    assert len(wheels) == 1, (f"one PySpark wheel expected in {OLDER_PYSPARK_WHEELS}, found {[w.name for w in wheels]}: "
                              "run `make test` (or `make e2e`), which builds it")
    return wheels[0], wheels[0].name.split("-")[1]


@pytest.mark.heavy
@pytest.mark.spark
def test_the_spark_extra_leaves_the_clusters_pyspark_in_place(tmp_path, kinesis_mock_url, unique_name):
    """A fresh venv with an older PySpark already installed, as on a cluster: ``pip install
    <wheel>[spark]`` (from PyPI, through a cache kept in ~/.cache/kcl-mp/pip) brings the table-format
    libraries (SQLAlchemy for pyiceberg's SQL catalog among them) and leaves that PySpark as it
    was; ``kcl_mp.spark`` imports. (The job gets no SPARK_HOME from this process: the Spark tests
    before it set this checkout's, whose jars are another Spark's; ``job_env``.)"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the venv imports its own kcl_mp
    wheel = build_wheel(tmp_path)
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)], tmp_path, env)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q", "--cache-dir", str(PIP_CACHE)]
    # --no-compile: the byte-compiling of PySpark's thousands of modules is CPU this test does not check
    pyspark_wheel, older = older_pyspark()
    run([*pip, "install", "--no-compile", str(pyspark_wheel)], tmp_path, env, timeout=600)
    run([*pip, "install", "--no-compile", f"{wheel}[spark]"], tmp_path, env, timeout=600)
    versions = run([str(venv / "bin" / "python"), "-c",
                    "import importlib.metadata as m, kcl_mp.spark.tables, deltalake, pyiceberg.catalog.sql\n"
                    "print(m.version('pyspark'), m.version('kcl-mp'))"], tmp_path, env).stdout.split()
    assert versions == [older, kcl_mp.__version__], versions

    # docs/spark.md's ten-line script, as written, on that PySpark: a landing area with a range
    # landed twice (a failover writer's) into a Delta table, every id once
    doc = (ROOT / "docs" / "spark.md").read_text()
    lines = doc[doc.index("A user script in ten lines"):].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("    "))
    end = next((i for i in range(start, len(lines)) if lines[i] and not lines[i].startswith("    ")), len(lines))
    code = [line[4:] for line in lines[start:end]]
    script = tmp_path / "landing_to_delta.py"
    script.write_text("\n".join(code).strip() + "\n")
    assert len(script.read_text().splitlines()) <= 10, script.read_text()
    storage, landing = Storage(str(tmp_path / "landing")), tmp_path / "landing"
    for base, shard in ((0, "shardId-000000000000"), (1000, "shardId-000000000001")):
        land(storage, "orders", shard, [((100 + n, 0), base + n) for n in range(50)], START, "w1")
        land(storage, "orders", shard, [((130 + n, 0), base + 30 + n) for n in range(20)], (129, 0), "w2")
    spark_env = job_env(str(venv / "bin" / "python"), drop=("PYTHONPATH",))
    table, checkpoint = tmp_path / "orders", tmp_path / "checkpoint"
    argv = [str(venv / "bin" / "python"), str(script), str(landing), str(table), str(checkpoint)]
    run(argv, tmp_path, spark_env, timeout=300)
    assert sorted(delta_ids(table)) == [*range(50), *range(1000, 1050)]

    # Again, with the last batch left pending (its commit removed, as a kill after the table's
    # commit leaves it) and more landed: PySpark 4.0's own availableNow would run the replay
    # alone and leave the new rows unread; the run replays (writing nothing twice), then reads them.
    commits = sorted((checkpoint / "commits").glob("[0-9]*"), key=lambda path: int(path.name))
    for name in (commits[-1].name, f".{commits[-1].name}.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    land(storage, "orders", "shardId-000000000000", [((200 + n, 0), 2000 + n) for n in range(10)], (149, 0), "w3")
    run(argv, tmp_path, spark_env, timeout=300)
    assert sorted(delta_ids(table)) == [*range(50), *range(1000, 1050), *range(2000, 2010)]

    # kclmp_kinesis on that PySpark (whose latestOffset has no start and no read limit): straight
    # from kinesis-mock into Delta, batches the source caps itself, availableNow through write_stream
    kinesis = boto3.client("kinesis", endpoint_url=kinesis_mock_url, region_name="us-east-1")
    create_streams(kinesis, {unique_name: 2})
    produce(kinesis, unique_name, 500, aggregated_share=0.1)
    direct = tmp_path / "kinesis_to_delta.py"
    direct.write_text(KINESIS_TO_DELTA)
    table, checkpoint, meta = tmp_path / "direct", tmp_path / "direct-checkpoint", tmp_path / "direct-meta"
    argv = [str(venv / "bin" / "python"), str(direct), unique_name, kinesis_mock_url, str(meta), str(table),
            str(checkpoint)]
    run(argv, tmp_path, {**spark_env, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"}, timeout=300)
    assert sorted(delta_ids(table)) == list(range(500))
    versions = len(DeltaTable(str(table)).history())
    assert versions >= 5, f"{versions} Delta versions: batches of at most 100 rows expected"
    produce(kinesis, unique_name, 50, first_id=500)
    run(argv, tmp_path, {**spark_env, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"}, timeout=300)
    assert sorted(delta_ids(table)) == list(range(550))


KINESIS_TO_DELTA = """import sys
from pyspark.sql import SparkSession
import kcl_mp.spark
from kcl_mp.spark.tables import Trigger, write_stream

stream, endpoint, meta, table, checkpoint = sys.argv[1:6]
spark = SparkSession.builder.appName("kinesis to delta").getOrCreate()
kcl_mp.spark.register(spark)
read = spark.readStream.format("kclmp_kinesis").option("streamName", stream).option("endpointUrl", endpoint)
events = (read.option("region", "us-east-1").option("initialPosition", "trim_horizon").option("metadataPath", meta)
          .option("maxRecordsPerTrigger", 100).option("availableNow", "true").load())
write_stream(events, "delta", table, checkpoint, Trigger(available_now=True)).awaitTermination()
"""


def delta_ids(table: Path) -> list[int]:
    return [json.loads(d)["id"] for d in DeltaTable(str(table)).to_pyarrow_table(columns=["data"]).column("data").to_pylist()]

# The README's commands. Everything runs from a local virtual environment in .venv.
PYTHON ?= python3
# Bytecode is cached (in .cache/pycache) even where the machine sets PYTHONDONTWRITEBYTECODE:
# every kcl-mp host and Python processor a test starts would otherwise compile kcl_mp again
# (about 0.2 s of CPU a start).
unexport PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX := $(CURDIR)/.cache/pycache
VENV := .venv
BIN := $(VENV)/bin
# One stamp per set of extras: `make demo` installs only what the demo uses (no PySpark).
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.demo-installed
SPARK_STAMP := $(VENV)/.spark-installed
# kinesis-mock (npm kinesis-local): split, merge and shard end, which moto lacks.
KINESIS_MOCK := tests/emulators/node_modules/kinesis-local/main.js
# The Node.js processor's published aws-kcl library.
NODE_PROCESSOR := kcl_mp/processors/nodejs/node_modules/aws-kcl/package.json
# The jars beside PySpark's for s3a:// paths (examples/spark/jars.pom.xml: 35 jars, 13 MB).
SPARK_JARS := .cache/spark-jars/.pinned

.PHONY: demo spark-demo spark-jars java-peers jdk mvn lint test test-java-versions unit integration e2e bench bench-scale bench-protocol bench-balance bench-faults bench-throughput bench-cost bench-spark-kinesis clean jq java

# uv installs into the venv: the same resolution as pip's, 35 s against pip's 82 s for the
# test extra here (downloads and unpacking side by side; PySpark alone is 400 MB).
UV_VERSION := 0.13.9
# Each install ends with a prune of uv's cache: this index serves PySpark's 456 MB sdist with no
# caching headers, so uv downloads and builds it again on every install, into a new cache revision
# of about 1.4 GB that nothing else removes (64 GB after a day of clean-clone runs here, and a full
# disk). The prune keeps what the newest install used.
INSTALL := $(BIN)/uv pip install --quiet --python $(BIN)/python
PRUNE := $(BIN)/uv cache prune --quiet

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# A file of its own, so a venv made before uv was used gets it too.
$(BIN)/uv: | $(BIN)/python
	$(BIN)/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

$(STAMP): pyproject.toml | $(BIN)/uv
	$(INSTALL) -e '.[test]' && $(PRUNE)
	touch $@

$(DEMO_STAMP): pyproject.toml | $(BIN)/uv
	$(INSTALL) -e '.[demo]' && $(PRUNE)
	touch $@

$(SPARK_STAMP): pyproject.toml | $(BIN)/uv
	$(INSTALL) -e '.[demo,sink,spark-local]' && $(PRUNE)
	touch $@

$(KINESIS_MOCK): tests/emulators/package.json tests/emulators/package-lock.json
	@command -v node >/dev/null && command -v npm >/dev/null || { echo "Node.js and npm are needed for the tests' kinesis-mock emulator" >&2; exit 1; }
	npm ci --prefix tests/emulators --no-audit --no-fund --loglevel=error
	touch $@

$(NODE_PROCESSOR): kcl_mp/processors/nodejs/package.json kcl_mp/processors/nodejs/package-lock.json
	npm ci --prefix kcl_mp/processors/nodejs --no-audit --no-fund --loglevel=error
	touch $@

# jq, for the POSIX shell processor (Debian's package; installed when running as root).
jq:
	@command -v jq >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing jq (Debian) for processors/shell"; apt-get update -qq && apt-get install -y -qq jq >/dev/null; \
	  else echo "jq is needed by processors/shell: apt-get install jq" >&2; exit 1; fi; }

# Java 17+, for PySpark's local mode in the pipeline's tests (Debian's package; installed when running as root).
# The targets that may run apt-get (jq, java, mvn, jdk) come one after another under `make -j`
# (apt holds one lock), and so do the two Maven builds (one ~/.m2): `make -j3 test` runs them
# beside pip's and npm's installs.
java: | jq
	@java -version >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Java 17 (Debian) for PySpark"; apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless >/dev/null; \
	  else echo "Java 17+ is needed by the Spark pipeline's tests: apt-get install openjdk-17-jre-headless" >&2; exit 1; fi; }

# Maven, for the Spark jars and the Java peers (Debian's package; installed when running as root).
mvn: | java
	@command -v mvn >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Maven (Debian) for the Spark jars and the Java peers"; apt-get update -qq && apt-get install -y -qq maven >/dev/null; \
	  else echo "Maven is needed for the Spark jars and the Java peers: apt-get install maven" >&2; exit 1; fi; }

## spark-jars: the pinned S3A jars into .cache/spark-jars (once; seconds with a warm ~/.m2, 13 MB)
spark-jars: $(SPARK_JARS)
$(SPARK_JARS): examples/spark/jars.pom.xml | mvn
	rm -rf $(@D)
	mvn -B -q -f examples/spark/jars.pom.xml dependency:copy-dependencies -DoutputDirectory=$(CURDIR)/$(@D)
	touch $@

# A JDK (javac), for the Java peers' sources (Debian's package; installed when running as root).
jdk: | mvn
	@command -v javac >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing the Java 17 JDK (Debian) for the Java peers"; apt-get update -qq && apt-get install -y -qq openjdk-17-jdk-headless >/dev/null; \
	  else echo "javac (JDK 17+) is needed for the Java peers: apt-get install openjdk-17-jdk-headless" >&2; exit 1; fi; }

# The Java programs the tests run beside kcl-mp, one Maven project each: tests/java/PEER/pom.xml
# pins what it resolves from Maven Central, and `mvn package` leaves its jar and lib/ (every
# dependency's jar) in .cache/java/PEER (kcl_mp.devtools.java_daemon.peer_classpath). Built once;
# again when a pom or a Java source changes (seconds with a warm ~/.m2).
JAVA_PEERS := $(patsubst tests/java/%/pom.xml,.cache/java/%/.pinned,$(wildcard tests/java/*/pom.xml))
## java-peers: the Java peers of the tests (tests/java/*/pom.xml) into .cache/java
java-peers: $(JAVA_PEERS)
.cache/java/%/.pinned: tests/java/%/pom.xml $(shell find tests/java -name '*.java') | mvn jdk $(SPARK_JARS)
	rm -rf $(@D)
	mvn -B -q -f tests/java/$*/pom.xml package
	touch $@

# A cluster's older PySpark, which tests/e2e/test_package.py installs before kcl-mp's spark extra:
# PyPI has only its 456 MB sdist, built into a wheel here once (about 40 s of download and zip,
# 22 s of CPU) rather than inside the tests' heavy phase on every fresh machine. `make test`
# builds it beside its first phase (among the installs it held up the main one: 44 s more).
OLDER_PYSPARK := 4.0.5
OLDER_PYSPARK_DIR := .cache/pyspark-wheels
OLDER_PYSPARK_WHEEL := $(OLDER_PYSPARK_DIR)/$(OLDER_PYSPARK).pinned
OLDER_PYSPARK_LOG := .cache/pyspark-wheels.log
BUILD_OLDER_PYSPARK := rm -rf $(OLDER_PYSPARK_DIR) && $(BIN)/python -m pip wheel --quiet --disable-pip-version-check \
	--no-deps --no-cache-dir -w $(OLDER_PYSPARK_DIR) pyspark==$(OLDER_PYSPARK) && touch $(OLDER_PYSPARK_WHEEL)
$(OLDER_PYSPARK_WHEEL): | $(BIN)/python
	$(BUILD_OLDER_PYSPARK)

install: $(STAMP) $(KINESIS_MOCK) $(NODE_PROCESSOR) jq java $(SPARK_JARS) $(JAVA_PEERS) $(OLDER_PYSPARK_WHEEL)

## spark-demo: the pipeline end to end on the embedded default: kcl-mp + the sink, the landing source into Delta, a query
spark-demo: $(SPARK_STAMP) java
	$(BIN)/python examples/spark/run_pipeline.py $(DEMO_ARGS)

## demo: the main job on the embedded local default (no AWS account)
demo: $(DEMO_STAMP)
	$(BIN)/python examples/demo/run_demo.py $(DEMO_ARGS)

## lint: ruff (pyflakes, pycodestyle, import order, bugbear, pyupgrade) and mypy (strict on the pure modules)
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

# `make test` in three phases, each run whatever came of the one before (one that selects no
# test, as `PYTEST_ARGS=tests/unit` leaves the heavy phase, passes): every test that asserts
# no wall-clock bound, PARALLEL at a time (most wait on emulators, lease timeouts and Java's lock,
# not on a core; the Java peers' and Spark's in groups, each group's one after another); then the
# `timing` tests, TIMING_PARALLEL at a time (those that keep a core busy in one group, so never
# two of them at once: tests/conftest.py); then the `heavy` ones (Spark jobs through kills,
# PySpark installed), HEAVY_PARALLEL at a time. Nothing runs beside the timing tests: nice holds
# no load back on these 2-core machines (a CPU burner at nice 19 measured as fast as a plain one
# beside it, in one session or each in its own), and Spark jobs and pip installs beside them at
# nice 19 once stalled a 64-lease host's renewals for 7 s. The heavy tests among the first
# phase's others took 2-4x as long (Spark's Python workers missed their connect-back and the
# jobs restarted), so they come last. JUNIT=DIR writes each phase's JUnit report there.
PARALLEL ?= 4
TIMING_PARALLEL ?= 3
HEAVY_PARALLEL ?= 2
PYTEST := $(BIN)/python -m pytest -q -p no:cacheprovider

## test: the lint, then every test (PARALLEL=4 at a time; then the timing tests, TIMING_PARALLEL=3 at a time; then the heavy ones, HEAVY_PARALLEL=2)
test: lint $(STAMP) $(KINESIS_MOCK) $(NODE_PROCESSOR) jq java $(SPARK_JARS) $(JAVA_PEERS)
	@failed=""; mkdir -p .cache; \
	{ [ -f $(OLDER_PYSPARK_WHEEL) ] || { $(BUILD_OLDER_PYSPARK); }; } > $(OLDER_PYSPARK_LOG) 2>&1 & older=$$!; \
	$(PYTEST) -m "not timing and not heavy" -n $(PARALLEL) --dist loadgroup $(if $(JUNIT),--junitxml=$(JUNIT)/parallel.xml) $(PYTEST_ARGS) || [ $$? -eq 5 ] || failed="$$failed first"; \
	wait $$older || { cat $(OLDER_PYSPARK_LOG) >&2; failed="$$failed older-pyspark-wheel"; }; \
	$(PYTEST) -m timing -n $(TIMING_PARALLEL) --dist loadgroup $(if $(JUNIT),--junitxml=$(JUNIT)/timing.xml) $(PYTEST_ARGS) || [ $$? -eq 5 ] || failed="$$failed timing"; \
	$(PYTEST) -m heavy -n $(HEAVY_PARALLEL) --dist loadgroup $(if $(JUNIT),--junitxml=$(JUNIT)/heavy.xml) $(PYTEST_ARGS) || [ $$? -eq 5 ] || failed="$$failed heavy"; \
	if [ -n "$$failed" ]; then echo "make test: failed in phase(s):$$failed" >&2; exit 1; fi

## test-java-versions: the Java fleet acceptance runs (the 3.x fleet, the mixed fleet) on every Java KCL core the peers carry (3.1.3 and 3.5.1), one at a time
test-java-versions: $(STAMP) java $(JAVA_PEERS)
	KCLMP_TEST_KCL_VERSIONS=3.1.3,3.5.1 $(PYTEST) tests/e2e/test_kcl3_acceptance.py tests/e2e/test_mixed_fleet.py $(PYTEST_ARGS)

unit: lint $(STAMP)
	$(BIN)/python -m pytest -q tests/unit $(PYTEST_ARGS)

integration: $(STAMP) $(KINESIS_MOCK) $(NODE_PROCESSOR) jq java $(SPARK_JARS)
	$(BIN)/python -m pytest -q tests/integration $(PYTEST_ARGS)

e2e: $(STAMP) $(KINESIS_MOCK) $(NODE_PROCESSOR) jq java $(SPARK_JARS) $(JAVA_PEERS) $(OLDER_PYSPARK_WHEEL)
	$(BIN)/python -m pytest -q tests/e2e $(PYTEST_ARGS)

BENCH_STAMP := $(VENV)/.bench-installed
$(BENCH_STAMP): $(STAMP) pyproject.toml | $(BIN)/uv
	$(INSTALL) -e '.[test,bench]' && $(PRUNE)
	touch $@

## bench: kcl-mp beside the Java MultiLangDaemon (same emulator, stream, processor), then the protocol path alone
bench: $(BENCH_STAMP)
	@command -v java >/dev/null || { echo "bench: Java 17+ is needed for the Java daemon (Debian: openjdk-17-jre-headless)" >&2; exit 1; }
	$(BIN)/python bench/daemons.py $(BENCH_ARGS)
	$(BIN)/python bench/protocol_path.py

## bench-scale: one host at 4, 16, 64 and 256 shards beside the Java daemon (to 64): memory, CPU idle and under load, renewal gaps, first records
bench-scale: $(BENCH_STAMP)
	@command -v java >/dev/null || { echo "bench-scale: Java 17+ is needed for the Java daemon (Debian: openjdk-17-jre-headless)" >&2; exit 1; }
	$(BIN)/python bench/scale.py $(BENCH_ARGS)

## bench-protocol: the shard worker's protocol path alone, records/s per core at 100 B, 1 KB, 10 KB
bench-protocol: $(STAMP)
	$(BIN)/python bench/protocol_path.py

## bench-throughput: one host's ceiling on an in-memory Kinesis (devtools/fast_kinesis), kcl-mp beside the Java daemon, 16 and 64 shards
bench-throughput: $(BENCH_STAMP)
	@command -v java >/dev/null || { echo "bench-throughput: Java 17+ is needed for the Java daemon (Debian: openjdk-17-jre-headless)" >&2; exit 1; }
	$(BIN)/python bench/throughput.py $(BENCH_ARGS)

## bench-cost: three hosts of 0.3 core (cgroups), shards of unequal cost: kcl-mp COST_BASED, counting, its default rule, Java 3.x, a Java leader
bench-cost: $(BENCH_STAMP)
	@command -v java >/dev/null || { echo "bench-cost: Java 17+ is needed for the Java daemon (Debian: openjdk-17-jre-headless)" >&2; exit 1; }
	$(BIN)/python bench/cost_fleet.py $(BENCH_ARGS)

## bench-spark-kinesis: the kclmp_kinesis source's acceptance figures: throughput on fast_kinesis (local[1], local[2]), where read() spends its time, latency at a 1 s trigger on moto, planning 1,000 idle shards at 20 ms a call (BENCH_ARGS: one of them and its options)
bench-spark-kinesis: $(BENCH_STAMP)
	@command -v java >/dev/null || { echo "bench-spark-kinesis: Java 17+ is needed for Spark's local mode (Debian: openjdk-17-jre-headless)" >&2; exit 1; }
	$(BIN)/python bench/spark_kinesis.py $(or $(BENCH_ARGS),all)

## bench-balance: take intervals to balance after a cold start, a join and a crash, kcl-mp vs the Java rule
bench-balance: $(STAMP)
	$(BIN)/python bench/balance_sim.py $(BENCH_ARGS)

## bench-faults: the fault run (kills, a pause past failover, throttling, a split and a merge) for seeds 1-3, and its figures
bench-faults: $(STAMP)
	$(BIN)/python bench/faults.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info tests/emulators/node_modules kcl_mp/processors/nodejs/node_modules

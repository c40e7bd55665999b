# The two commands of the README. Each creates (or reuses) .venv from pyproject.toml.
# `make docs` serves the documentation site locally.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast docs lint bench setup twins jvm clean

# The compiled twins (setup.py, */_compiled/*.pyx) are built by the editable install:
# a changed .pyx reinstalls, which rebuilds them.
TWIN_SOURCES := $(wildcard storage/_compiled/*.pyx storage/*/_compiled/*.pyx)

$(STAMP): pyproject.toml setup.py $(TWIN_SOURCES)
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -e ".[test]"
	touch $(STAMP)

setup: $(STAMP)

# Rebuild the compiled twins in place without reinstalling anything (a worktree run with
# PYTHONPATH, or after editing a .pyx): the editable build runs in pip's isolated build
# environment, and its install lands in a scratch prefix under build/ (--ignore-installed: the
# environment's own editable rayqueue, another checkout's, is left installed). PY picks the Python.
PY ?= $(VENV)/bin/python
twins:
	$(PY) -m pip install --quiet --no-deps --ignore-installed -e . --prefix build/twins-prefix

# The JVM pieces (Kafka's clients, tools, broker, Streams, Connect; Spark's Kafka connector) at the
# versions pinned in tests/jvm/pins.toml, resolved by Maven into ~/.m2 (classpaths in build/jvm/).
jvm:
	$(PYTHON) -m tests.jvm.maven

demo: $(STAMP)
	$(VENV)/bin/python scripts/demo.py

# The JVM pieces first (cached: quick once resolved). Without java/mvn the JVM tests skip with the
# reason; under CI (CI set, as .ci/run sets it) a failure to fetch them fails the run here.
test: $(STAMP)
	$(VENV)/bin/python -m ruff check rayqueue actors storage scripts tests
	$(VENV)/bin/python -m ruff format --check rayqueue actors storage scripts tests
	$(MAKE) --no-print-directory jvm PYTHON=$(VENV)/bin/python || test -z "$$CI"
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/python -m mkdocs build --strict --quiet
	$(VENV)/bin/python -m pytest

# The documentation site (mkdocs.yml, docs/) on http://127.0.0.1:8000, rebuilt as pages change.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/python -m mkdocs serve --dev-addr 127.0.0.1:8000

test-fast: $(STAMP)
	$(VENV)/bin/python -m pytest -m "not spark and not chaos and not multinode"

bench: $(STAMP)
	$(VENV)/bin/python scripts/bench_storage.py
	$(VENV)/bin/python scripts/bench_produce_fetch.py
	$(VENV)/bin/python scripts/bench_cleaner.py
	$(VENV)/bin/python scripts/bench_replication.py
	$(VENV)/bin/python scripts/bench_placement.py
	$(VENV)/bin/python scripts/bench_transactions.py
	$(VENV)/bin/python scripts/bench_gateway.py
	$(VENV)/bin/python scripts/bench_gateway_groups.py
	$(VENV)/bin/python scripts/bench_security.py
	$(VENV)/bin/python scripts/bench_metrics.py
	$(VENV)/bin/python scripts/bench_iceberg.py
	$(VENV)/bin/python scripts/bench_iceberg_commits.py
	$(VENV)/bin/python scripts/bench_vs_kafka.py
	$(VENV)/bin/python scripts/bench_rebalance.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info
	rm -f storage/_compiled/*.c storage/_compiled/*.so rayqueue/*/_compiled/*.c rayqueue/*/_compiled/*.so

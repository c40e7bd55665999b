# The two commands of the README. Each creates (or reuses) .venv from pyproject.toml.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint bench setup clean

$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -e ".[test]"
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/python scripts/demo.py

test: $(STAMP)
	$(VENV)/bin/python -m ruff check rayqueue actors storage scripts tests
	$(VENV)/bin/python -m ruff format --check rayqueue actors storage scripts tests
	$(VENV)/bin/python -m pytest

test-fast: $(STAMP)
	$(VENV)/bin/python -m pytest -m "not spark and not chaos and not multinode"

bench: $(STAMP)
	$(VENV)/bin/python scripts/bench_storage.py
	$(VENV)/bin/python scripts/bench_produce_fetch.py
	$(VENV)/bin/python scripts/bench_replication.py
	$(VENV)/bin/python scripts/bench_transactions.py
	$(VENV)/bin/python scripts/bench_gateway.py
	$(VENV)/bin/python scripts/bench_gateway_groups.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info

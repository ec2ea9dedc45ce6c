# Every target bootstraps what it needs on a fresh machine (python3 with venv is all it assumes).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install test lint typecheck unit run bench schema clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

lint: install
	$(BIN)/ruff check server tests bench
	$(BIN)/ruff format --check server tests bench

typecheck: install
	$(BIN)/mypy

unit: install
	$(BIN)/pytest -q

test: lint typecheck unit

run: install
	$(BIN)/python -m tether demo

bench: install
	$(BIN)/python bench/rpc_bench.py

schema: install
	$(BIN)/python -m tether schema > docs/protocol.schema.json

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

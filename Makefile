# gpusched — every target creates and uses the virtualenv at .venv.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: venv demo test lint typecheck bench parity gpustack-server clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
	@touch $(STAMP)

venv: $(STAMP)

## demo: the main job end to end on embedded defaults
demo: $(STAMP)
	$(PY) -m tasks.edges.demo

## test: lint, type-check the core, run the whole suite
test: $(STAMP) lint typecheck
	$(PY) -m pytest

lint: $(STAMP)
	$(PY) -m ruff check .

typecheck: $(STAMP)
	$(PY) -m mypy scheduler_core tasks

bench: $(STAMP)
	$(PY) bench/bench_schedule.py
	$(PY) bench/bench_service.py

## parity: decide generated requests (and examples/) with gpusched and with GPUStack's own code
## (tools/gpustack-oracle, in its own virtualenv at .oracle-venv, built when missing)
ORACLE_VENV ?= $(CURDIR)/.oracle-venv
PARITY_ARGS ?= --seeds 1 2 --count 2500

parity: $(STAMP)
	ORACLE_VENV=$(ORACLE_VENV) bash tools/gpustack-oracle/setup.sh
	ORACLE_VENV=$(ORACLE_VENV) $(PY) -m tests.parity.run $(PARITY_ARGS)

## gpustack-server: GPUStack 2.2.3 from PyPI and the gpusched plugin in .gpustack-venv (the bridge tests
## run GPUStack's own server from it; they also need Debian's postgresql)
GPUSTACK_VENV ?= $(CURDIR)/.gpustack-venv

gpustack-server:
	GPUSTACK_VENV=$(GPUSTACK_VENV) bash tools/gpustack-server/setup.sh

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis

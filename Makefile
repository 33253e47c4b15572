# gpusched — every target creates and uses the virtualenv at .venv.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: venv demo test lint typecheck sglang-oracle bench parity clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
	@touch $(STAMP)

venv: $(STAMP)

## demo: the main job end to end on embedded defaults
demo: $(STAMP)
	$(PY) -m tasks.edges.demo

## test: lint, type-check the core, unpack SGLang's sources for the precise oracle, run the whole suite
test: $(STAMP) lint typecheck sglang-oracle
	$(PY) -m pytest

## sglang-oracle: SGLang 0.5.16's sources from its PyPI wheel, outside the tree (~/.cache/sglang-oracle);
## without them tests/precise_oracle skip locally and fail under CI=1
sglang-oracle: $(STAMP)
	PYTHON=$(PY) bash tools/sglang-oracle/setup.sh || echo "sglang-oracle: not unpacked; tests/precise_oracle will skip (CI fails them)"

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

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis

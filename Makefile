# gpusched — every target creates and uses the virtualenv at .venv.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: venv demo test test-fast prereqs lint typecheck sglang-oracle bench bench-console parity gpustack-server clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
	@touch $(STAMP)

venv: $(STAMP)

## demo: the main job end to end on embedded defaults
demo: $(STAMP)
	$(PY) -m tasks.edges.demo

## test: install what the suite needs (tools/test-prereqs.sh: Debian's redis-server, redis-sentinel,
## postgresql, chromium and prometheus's promtool when this user may install, then the per-tool setup
## scripts), lint, type-check, run the whole suite in TEST_WORKERS processes (pytest-xdist; the tests
## that share GPUStack's servers run in one of them: tests/conftest.py). When every prerequisite is there the suite runs
## with CI=1: a test whose tool is missing fails instead of skipping.
PYTEST_ARGS ?=
TEST_WORKERS ?= 3
test: $(STAMP) lint typecheck
	@bash tools/test-prereqs.sh; status=$$?; \
	if [ $$status -eq 0 ]; then CI=1 $(PY) -m pytest -n $(TEST_WORKERS) $(PYTEST_ARGS); \
	elif [ $$status -eq 10 ]; then $(PY) -m pytest -n $(TEST_WORKERS) $(PYTEST_ARGS); \
	else exit $$status; fi

## test-fast: the inner loop: lint and every test that needs no server or browser (no Redis, no workers)
test-fast: $(STAMP) lint
	$(PY) -m pytest -m "not service and not slow and not parity" -x $(PYTEST_ARGS)

## prereqs: only install what the suite needs (as make test does first)
prereqs:
	bash tools/test-prereqs.sh

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
	$(PY) bench/bench_console.py

## bench-console: the console's cluster map at 2,000 x 8 (server side; the browser too when chromium is there)
bench-console: $(STAMP)
	$(PY) bench/bench_console.py

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

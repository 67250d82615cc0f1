# ctgscore: `make demo` runs the main job on the embedded default; `make test` runs the tests.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.ctgscore-installed

export HF_HUB_OFFLINE := 1
export HF_HUB_DISABLE_PROGRESS_BARS := 1
export RAY_USAGE_STATS_ENABLED := 0
export TOKENIZERS_PARALLELISM := false
# UTF-8 file names and text in any locale (LC_ALL=C PYTHONUTF8=0, Latin-1): the tests need it (tests/conftest.py)
export PYTHONUTF8 := 1

.PHONY: install demo test test-quick test-integration test-system lint bench gpu-wheels gpu-check gpu-sweep gpu-rehearsal clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -e '.[test]'
	bash scripts/install_browser.sh
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m ctgscore.demo

# tiers (tests/conftest.py): unit (the quick loop), integration, system; the 15 slowest tests at the end.
# TEST_WORKERS processes (pytest-xdist), a module's tests in one of them, one Ray for all: a serial
# run leaves a third of two cores idle (jobs wait on Ray, servers, subprocesses). TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile
test: $(STAMP)
	$(PYTEST) --durations=15

test-quick: $(STAMP)
	$(PYTEST) -m unit --durations=10

test-integration: $(STAMP)
	$(PYTEST) -m integration --durations=15

test-system: $(STAMP)
	$(PYTEST) -m system --durations=15

lint: $(STAMP)
	$(VENV)/bin/ruff check .

bench: $(STAMP)
	$(PY) -m benchmarks.run_all

# On the GPU machine, from the repository root, nothing installed (PYTHONPATH=. is set here):
#   make gpu-check PY=python3 OUT=$$OUT   first: the four bf16 core cases at steady state (runs of >= 5 s,
#                                         median of 5, held-out rows) with kernel breakdowns, the GEMM ceiling,
#                                         the A/B of engine variants (recommended defaults), pytest -m gpu, end to
#                                         end; all within GPU_CHECK_SECONDS (480), lower-priority variants and extras
#                                         skipped when time runs out; summary.md is where the README's numbers come from
#   make gpu-sweep PY=python3 SWEEP_OUT=$$OUT   second, its own limit GPU_SWEEP_SECONDS (420): token budget
#                                         32k/64k/128k x cross-batch on/off x compile on/off, peak memory; writes what finished
# Dry runs on a CPU: GPU_CHECK_FLAGS="--device cpu --tiny" / GPU_SWEEP_FLAGS="--device cpu --tiny".
# Before going to the GPU machine, here: `make gpu-wheels` (the wheels of benchmarks/gpu_wheels.txt into .whl/,
# about 15 MB); carry .whl and both targets install them there into $(GPU_SITE) before they run.
WHEELS ?= .whl
GPU_SITE ?= /tmp/ctgscore-site
gpu-wheels: $(STAMP)
	rm -rf $(WHEELS) && $(PY) -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	  --platform manylinux_2_28_x86_64 -d $(WHEELS) -r benchmarks/gpu_wheels.txt
GPU_ENV = if [ -d $(WHEELS) ]; then "$(PY)" -m pip install -q --no-index --no-deps --no-compile --upgrade --target $(GPU_SITE) $(WHEELS)/*.whl || exit 1; fi; \
	PYTHONPATH="$(CURDIR)$$([ -d $(WHEELS) ] && echo :$(GPU_SITE))$${PYTHONPATH:+:$$PYTHONPATH}"
OUT ?= out/gpu-check
GPU_CHECK_SECONDS ?= 480
GPU_CHECK_FLAGS ?=
gpu-check:
	$(GPU_ENV) "$(PY)" -m benchmarks.gpu_check --out "$(OUT)" --time-limit $(GPU_CHECK_SECONDS) $(GPU_CHECK_FLAGS)

SWEEP_OUT ?= out/gpu-sweep
GPU_SWEEP_SECONDS ?= 420
GPU_SWEEP_FLAGS ?=
gpu-sweep:
	$(GPU_ENV) "$(PY)" -m benchmarks.gpu_sweep --out "$(SWEEP_OUT)" --time-limit $(GPU_SWEEP_SECONDS) $(GPU_SWEEP_FLAGS)

# Before a lease, on a CPU with a registry: a copy of the GPU machines' image (Python 3.12, torch 2.11,
# transformers 5.17, no Ray: benchmarks/gpu_image.txt) in a venv outside the repository, then gpu-check and
# gpu-sweep in their dry modes, the engines' compiled layers and the engine tests there (about 2 GB to
# download the first time; never part of `make test`). REHEARSAL_DIR, PY312, REHEARSAL_COMPILE: see the script.
gpu-rehearsal:
	bash scripts/gpu_rehearsal.sh

clean:
	rm -rf out .cache

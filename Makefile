# Every target sets up what it needs itself: on a fresh machine `make serve` and
# `make test` are the only two commands a newcomer has to know.
.DEFAULT_GOAL := help
SHELL := /bin/bash

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Marker touched after a complete install; reinstall when the requirements change.
INSTALLED := $(VENV)/.installed
PIP := $(BIN)/python -m pip --disable-pip-version-check

export NO_MKDOCS_2_WARNING := 1

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-10s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(INSTALLED): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 10), "Python 3.10+ is required"'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# torch first and on its own, pinned: anything that depends on it must find it
	# installed, or pip pulls the newest CUDA build (gigabytes) from the registry.
	$(PIP) install -q -c constraints.txt torch
	$(PIP) install -q -c constraints.txt -e ".[dev]"
	touch $@

.PHONY: install
install: $(INSTALLED) ## Create .venv and install the package with every pinned dependency

.PHONY: browser
browser: ## Install Debian's chromium for the browser tests if it is missing
	@bash scripts/ensure_chromium.sh

.PHONY: test
test: $(INSTALLED) browser ## Run the whole suite: unit, doctests, docs snippets, tutorials, strict build, browser
	$(BIN)/python -m pytest

.PHONY: docs
docs: $(INSTALLED) ## Build the site into site/ (strict: any warning fails)
	$(BIN)/mkdocs build --strict --site-dir site

# The notebook cache speeds up live reloads. It only keys on each notebook's text, so
# the directory is keyed on the package's source: change the package, get fresh outputs.
.PHONY: serve
serve: $(INSTALLED) ## Build and serve the site with live reload at http://127.0.0.1:8000
	ATTENTION_NOTEBOOK_CACHE=true \
	ATTENTION_NOTEBOOK_CACHE_DIR=.cache/mkdocs-jupyter/$$(cat attention/*.py | sha256sum | cut -c1-16) \
	$(BIN)/mkdocs serve --dev-addr 127.0.0.1:8000

.PHONY: lint
lint: $(INSTALLED) ## ruff (lint and format check) on everything, mypy --strict on attention/
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

.PHONY: format
format: $(INSTALLED) ## Apply ruff's formatting and safe fixes
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

.PHONY: lock
lock: ## Re-resolve constraints.txt from pyproject.toml in a throwaway venv (torch stays 2.13.0)
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install -q torch==2.13.0
	.lock-venv/bin/pip install -q -e ".[dev]"
	.lock-venv/bin/pip freeze --exclude-editable | sed 's/+cpu$$//' > constraints.txt
	rm -rf .lock-venv

.PHONY: clean
clean: ## Remove the venv, the built site, caches and test artefacts
	rm -rf $(VENV) site build .cache .pytest_cache .mypy_cache .ruff_cache *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

# Every target sets up what it needs itself: on a fresh machine `make serve` and
# `make test` are the only two commands a newcomer has to know.
.DEFAULT_GOAL := help
SHELL := /bin/bash

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Marker touched after a complete install; reinstall when the requirements change.
INSTALLED := $(VENV)/.installed
# The same for the Node tools of the tests (axe-core), pinned in package-lock.json.
NODE_INSTALLED := node_modules/.installed
PIP := $(BIN)/python -m pip --disable-pip-version-check

export NO_MKDOCS_2_WARNING := 1

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-15s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# The package, and the site's build and the benchmark as distributions of their own (never
# published; the reader's wheel holds the package alone), all three editable.
EDITABLES := -e ".[dev]" -e ./docs_build -e ./benchmarks

# The lock's lines in two halves, one for each of the two pips below; torch's left out:
# the first pip names it beside its half, so that the largest wheel is not left to chance.
LOCK_HALF = grep -v -e '^\#' -e '^torch==' constraints.txt | awk 'NR % 2 == $(1)'

$(INSTALLED): pyproject.toml setup.py docs_build/pyproject.toml benchmarks/pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 10), "Python 3.10+ is required"'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# Every distribution at the version constraints.txt locks, taken as locked (--no-deps:
	# `make lock` resolved them), by two pips side by side: a pip finds, unpacks and
	# byte-compiles on one core, and one pip alone left the other core idle for a minute.
	$(call LOCK_HALF,1) > $(VENV)/lock-1.txt
	$(call LOCK_HALF,0) > $(VENV)/lock-2.txt
	$(PIP) install -q --no-deps -c constraints.txt torch -r $(VENV)/lock-1.txt & first=$$!; \
	$(PIP) install -q --no-deps -r $(VENV)/lock-2.txt $(EDITABLES); second=$$?; \
	wait $$first && [ $$second -eq 0 ] || { echo "could not install the pinned dependencies: pip needs PyPI, or a wheel folder it is configured for (pip config list)" >&2; exit 1; }
	# Then torch's own requirements, resolved: the lock holds them for the CPU build it
	# was made with, but a CUDA build (PyPI's default) also needs its CUDA libraries.
	$(PIP) install -q -c constraints.txt torch || { echo "could not install torch 2.13.0's requirements: pip needs PyPI (see the error above)" >&2; exit 1; }
	$(PIP) check || { echo "the installed distributions do not meet the project's requirements: constraints.txt is older than a pyproject.toml (run make lock)" >&2; exit 1; }
	touch $@

.PHONY: install
install: $(INSTALLED) ## Create .venv and install the package with every pinned dependency

.PHONY: browser
browser: ## Install Debian's chromium for the browser tests if it is missing
	@bash scripts/ensure_chromium.sh

$(NODE_INSTALLED): package.json package-lock.json
	@command -v npm >/dev/null || { echo "npm is missing: install Node.js (Debian: apt-get install nodejs npm)" >&2; exit 1; }
	npm ci --no-audit --no-fund || { echo "npm ci failed: the tests' Node tools (axe-core) need the npm registry" >&2; exit 1; }
	touch $@

.PHONY: test
test: $(INSTALLED) $(NODE_INSTALLED) browser ## Run the whole suite: unit, doctests, docs snippets, tutorials, strict build, browser
	$(BIN)/python -m pytest -n 2 --durations=15

# The browser's full-page screenshot of every page, for a human to look through; the
# suite itself takes none (they were half the time of its page-by-page browser check).
.PHONY: screenshots
screenshots: $(INSTALLED) $(NODE_INSTALLED) browser ## Build the site and screenshot every page into build/screenshots/
	ATTENTION_SCREENSHOTS=1 $(BIN)/python -m pytest tests/docs/test_browser.py -k renders_offline

.PHONY: docs
docs: $(INSTALLED) ## Build the site into site/ (strict: any warning fails)
	$(BIN)/mkdocs build --strict --site-dir site

# Lighthouse lives in its own npm project so that `make test` never installs it.
AUDIT_INSTALLED := scripts/audit/node_modules/.installed
$(AUDIT_INSTALLED): scripts/audit/package.json scripts/audit/package-lock.json
	@command -v npm >/dev/null || { echo "npm is missing: install Node.js (Debian: apt-get install nodejs npm)" >&2; exit 1; }
	npm ci --prefix scripts/audit --no-audit --no-fund
	touch $@

# Not part of `make test`, which never asserts on a clock: Lighthouse's performance is a
# measurement of time (it moves by several points from run to run on a shared machine).
# Run on an idle machine, it fails when a page scores below 90 (scripts/audit.py).
.PHONY: audit
audit: docs $(AUDIT_INSTALLED) browser ## Lighthouse (mobile) on one page of each kind and the heaviest; fails below 90 performance
	$(BIN)/python scripts/audit.py --site site --out build/audit

# The notebook cache (.cache/notebooks) keeps live reloads fast: a tutorial is
# re-executed only when it, the package or the build's figure code changes
# (docs_build/tutorials.py keys each run on a hash of what it depends on).
.PHONY: serve
serve: $(INSTALLED) ## Build and serve the site with live reload at http://127.0.0.1:8000
	$(BIN)/mkdocs serve --dev-addr 127.0.0.1:8000

# The build's first step on its own: execute the tutorials whose cached run is missing
# or stale (two kernels at a time on two cores). `make docs` then only renders them.
.PHONY: tutorials
tutorials: $(INSTALLED) ## Execute the tutorials into the notebook cache (.cache/notebooks)
	$(BIN)/python -m docs_build.tutorials

# Full run on an idle machine (other processes on the cores distort every time):
# all implementations, n = 256 ... 8192, about 16-17 minutes on two cores; then the
# sequence-parallel section (ring, all-gather, Ulysses on 2 and 4 processes), about 2.
.PHONY: bench
bench: $(INSTALLED) ## Benchmark attention (about 17-19 min) into benchmarks/results/latest.json
	$(BIN)/python -m attention_bench --out benchmarks/results/latest.json \
		--plot build/bench/latest.png

# The sequence-parallel section alone, merged into the committed results: the
# implementations' numbers in the file stay as they are.
.PHONY: bench-parallel
bench-parallel: $(INSTALLED) ## Re-measure only the sequence-parallel section of latest.json (about 2 min)
	$(BIN)/python -m attention_bench --only sequence-parallel --merge \
		--out benchmarks/results/latest.json

.PHONY: bench-quick
bench-quick: $(INSTALLED) ## A short smoke run of the benchmark into build/bench/quick.json
	$(BIN)/python -m attention_bench --quick --out build/bench/quick.json \
		--plot build/bench/quick.png

.PHONY: lint
lint: $(INSTALLED) ## ruff, mypy --strict on attention/, and a supply-chain audit of the workflows
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/zizmor --offline .github/workflows/

# What the release workflow runs before it publishes; dist/ is emptied first, so an older
# version is never left beside the new one.
.PHONY: dist
dist: $(INSTALLED) ## Build the sdist and the wheel (from the sdist) into dist/ and run a release's checks
	$(BIN)/python -m docs_build.dist --outdir dist

# The suite's test of a reader's install, alone: build the site, serve it, install its
# wheel with the line the site shows into a fresh venv outside the clone, run the site's
# code there. RELEASE_DIST=dist also checks that the site's wheel is the one in dist/.
.PHONY: reader-test
reader-test: $(INSTALLED) ## Install the site's wheel as a reader would and run the site's code with it
	ATTENTION_RELEASE_DIST="$(RELEASE_DIST)" $(BIN)/python -m pytest tests/docs/test_reader_install.py

.PHONY: format
format: $(INSTALLED) ## Apply ruff's formatting and safe fixes
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

.PHONY: lock
lock: ## Re-resolve constraints.txt from pyproject.toml in a throwaway venv (torch stays 2.13.0)
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install -q torch==2.13.0
	.lock-venv/bin/pip install -q $(EDITABLES)
	{ echo "# Exact versions the project is built and tested with. Generated by 'make lock';"; \
	  echo "# torch is the 2.13.0 CPU build (pip matches 2.13.0 to 2.13.0+cpu)."; \
	  .lock-venv/bin/pip freeze --all --exclude-editable | grep -v '^pip==' | sed 's/+cpu$$//'; } > constraints.txt
	rm -rf .lock-venv

.PHONY: clean
clean: ## Remove the venv, the built site, caches and test artefacts
	rm -rf $(VENV) node_modules scripts/audit/node_modules site build dist .cache .pytest_cache .mypy_cache .ruff_cache
	find . -name '*.egg-info' -type d -prune -exec rm -rf {} +
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

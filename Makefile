# `make run` and `make test` set everything up on a fresh clone; see README.md.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat requirements.lock pyproject.toml clients/mcp/pyproject.toml | sha256sum | cut -c1-12)
EMBEDDED := $(PY) -m bailinghub.embedded exec --
export DEBUG ?= true
export OMP_NUM_THREADS ?= 1
# The suite runs on this many pytest-xdist workers, each test file on one of them (its module
# fixtures set up once); 0 runs it in one process. Three on two cores: many tests wait (on a worker,
# a browser, a stopped database), and at two the cores stood idle a quarter of the run (the whole
# suite 965 s at 2 workers, 852 s at 3, the cores idle 24 % and 14 %).
PYTEST_WORKERS ?= 3

.PHONY: run test install browser lint bench-ingest services-up services-down clean

install: $(STAMP)

$(STAMP): requirements.lock pyproject.toml clients/mcp/pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements.lock
	$(VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps -e clients/mcp
	rm -f $(VENV)/.installed-* && touch $@

run: install
	$(EMBEDDED) $(PY) manage.py devserver

# Browser tests drive Debian's Chromium through Playwright (`playwright install` cannot download
# browsers here): install the package when it is missing and we are root, else say what is needed.
browser:
	@command -v chromium >/dev/null 2>&1 || test -n "$$BAILING_CHROMIUM" || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's chromium for the browser tests"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else \
	    echo "The browser tests need Debian's 'chromium' package (or BAILING_CHROMIUM=/path/to/chromium):"; \
	    echo "  sudo apt-get install chromium"; exit 1; \
	  fi; }

test: install browser
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(EMBEDDED) $(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# mypy reads its settings (plugins, files, the strict apps) from pyproject.toml.
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

services-up: install
	$(PY) -m bailinghub.embedded up

services-down: install
	$(PY) -m bailinghub.embedded down

clean: services-down
	rm -rf var

# knowledge: ingestion benchmark (bench/ingest.py --help for corpora, embedders and subsets)
bench-ingest: install
	$(EMBEDDED) $(PY) bench/ingest.py $(BENCH_ARGS)

# ledger: turns benchmark against a running server (bench/turns.py --help)
bench-turns: install
	$(EMBEDDED) $(PY) bench/turns.py $(BENCH_ARGS)

# runtime: agent knowledge benchmark, search and read latencies (bench/knowledge_agent.py --help)
bench-knowledge-agent: install
	$(EMBEDDED) $(PY) bench/knowledge_agent.py $(BENCH_ARGS)

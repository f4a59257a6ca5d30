# One entry point for users and CI. Every target installs what it needs first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# import-linter lives apart: it pulls in rich, which structlog would then load into every
# sidecar run from .venv (3.7 MiB more, and start-up took 1.28 times as long).
LINT_VENV := .venv-lint
LINT_STAMP := $(LINT_VENV)/.installed
NODE ?= node
NPM ?= npm

# A .venv whose Python is older than 3.11, or gone (the interpreter that made it was removed
# or upgraded away), cannot run anything: say so and build it again.
VENV_BROKEN := $(shell test -d $(VENV) && ! $(BIN)/python -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1 && echo yes)
ifeq ($(VENV_BROKEN),yes)
$(info $(VENV) was made by a Python older than 3.11, or its Python is gone: rebuilding it with $(PYTHON))
$(shell rm -rf $(VENV))
endif

.PHONY: install test lint generate demo bench fuzz node-test redis-server clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

$(LINT_STAMP):
	test -d $(LINT_VENV) || $(PYTHON) -m venv $(LINT_VENV)
	$(LINT_VENV)/bin/pip install --quiet import-linter==2.17
	touch $(LINT_STAMP)

generate: install
	rm -rf generated/cleveragents/toolruntime
	mkdir -p generated
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m grpc_tools.protoc -Iprotos \
		--python_out=generated --grpc_python_out=generated \
		--mypy_out=generated --mypy_grpc_out=generated \
		$$(cd protos && find cleveragents -name '*.proto' | sort)
	touch generated/cleveragents/toolruntime/v1/py.typed  # typed for PEP 561, like the rest

lint: install $(LINT_STAMP)
	$(BIN)/ruff check server client tests bench examples fuzz
	$(BIN)/ruff format --check server client tests bench examples fuzz
	$(BIN)/mypy
	PYTHONPATH=server:client:generated $(LINT_VENV)/bin/lint-imports --no-cache
	cd protos && ../$(BIN)/buf lint

test: lint node-test redis-server
	$(BIN)/python -m pytest

# The Redis run store's tests (and make bench) start Debian's redis-server (7.0+): installed
# here when missing and apt-get can (as root), else named.
REDIS_SERVER ?= redis-server
REDIS_INSTALL ?= apt-get install -y --no-install-recommends redis-server
redis-server:
	@command -v $(REDIS_SERVER) >/dev/null || { test "$$(id -u)" = 0 && command -v apt-get >/dev/null && $(REDIS_INSTALL) >/dev/null; } || { echo "make test and make bench need redis-server 7+ for the Redis run store's tests: install it (Debian: apt-get install redis-server)" >&2; exit 1; }

# The Node.js client's tests start a real sidecar from .venv, hence the install.
node-test: install
	@command -v $(NODE) >/dev/null && command -v $(NPM) >/dev/null || { echo "make node-test (part of make test) needs Node.js 18+ and npm for the Node.js client's tests: install them (Debian: apt-get install nodejs npm), or run make lint and $(BIN)/python -m pytest for the Python part alone" >&2; exit 1; }
	cd client/node && npm ci --no-audit --no-fund --ignore-scripts && npm test

demo: install
	$(BIN)/python examples/demo.py

bench: install redis-server
	$(BIN)/python bench/run.py

fuzz: install
	$(BIN)/pip install --quiet atheris
	$(BIN)/python fuzz/fuzz_requests.py -max_total_time=$${FUZZ_SECONDS:-60}

clean:
	rm -rf $(VENV) .venv-lint .mypy_cache .pytest_cache .ruff_cache client/node/node_modules

# One entry point for users and CI. Every target installs what it needs first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# import-linter lives apart: it pulls in rich, which structlog would then load into every
# sidecar run from .venv (3.7 MiB more, and start-up took 1.28 times as long).
LINT_VENV := .venv-lint
LINT_STAMP := $(LINT_VENV)/.installed

.PHONY: install test lint generate demo bench fuzz node-test clean

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

lint: install $(LINT_STAMP)
	$(BIN)/ruff check server client tests bench examples fuzz
	$(BIN)/ruff format --check server client tests bench examples fuzz
	$(BIN)/mypy
	PYTHONPATH=server:client:generated $(LINT_VENV)/bin/lint-imports --no-cache
	cd protos && ../$(BIN)/buf lint

test: lint node-test
	$(BIN)/python -m pytest

# The Node.js client's tests start a real sidecar from .venv, hence the install.
node-test: install
	cd client/node && npm ci --no-audit --no-fund --ignore-scripts && npm test

demo: install
	$(BIN)/python examples/demo.py

bench: install
	$(BIN)/python bench/run.py

fuzz: install
	$(BIN)/pip install --quiet atheris
	$(BIN)/python fuzz/fuzz_requests.py -max_total_time=$${FUZZ_SECONDS:-60}

clean:
	rm -rf $(VENV) .venv-lint .mypy_cache .pytest_cache .ruff_cache client/node/node_modules

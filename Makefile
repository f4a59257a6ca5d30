# One entry point for users and CI. Every target installs what it needs first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test lint generate demo bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

generate: install
	rm -rf generated/cleveragents/toolruntime
	mkdir -p generated
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m grpc_tools.protoc -Iprotos \
		--python_out=generated --grpc_python_out=generated \
		--mypy_out=generated --mypy_grpc_out=generated \
		$$(cd protos && find cleveragents -name '*.proto' | sort)

lint: install
	$(BIN)/ruff check server client tests bench examples
	$(BIN)/ruff format --check server client tests bench examples
	$(BIN)/mypy
	cd protos && ../$(BIN)/buf lint

test: lint
	$(BIN)/python -m pytest

demo: install
	$(BIN)/python examples/demo.py

bench: install
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache

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

.PHONY: install test lint generate demo bench bench-console fuzz node-test go-tools go-test mcp-test-servers redis-server browser console-screenshots clean image image-rootfs docs dist

install: $(STAMP)

# The one version: pyproject.toml's, which --version, the wheels, the Node.js package, the Go
# module's tag and the image's label repeat (tests/docs/test_versions.py pins them together).
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)

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
	@if command -v protoc-gen-go >/dev/null && command -v protoc-gen-go-grpc >/dev/null; then \
		rm -rf client/go/toolruntimev1 && $(BIN)/buf generate; \
	else echo "protoc-gen-go or protoc-gen-go-grpc missing: client/go/toolruntimev1 not regenerated (make go-tools installs them)"; fi

lint: install $(LINT_STAMP)
	$(BIN)/ruff check server client tests bench examples fuzz docs deploy
	$(BIN)/ruff format --check server client tests bench examples fuzz docs deploy
	$(BIN)/mypy
	PYTHONPATH=server:client:generated $(LINT_VENV)/bin/lint-imports --no-cache
	cd protos && ../$(BIN)/buf lint
	@# The compatibility promise: nothing a released client relies on changes (CHANGELOG.md).
	cd protos && ../$(BIN)/buf breaking --against ../$(RELEASED_PROTOS)

# The suite runs on PYTEST_WORKERS processes (pytest-xdist; tests stolen from a busy worker by
# an idle one, as their lengths vary from milliseconds to seconds); PYTEST_WORKERS=0: in one.
PYTEST_WORKERS ?= 2
# The protos as last released, which buf breaking compares protos/ with.
RELEASED_PROTOS := tests/compat/protos-v0.1.0
test: lint docs dist node-test go-test mcp-test-servers redis-server browser
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist worksteal

# The docs site (docs/mkdocs.yml), built strictly: a broken link or anchor, a page missing from
# the nav or a nav entry without its page fails. The reference pages are generated from the
# code as it builds (docs/docsgen). Open build/site/index.html.
docs: install
	@# Not --quiet: it hides the warnings that --strict turns into failures.
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -f docs/mkdocs.yml

# Everything a user installs, into dist/: the sidecar's wheel and sdist (every module, the
# client's included), the Python client alone (its wheel and sdist, built from a copy of its
# packages in build/dist/client), the Node.js package's tarball, and the Go module as a module
# proxy serves it (dist/go, a GOPROXY=file:// directory). tests/docs/test_artifacts.py installs
# each in a clean environment and runs its quick start against the installed wheel's sidecar.
DIST_CLIENT := build/dist/client
dist: install
	rm -rf dist $(DIST_CLIENT) && mkdir -p dist $(DIST_CLIENT)/cleveragents
	$(BIN)/python -m build --no-isolation --outdir dist . >/dev/null
	cp client/python/pyproject.toml client/python/README.md LICENSE $(DIST_CLIENT)/
	cp -r client/cleveragents/client server/cleveragents/tool server/cleveragents/wire \
		generated/cleveragents/toolruntime $(DIST_CLIENT)/cleveragents/
	find $(DIST_CLIENT) -name __pycache__ -prune -exec rm -rf {} +
	$(BIN)/python -m build --no-isolation --outdir dist $(DIST_CLIENT) >/dev/null
	@command -v $(NPM) >/dev/null || { echo "make dist needs npm for the Node.js package (Debian: apt-get install nodejs npm)" >&2; exit 1; }
	cd client/node && npm_config_ignore_scripts=false $(NPM) pack --silent --pack-destination ../../dist >/dev/null
	$(BIN)/python deploy/gomodule.py client/go v$(VERSION) dist/go >/dev/null
	@ls dist

# The Redis run store's tests (and make bench) start Debian's redis-server (7.0+): installed
# here when missing and apt-get can (as root), else named.
REDIS_SERVER ?= redis-server
REDIS_INSTALL ?= apt-get install -y --no-install-recommends redis-server
redis-server:
	@command -v $(REDIS_SERVER) >/dev/null || { command -v apt-get >/dev/null && { if [ "$$(id -u)" = 0 ]; then $(REDIS_INSTALL); elif sudo -n true 2>/dev/null; then sudo -n $(REDIS_INSTALL); else false; fi; } >/dev/null; } || { echo "make test and make bench need redis-server 7+ for the Redis run store's tests: install it (Debian: apt-get install redis-server)" >&2; exit 1; }

# The run console's browser tests (tests/console) drive Debian's chromium through its
# chromedriver (Selenium; no browser is downloaded): installed here when missing and apt-get can
# (as root, or with sudo -n), else named.
CHROMIUM ?= chromium
CHROMEDRIVER ?= chromedriver
BROWSER_DEBS := chromium chromium-driver
BROWSER_INSTALL ?= apt-get install -y -q --no-install-recommends $(BROWSER_DEBS)
browser:
	@command -v $(CHROMIUM) >/dev/null && command -v $(CHROMEDRIVER) >/dev/null || { \
		command -v apt-get >/dev/null && { \
			if [ "$$(id -u)" = 0 ]; then as=; elif sudo -n true 2>/dev/null; then as="sudo -n"; else false; fi && \
			echo "installing $(BROWSER_DEBS) with apt-get" && \
			{ DEBIAN_FRONTEND=noninteractive $$as $(BROWSER_INSTALL) >/dev/null || \
			  { $$as apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive $$as $(BROWSER_INSTALL) >/dev/null; }; }; }; \
	} || { echo "make test needs Debian's chromium and chromium-driver for the run console's browser tests (tests/console): install them (apt-get install chromium chromium-driver)" >&2; exit 1; }

# The docs' screenshots of the run console (docs/pages/how-to/images), made by its browser test.
console-screenshots: install browser
	CONSOLE_SCREENSHOTS_DIR=$(abspath docs/pages/how-to/images) $(BIN)/python -m pytest -n 0 \
		tests/console/test_console_pages.py -k screenshots

# The Node.js client's tests start a real sidecar from .venv, hence the install.
node-test: install
	@command -v $(NODE) >/dev/null && command -v $(NPM) >/dev/null || { echo "make node-test (part of make test) needs Node.js 20+ and npm for the Node.js client's tests: install them (Debian: apt-get install nodejs npm), or run make lint and $(BIN)/python -m pytest for the Python part alone" >&2; exit 1; }
	cd client/node && npm ci --no-audit --no-fund --ignore-scripts && npm test

# The Go client (client/go) builds offline from Debian's Go toolchain, protoc plugins and library
# sources (/usr/share/gocode/src) in GOPATH mode: no module proxy needed (client/go/README.md).
# Missing packages are installed with apt-get when this runs as root (or with sudo -n).
GO ?= go
GO_DEBS := golang-go protoc-gen-go protoc-gen-go-grpc golang-google-grpc-dev golang-google-protobuf-dev \
	golang-github-golang-protobuf-1-5-dev
GO_BUILD := build/go
GO_IMPORT := github.com/cleveragents/cleveragents-sidecar/client/go
GO_LINK := $(GO_BUILD)/gopath/src/$(GO_IMPORT)
GO_ENV := GO111MODULE=off GOFLAGS= GOPATH=$(abspath $(GO_BUILD)/gopath):/usr/share/gocode \
	GOCACHE=$(abspath $(GO_BUILD)/cache)

go-tools:
	@missing=; for t in $(GO) protoc-gen-go protoc-gen-go-grpc; do command -v $$t >/dev/null || missing=yes; done; \
	test -d /usr/share/gocode/src/google.golang.org/grpc || missing=yes; \
	test -f /usr/share/gocode/src/github.com/golang/protobuf/proto/registry.go || missing=yes; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ]; then as=; elif sudo -n true 2>/dev/null; then as="sudo -n"; \
		else echo "the Go client needs Debian's $(GO_DEBS): install them (apt-get install $(GO_DEBS)), or run make lint, make node-test and $(BIN)/python -m pytest without Go" >&2; exit 1; fi; \
		echo "installing $(GO_DEBS) with apt-get"; \
		$$as apt-get install -y -q $(GO_DEBS) || { $$as apt-get update -q && $$as apt-get install -y -q $(GO_DEBS); } || { echo "apt-get could not install $(GO_DEBS)" >&2; exit 1; }; \
	fi
	@mkdir -p $(dir $(GO_LINK)) && ln -sfn $(abspath client/go) $(GO_LINK)

# gofmt, go vet, then the Go client's tests, which start a real sidecar from .venv (-count=1:
# run them every time, never a cached pass; -timeout: a hung test fails the package in minutes
# with every goroutine's stack, the test's among them, where the tests take seconds).
GO_TEST_TIMEOUT ?= 5m
go-test: install go-tools
	@test -z "$$(gofmt -l client/go)" || { echo "gofmt would change: $$(gofmt -l client/go)" >&2; exit 1; }
	cd $(GO_LINK) && $(GO_ENV) $(GO) vet ./... && $(GO_ENV) SIDECAR_BIN=$(abspath $(BIN))/cleveragents-sidecar $(GO) test -count=1 -timeout $(GO_TEST_TIMEOUT) ./...
# The MCP reference servers from npm that tests/mcp_tools starts (server-everything), pinned by
# their own package-lock.json in a test-only folder: nothing the sidecar ships or loads.
MCP_NPM_DIR := tests/mcp_tools/everything
mcp-test-servers: $(MCP_NPM_DIR)/node_modules/.package-lock.json

$(MCP_NPM_DIR)/node_modules/.package-lock.json: $(MCP_NPM_DIR)/package-lock.json
	@command -v $(NPM) >/dev/null || { echo "make mcp-test-servers (part of make test and make bench) needs npm for the MCP reference server the tests start (Debian: apt-get install nodejs npm)" >&2; exit 1; }
	cd $(MCP_NPM_DIR) && $(NPM) ci --no-audit --no-fund --ignore-scripts
	touch $@

demo: install
	$(BIN)/python examples/demo.py

bench: install redis-server
	$(BIN)/python bench/run.py
	$(BIN)/python bench/deltas.py  # live model output (issue 18)
	$(BIN)/python bench/deltas_sse.py  # the same through a loopback SSE provider
	$(BIN)/python bench/deltas_load.py  # many runs through it, split over client processes
	$(BIN)/python bench/http_stacks.py  # the providers' HTTP stack beside its peers, per event
	$(BIN)/python bench/large_outputs.py  # a tool's large output: the run's pause after it
	$(BIN)/python bench/containment.py  # what three memory attacks cost a sidecar (issue 30)
	$(BIN)/python bench/console.py  # the run console: nobody looking, and 20 pages following

bench-console: install
	$(BIN)/python bench/console.py

fuzz: install
	$(BIN)/pip install --quiet atheris
	$(BIN)/python fuzz/fuzz_requests.py -max_total_time=$${FUZZ_SECONDS:-60}

# The container image (Containerfile), built with podman, else buildah, from the wheel this
# repository builds and its dependencies' wheels, downloaded here first: the build itself runs
# without network. IMAGE_BASE: any Debian-like image with Python 3.11 and venv; where none can
# be pulled, `make image-rootfs` first makes one from Debian packages (debootstrap, as root).
# The wheels are resolved for the base's own Python (IMAGE_PYTHON, read from the base image's
# PYTHON_VERSION variable, which both the official python images and image-rootfs set):
# deploy/wheelhouse.py adds what its markers ask for and pip's did not (async-timeout for
# Python < 3.11.3, from redis).
IMAGE ?= cleveragents-sidecar:$(VERSION)
IMAGE_BASE ?= docker.io/library/python:3.11-slim-bookworm
ROOTFS_IMAGE ?= localhost/cleveragents-rootfs:bookworm
DEBIAN_MIRROR ?= http://deb.debian.org/debian
IMAGE_WHEELS := build/image/wheels
# Where the builder cannot start containers (a container itself, no cgroup controllers):
# IMAGE_BUILD_FLAGS="--isolation chroot --network host" (chroot runs only on the host network).
IMAGE_BUILD_FLAGS ?= --network none
# Wheels for the image's glibc (bookworm: 2.36) and any older one; pip takes --platform as is.
IMAGE_ARCH := $(shell uname -m)
IMAGE_PLATFORMS := $(foreach v,$(shell seq 17 36),--platform manylinux_2_$(v)_$(IMAGE_ARCH)) \
	--platform manylinux2014_$(IMAGE_ARCH) --platform manylinux2010_$(IMAGE_ARCH) \
	--platform manylinux1_$(IMAGE_ARCH)
CONTAINER := $(shell command -v podman >/dev/null && echo podman || { command -v buildah >/dev/null && echo buildah; })
CONTAINER_BUILD = $(if $(CONTAINER),$(CONTAINER) build)
IMAGE_INSPECT = $(if $(filter podman,$(CONTAINER)),podman image inspect --format '{{range .Config.Env}}{{println .}}{{end}}',buildah inspect --type image --format '{{range .Docker.Config.Env}}{{println .}}{{end}}')
IMAGE_PYTHON ?= $(shell $(IMAGE_INSPECT) $(IMAGE_BASE) 2>/dev/null | sed -n 's/^PYTHON_VERSION=//p')
IMAGE_PIP_FLAGS = --only-binary=:all: --python-version $(IMAGE_PYTHON) --implementation cp $(IMAGE_PLATFORMS)

image: install
	@test -n "$(CONTAINER)" || { echo "make image needs podman or buildah, and none is installed (Debian: apt-get install podman, or buildah)" >&2; exit 1; }
	@test -n "$(IMAGE_PYTHON)" || { echo "make image cannot tell the Python version of $(IMAGE_BASE): it is not in local storage (pull it, or make image-rootfs and pass IMAGE_BASE=$(ROOTFS_IMAGE)), or set IMAGE_PYTHON=3.11.x" >&2; exit 1; }
	rm -rf $(IMAGE_WHEELS) && mkdir -p $(IMAGE_WHEELS)
	$(BIN)/pip wheel --quiet --no-deps --wheel-dir $(IMAGE_WHEELS) .
	$(BIN)/pip download --quiet $(IMAGE_PIP_FLAGS) --dest $(IMAGE_WHEELS) $(IMAGE_WHEELS)/cleveragents_sidecar-*.whl
	$(BIN)/python deploy/wheelhouse.py $(IMAGE_WHEELS) $(IMAGE_PYTHON) cleveragents-sidecar -- $(IMAGE_PIP_FLAGS)
	$(CONTAINER_BUILD) --format docker $(IMAGE_BUILD_FLAGS) --build-arg BASE=$(IMAGE_BASE) \
		--build-arg VERSION=$(VERSION) -f Containerfile -t $(IMAGE) .

# A base image made offline: Debian bookworm's python3 and python3-venv from DEBIAN_MIRROR.
image-rootfs:
	@test -n "$(CONTAINER_BUILD)" || { echo "make image-rootfs needs podman or buildah (Debian: apt-get install podman, or buildah)" >&2; exit 1; }
	@command -v debootstrap >/dev/null || { echo "make image-rootfs needs debootstrap, run as root (Debian: apt-get install debootstrap)" >&2; exit 1; }
	rm -rf build/rootfs && mkdir -p build/rootfs
	debootstrap --variant=minbase --include=python3,python3-venv bookworm build/rootfs/tree $(DEBIAN_MIRROR)
	rm -rf build/rootfs/tree/var/cache/apt/archives/*.deb build/rootfs/tree/var/lib/apt/lists/*
	tar -C build/rootfs/tree --numeric-owner -cf build/rootfs/rootfs.tar .
	printf 'FROM scratch\nADD rootfs.tar /\nENV PYTHON_VERSION=%s\nCMD ["/bin/bash"]\n' \
		"$$(chroot build/rootfs/tree python3 -c 'import platform; print(platform.python_version())')" \
		> build/rootfs/Containerfile
	$(CONTAINER_BUILD) --format docker --network none -t $(ROOTFS_IMAGE) build/rootfs

clean:
	rm -rf dist $(VENV) .venv-lint .mypy_cache .pytest_cache .ruff_cache client/node/node_modules $(GO_BUILD) \
		$(MCP_NPM_DIR)/node_modules

"""Each artifact ``make dist`` builds, installed where a user installs it, runs the quick start
its docs page prints, against a sidecar started from the installed wheel: nothing of the
repository is on any of their paths."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from .artifacts import (
    DOCS_ADDRESS,
    PIP,
    ROOT,
    VERSION,
    artifact,
    clean_env,
    node_project,
    python_env,
    quickstart,
)
from .golang import go_project

GO_BUILD = ROOT / "build" / "go"


@pytest.fixture(scope="module")
def sidecar_env() -> Path:
    return python_env(artifact("cleveragents_sidecar-*.whl"))


@pytest.fixture(scope="module")
def sidecar(sidecar_env: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``cleveragents-sidecar serve`` from the installed wheel, in an empty directory; its
    address."""
    here = tmp_path_factory.mktemp("installed-sidecar")
    ready = here / "ready.json"
    process = subprocess.Popen(
        [
            sidecar_env / "bin" / "cleveragents-sidecar",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--ready-file",
            str(ready),
        ],
        cwd=here,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # printed once the ready file is in place
        assert line.startswith("cleveragents-sidecar listening on "), process.communicate()
        yield json.loads(ready.read_text())["address"]
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_the_sidecar_wheel_installs_alone_with_every_dependency(sidecar_env: Path) -> None:
    python = sidecar_env / "bin" / "python"
    probe = "import cleveragents.sidecar, cleveragents.client; print(cleveragents.sidecar.__file__)"
    where = subprocess.run(
        [python, "-c", probe], env=clean_env(), cwd="/", capture_output=True, text=True, check=True
    ).stdout
    assert where.startswith(str(sidecar_env))
    version = subprocess.run(
        [sidecar_env / "bin" / "cleveragents-sidecar", "--version"],
        env=clean_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    assert version.stdout.split() == ["cleveragents-sidecar", VERSION]
    check = subprocess.run([*PIP, "--python", str(python), "check"], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout


def test_the_installed_wheel_serves_the_run_consoles_page(
    sidecar_env: Path, tmp_path: Path
) -> None:
    ready = tmp_path / "ready.json"
    command: list[str | Path] = [
        sidecar_env / "bin" / "cleveragents-sidecar", "serve", "--listen", "127.0.0.1:0",
        "--console-listen", "127.0.0.1:0", "--ready-file", str(ready),
    ]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=tmp_path, env=clean_env(), stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().startswith("cleveragents-sidecar listening on ")
        url = json.loads(ready.read_text())["console_url"]
        pages = [
            urllib.request.urlopen(url + path, timeout=30) for path in ("", "static/console.js")
        ]
        bodies = [page.read() for page in pages]
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert b'<script type="module" src="/static/console.js">' in bodies[0]
    assert b"class RunPage" in bodies[1]


def test_the_sdists_hold_what_a_wheel_is_built_from() -> None:
    with tarfile.open(artifact("cleveragents_sidecar-*.tar.gz")) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    assert {
        "pyproject.toml",
        "LICENSE",
        "server/cleveragents/sidecar/__init__.py",
        "generated/cleveragents/toolruntime/v1/service_pb2.py",
    } <= names
    assert not [n for n in names if n.startswith(("tests/", "bench/", ".ci/"))]
    with tarfile.open(artifact("cleveragents_sidecar_client-*.tar.gz")) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    assert {
        "pyproject.toml",
        "cleveragents/client/__init__.py",
        "cleveragents/wire/__init__.py",
    } <= names


def test_the_client_wheel_holds_no_module_of_the_server() -> None:
    with zipfile.ZipFile(artifact("cleveragents_sidecar_client-*.whl")) as wheel:
        packages = {n.split("/")[1] for n in wheel.namelist() if n.startswith("cleveragents/")}
    assert packages == {"client", "tool", "wire", "toolruntime"}


def test_the_python_quick_start_runs_with_the_client_wheel_alone(sidecar: str) -> None:
    env = python_env(artifact("cleveragents_sidecar_client-*.whl"))
    code, shown = quickstart("get-started/python.md", "python")
    done = subprocess.run(
        [env / "bin" / "python", "-c", code.replace(DOCS_ADDRESS, sidecar)],
        env=clean_env(),
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == shown
    loaded = subprocess.run(
        [
            env / "bin" / "python",
            "-c",
            "import importlib.util as u; print(u.find_spec('structlog'))",
        ],
        env=clean_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert loaded.strip() == "None"  # none of the server's dependencies came along


@pytest.mark.skipif(
    shutil.which("npm") is None,
    reason="npm is not installed (make test installs nothing without it)",
)
@pytest.mark.parametrize("flavour", ["esm", "commonjs"])
def test_the_node_quick_start_runs_from_the_tarball(sidecar: str, flavour: str) -> None:
    project = node_project(artifact("cleveragents-sidecar-client-*.tgz"))
    code, shown = quickstart("get-started/node.md", "node")
    code = code.replace(DOCS_ADDRESS, sidecar)
    if flavour == "commonjs":  # what the page tells a CommonJS user to write
        code = code.replace(
            "import { SidecarClient } from '@cleveragents/sidecar-client';",
            "const { SidecarClient } = require('@cleveragents/sidecar-client');",
        )
        code = f"(async () => {{\n{code}}})();\n"
    script = project / ("quickstart.mjs" if flavour == "esm" else "quickstart.cjs")
    script.write_text(code)
    done = subprocess.run(
        ["node", script.name],
        cwd=project,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == shown


@pytest.mark.skipif(
    shutil.which("go") is None or not (GO_BUILD / "gopath").is_dir(),
    reason="Go is not set up: make go-tools (part of make test) installs Debian's Go packages",
)
@pytest.mark.timeout(600)  # compiling grpc-go from cold takes minutes on a loaded machine
def test_the_go_quick_start_builds_in_module_mode_outside_the_repository(
    sidecar: str, tmp_path: Path
) -> None:
    code, shown = quickstart("get-started/go.md", "go")
    lookup = clean_env(
        GO111MODULE="off",
        GOFLAGS="",
        GOCACHE=str(GO_BUILD / "cache"),
        GOPATH=f"{GO_BUILD / 'gopath'}:/usr/share/gocode",
    )
    app = go_project(
        ROOT / "dist", f"v{VERSION}", code.replace(DOCS_ADDRESS, sidecar), tmp_path, lookup
    )
    build = clean_env(
        GO111MODULE="on",
        GOFLAGS="-mod=vendor",
        GOPROXY="off",
        GOCACHE=str(GO_BUILD / "cache"),
        GOPATH=str(tmp_path / "gopath"),
    )
    done = subprocess.run(
        ["go", "run", "."], cwd=app, env=build, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == shown


def test_the_grpc_quick_start_answers_as_shown(sidecar: str) -> None:
    code, shown = quickstart("get-started/grpc.md", "grpc")
    buf = str(ROOT / ".venv" / "bin")
    done = subprocess.run(
        ["bash", "-c", code.replace(DOCS_ADDRESS, sidecar)],
        env=clean_env(PATH=f"{buf}:{os.environ['PATH']}"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    varying = ("runId", "durationMs", "startedAt")

    def steady(value: object) -> object:
        if isinstance(value, dict):
            return {k: steady(v) for k, v in value.items() if k not in varying}
        if isinstance(value, list):
            return [steady(v) for v in value]
        return value

    assert steady(json.loads(done.stdout)) == steady(json.loads(shown))

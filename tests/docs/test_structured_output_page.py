"""The structured-output how-to's snippets, in Python, Node.js and Go, run against a real
sidecar and print what the page says they print."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from .artifacts import DOCS, DOCS_ADDRESS, ROOT

PAGE = DOCS / "how-to" / "structured-output.md"
GO_BUILD = ROOT / "build" / "go"
GO_IMPORT = "github.com/cleveragents/cleveragents-sidecar/client/go"


def snippet(name: str) -> tuple[str, str]:
    """The code after ``<!-- structured-output: NAME -->`` and the output shown after it."""
    text = PAGE.read_text(encoding="utf-8")
    code = re.search(rf"<!-- structured-output: {name} -->\n```\w+\n(.*?)```", text, re.S)
    shown = re.search(rf"<!-- structured-output-output: {name} -->\n```\w+\n(.*?)```", text, re.S)
    assert code, f"the {name} snippet is gone"
    assert shown, f"the {name} snippet's output is gone"
    return code.group(1), shown.group(1)


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The repository's sidecar, serving on a free loopback port; its address."""
    here = tmp_path_factory.mktemp("structured-output-sidecar")
    ready = here / "ready.json"
    process = subprocess.Popen(
        [ROOT / ".venv" / "bin" / "cleveragents-sidecar", "serve", "--listen", "127.0.0.1:0",
         "--ready-file", str(ready)],
        cwd=here, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("cleveragents-sidecar listening on "), process.communicate()
        yield json.loads(ready.read_text())["address"]
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_the_python_snippet_prints_what_the_page_shows(sidecar: str) -> None:
    code, shown = snippet("python")
    done = subprocess.run(
        [sys.executable, "-c", code.replace(DOCS_ADDRESS, sidecar)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == shown


@pytest.mark.skipif(
    shutil.which("node") is None or not (ROOT / "client/node/node_modules").is_dir(),
    reason="Node.js or the client's modules are missing (make node-test installs them)",
)
def test_the_node_snippet_prints_what_the_page_shows(sidecar: str) -> None:
    code, shown = snippet("node")
    # Inside the package, its own name resolves to it (the exports field), as once installed.
    script = ROOT / "client" / "node" / f".structured-output-{uuid.uuid4().hex}.mjs"
    script.write_text(code.replace(DOCS_ADDRESS, sidecar))
    try:
        done = subprocess.run(
            ["node", script.name], cwd=script.parent, capture_output=True, text=True, timeout=60
        )
    finally:
        script.unlink()
    assert done.returncode == 0, done.stderr
    assert done.stdout == shown


@pytest.mark.skipif(
    shutil.which("go") is None or not (GO_BUILD / "gopath").is_dir(),
    reason="Go is not set up: make go-tools (part of make test) installs Debian's Go packages",
)
@pytest.mark.timeout(600)  # compiling grpc-go from cold takes minutes on a loaded machine
def test_the_go_snippet_prints_what_the_page_shows(sidecar: str, tmp_path: Path) -> None:
    code, shown = snippet("go")
    app = tmp_path / "gopath" / "src" / "example.com" / "structured"
    app.mkdir(parents=True)
    (app / "main.go").write_text(code.replace(DOCS_ADDRESS, sidecar))
    gopath = f"{tmp_path / 'gopath'}:{GO_BUILD / 'gopath'}:/usr/share/gocode"
    env = {
        **os.environ,
        "GO111MODULE": "off",
        "GOFLAGS": "",
        "GOPATH": gopath,
        "GOCACHE": str(GO_BUILD / "cache"),
    }
    assert (GO_BUILD / "gopath" / "src" / GO_IMPORT).exists(), "run make go-tools first"
    done = subprocess.run(
        ["go", "run", "."], cwd=app, env=env, capture_output=True, text=True, timeout=540
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == shown

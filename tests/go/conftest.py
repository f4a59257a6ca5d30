"""Helpers for the tests of the Go client (client/go): the GOPATH-mode build `make go-test` uses.

Tests import them with ``from .conftest import ...``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GO_IMPORT = "github.com/cleveragents/cleveragents-sidecar/client/go"
GOPATH = ROOT / "build" / "go" / "gopath"
#: Where client/go is linked so that its import path resolves in GOPATH mode (as in the Makefile).
GO_LINK = GOPATH / "src" / GO_IMPORT
DEBIAN_GOPATH = Path("/usr/share/gocode")


def go_env() -> dict[str, str]:
    """The environment of an offline GOPATH-mode build against Debian's Go sources, with the
    build cache that `make go-test` fills (so a test's build reuses it); skips the test when
    the Go toolchain is missing."""
    go = shutil.which("go")
    if go is None or not (DEBIAN_GOPATH / "src" / "google.golang.org" / "grpc").is_dir():
        pytest.skip("Go or Debian's Go gRPC sources are missing: `make go-tools` installs them")
    GO_LINK.parent.mkdir(parents=True, exist_ok=True)
    if not GO_LINK.is_symlink():
        GO_LINK.symlink_to(ROOT / "client" / "go")
    return dict(
        os.environ,
        GO111MODULE="off",
        GOFLAGS="",
        GOPATH=f"{GOPATH}{os.pathsep}{DEBIAN_GOPATH}",
        GOCACHE=str(ROOT / "build" / "go" / "cache"),
        PWD=str(GO_LINK),
    )


#: The sidecar's command line, in the same environment as the tests.
CLI = str(Path(sys.executable).parent / "cleveragents-sidecar")


@contextlib.asynccontextmanager
async def serving_sidecar(*args: str) -> AsyncIterator[str]:
    """``cleveragents-sidecar serve`` on a free loopback port (as tests/sidecar's cli_sidecar,
    which this package cannot import under pytest's and mypy's names at once): its address."""
    process = await asyncio.create_subprocess_exec(
        CLI, "serve", "--listen", "127.0.0.1:0", "--log-level", "warning", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        async with asyncio.timeout(20):
            line = (await process.stdout.readline()).decode().strip()
        prefix = "cleveragents-sidecar listening on "
        assert line.startswith(prefix), line
        yield line.removeprefix(prefix)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()

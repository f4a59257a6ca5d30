"""What the deployment tests share: the repository's deploy files, and the sidecar's own
command line run the way a container's health check or a Kubernetes probe runs it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
KUBERNETES = ROOT / "deploy" / "kubernetes"
#: The console script, as installed in the same environment as the tests.
CLI = str(Path(sys.executable).parent / "cleveragents-sidecar")
#: A fresh interpreter importing the sidecar: seconds on a loaded machine.
CLI_WAIT_S = 30.0


async def run_cli(*args: str, env: Mapping[str, str] | None = None) -> tuple[int, str, str]:
    """``cleveragents-sidecar ARGS``: its exit status, stdout and stderr."""
    process = await asyncio.create_subprocess_exec(
        CLI, *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=dict(env) if env is not None else None,
    )  # fmt: skip
    async with asyncio.timeout(CLI_WAIT_S):
        out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@contextlib.asynccontextmanager
async def served(
    args: Sequence[str], env: Mapping[str, str]
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``cleveragents-sidecar ARGS`` (a ``serve``) until it prints that it listens; killed on
    the way out."""
    process = await asyncio.create_subprocess_exec(
        CLI, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=dict(env)
    )
    try:
        assert process.stdout is not None
        async with asyncio.timeout(CLI_WAIT_S):
            line = (await process.stdout.readline()).decode().strip()
        if not line.startswith("cleveragents-sidecar listening on "):
            assert process.stderr is not None
            raise AssertionError(f"{line!r}: {(await process.stderr.read()).decode()}")
        yield process
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


def without_sidecar_settings(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The tests' environment without ``CLEVERAGENTS_SIDECAR_*`` variables (which would
    override the file under test), plus ``env``."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CLEVERAGENTS_SIDECAR_")}
    clean.update(env or {})
    return clean

"""The sidecar run as an unprivileged user, as the README's how-to says: a sandbox base owned
by that user, where its runs write; the operating system refuses what that user may not read,
whatever the sandbox rules allow."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import pytest

from cleveragents.toolruntime.v1 import service_pb2, service_pb2_grpc, types_pb2

if TYPE_CHECKING:
    from tests.conftest import ServedSidecar, ServeSidecar

NOBODY = 65534
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="dropping to another user needs root and setpriv(1)",
)


@pytest.fixture
def base() -> Iterator[Path]:
    """The sandbox base: owned by the sidecar's user, mode 0700 (outside pytest's own
    temporary tree, which only root may enter)."""
    path = Path(tempfile.mkdtemp(prefix="sidecar-sandboxes-"))
    (path / "run-1").mkdir()
    secret = path / "run-1" / "operator-only.txt"
    secret.write_text("left here by root\n")
    secret.chmod(0o600)
    for entry in (path, path / "run-1"):
        os.chown(entry, NOBODY, NOBODY)
    yield path
    shutil.rmtree(path)


@pytest.fixture
def unprivileged(serve_sidecar: ServeSidecar, base: Path) -> ServedSidecar:
    drop = ("setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups")
    return serve_sidecar(file_tools="true", sandbox_roots=f"{base}/*", wrapper=drop)


def _uid(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError("no Uid line")


async def test_an_unprivileged_sidecar_writes_as_its_user_and_cannot_read_roots_files(
    unprivileged: ServedSidecar, base: Path
) -> None:
    calls = [
        {"id": "w", "name": "write_file", "arguments": {"path": "out.txt", "content": "hi"}},
        {"id": "r", "name": "read_file", "arguments": {"path": "operator-only.txt"}},
    ]
    spec = types_pb2.RunSpec(prompt="write")
    spec.context.sandbox_root = str(base / "run-1")
    spec.context.automation_profile = "full_auto"
    spec.llm.script = json.dumps([{"tool_calls": calls}, {"content": "done"}])
    async with grpc.aio.insecure_channel(unprivileged.address) as channel:
        stub: Any = service_pb2_grpc.ToolRuntimeServiceStub(channel)
        response = await stub.RunToolLoop(service_pb2.RunToolLoopRequest(spec=spec), timeout=60)
    wrote, read = response.result.tool_call_history

    assert _uid(unprivileged.pid) == NOBODY
    assert wrote.success
    assert (base / "run-1" / "out.txt").stat().st_uid == NOBODY
    assert not read.success
    assert "Permission denied" in read.error

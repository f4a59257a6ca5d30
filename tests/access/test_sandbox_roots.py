"""Sandbox roots are the operator's: a hostile client cannot point a run at the sidecar's
secrets, and no event, record or result of its runs carries the key or the token.

Every test runs a real ``cleveragents-sidecar serve`` whose environment holds a fake
``OPENAI_API_KEY`` and whose auth token comes from another variable: before the roots were
checked, a run rooted at ``/proc/self`` read both back from ``environ``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import pytest

from cleveragents.toolruntime.v1 import service_pb2, service_pb2_grpc, types_pb2

if TYPE_CHECKING:
    from tests.conftest import ServedSidecar, ServeSidecar

KEY = "sk-fake-openai-key-7f3a9c1e5b"
TOKEN = "sidecar-token-d41d8cd98f00b204"
SECRETS = (KEY.encode(), TOKEN.encode())
METADATA = (("authorization", f"Bearer {TOKEN}"),)
#: What every hostile run asks its tools to read, whatever its root.
HOSTILE_READS = ("environ", "etc/shadow", "shadow", "proc-link/environ", "etc-link/shadow")


@pytest.fixture
def allowed(tmp_path: Path) -> Path:
    """The one directory the operator allows, with traps inside: links to /etc and /proc/self,
    and a file that happens to hold the key and the token."""
    base = tmp_path / "allowed"
    work = base / "work"
    work.mkdir(parents=True)
    (work / "notes.txt").write_text(f"deploy with {KEY} and {TOKEN}\n")
    (work / "proc-link").symlink_to("/proc/self")
    (work / "etc-link").symlink_to("/etc")
    (base / "to-etc").symlink_to("/etc")
    (base / "to-proc").symlink_to("/proc/self")
    return base


def _serve(serve_sidecar: ServeSidecar, allowed: Path, **more: Any) -> ServedSidecar:
    # The operator even lists the cwd, /proc/* and /etc/ssl: the sidecar refuses the first two
    # whatever the setting, and /etc/ssl does not reach /etc.
    roots = os.pathsep.join([str(allowed), os.getcwd(), "/proc/*", "/etc/ssl"])
    return serve_sidecar(
        env={"OPENAI_API_KEY": KEY, "SIDECAR_TEST_TOKEN": TOKEN},
        auth_token_env="SIDECAR_TEST_TOKEN",
        file_tools="true",
        sandbox_roots=roots,
        **more,
    )


@pytest.fixture
def hostile_sidecar(serve_sidecar: ServeSidecar, allowed: Path) -> ServedSidecar:
    return _serve(serve_sidecar, allowed)


def _script() -> str:
    calls = [
        {"id": f"r{i}", "name": "read_file", "arguments": {"path": path}}
        for i, path in enumerate(HOSTILE_READS)
    ]
    calls += [
        {"id": "n1", "name": "read_file", "arguments": {"path": "notes.txt"}},
        {"id": "s1", "name": "search_files", "arguments": {"pattern": "sk-"}},
        {"id": "l1", "name": "list_dir", "arguments": {"path": "."}},
    ]
    return json.dumps([{"tool_calls": calls}, {"content": "done"}])


async def _hostile_run(
    address: str, root: str, run_id: str
) -> tuple[grpc.StatusCode, str, list[bytes]]:
    """Start a run rooted at ``root`` that reads the secrets; every byte the sidecar sent back
    about it (events, history, state, listing) and how its start went."""
    spec = types_pb2.RunSpec(prompt="read the secrets", run_id=run_id)
    spec.context.sandbox_root = root
    spec.llm.script = _script()
    seen: list[bytes] = []
    code, details = grpc.StatusCode.OK, ""
    async with grpc.aio.insecure_channel(address) as channel:
        stub: Any = service_pb2_grpc.ToolRuntimeServiceStub(channel)
        try:
            call = stub.StreamToolLoop(
                service_pb2.StreamToolLoopRequest(spec=spec), metadata=METADATA, timeout=60
            )
            async for response in call:
                seen.append(response.SerializeToString())
        except grpc.aio.AioRpcError as exc:
            code, details = exc.code(), exc.details() or ""
            seen.append(details.encode())
        if code is grpc.StatusCode.OK:
            history = await stub.GetRunHistory(
                service_pb2.GetRunHistoryRequest(run_id=run_id), metadata=METADATA, timeout=60
            )
            state = await stub.GetRun(
                service_pb2.GetRunRequest(run_id=run_id), metadata=METADATA, timeout=60
            )
            seen += [history.SerializeToString(), state.SerializeToString()]
        listing = await stub.ListRuns(service_pb2.ListRunsRequest(), metadata=METADATA, timeout=60)
        seen.append(listing.SerializeToString())
    return code, details, seen


REFUSED = [
    ("/", grpc.StatusCode.PERMISSION_DENIED, "file system root"),
    ("/proc/self", grpc.StatusCode.PERMISSION_DENIED, "proc file system"),
    ("/proc/self/cwd", grpc.StatusCode.PERMISSION_DENIED, "working directory"),
    ("/etc", grpc.StatusCode.PERMISSION_DENIED, "sandbox_roots"),
    ("/sys", grpc.StatusCode.PERMISSION_DENIED, "sysfs"),
    ("{allowed}/to-etc", grpc.StatusCode.PERMISSION_DENIED, "(its links followed) is not inside"),
    ("{allowed}/to-proc", grpc.StatusCode.PERMISSION_DENIED, "proc file system"),
    ("{cwd}", grpc.StatusCode.PERMISSION_DENIED, "working directory"),
    ("{allowed}/../..", grpc.StatusCode.PERMISSION_DENIED, "sandbox_roots"),
    ("work", grpc.StatusCode.INVALID_ARGUMENT, "absolute path"),
    (".", grpc.StatusCode.INVALID_ARGUMENT, "absolute path"),
    ("{allowed}/missing", grpc.StatusCode.FAILED_PRECONDITION, "not a directory"),
]


@pytest.mark.parametrize(("root", "code", "says"), REFUSED, ids=[r[0] for r in REFUSED])
async def test_a_run_rooted_outside_the_operators_roots_is_refused_at_start(
    hostile_sidecar: ServedSidecar,
    allowed: Path,
    root: str,
    code: grpc.StatusCode,
    says: str,
) -> None:
    named = root.format(allowed=allowed, cwd=os.getcwd())
    got, details, seen = await _hostile_run(hostile_sidecar.address, named, "hostile")

    assert not [s for s in SECRETS for blob in seen if s in blob]
    assert (got, says in details) == (code, True), details


async def test_an_allowed_root_runs_and_no_byte_of_its_run_holds_the_key_or_token(
    hostile_sidecar: ServedSidecar, allowed: Path
) -> None:
    code, details, seen = await _hostile_run(
        hostile_sidecar.address, str(allowed / "work"), "allowed"
    )
    everything = b"".join(seen)

    assert code is grpc.StatusCode.OK, details
    assert KEY.encode() not in everything
    assert TOKEN.encode() not in everything
    assert b"deploy with [redacted] and [redacted]" in everything  # notes.txt, read back
    assert everything.count(b"symbolic link") >= 2  # proc-link and etc-link: not followed


async def test_a_symlinked_root_is_resolved_once_and_used_resolved(
    hostile_sidecar: ServedSidecar, allowed: Path, tmp_path: Path
) -> None:
    (allowed / "link-to-work").symlink_to(allowed / "work")
    code, _, seen = await _hostile_run(
        hostile_sidecar.address, str(allowed / "link-to-work"), "linked"
    )

    assert code is grpc.StatusCode.OK
    assert str(allowed / "work").encode() in seen[0]  # run_started: the resolved root
    assert b"link-to-work" not in b"".join(seen)


def _can_mount_procfs(target: Path) -> str | None:
    """Why a private procfs cannot be mounted here (``None``: it can)."""
    if shutil.which("unshare") is None:
        return "unshare(1) is not installed"
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", f"mount -t proc proc {target}"],
        capture_output=True,
        text=True,
        check=False,
    )
    return None if probe.returncode == 0 else f"mount -t proc failed: {probe.stderr.strip()}"


@pytest.fixture
def procfs_sidecar(serve_sidecar: ServeSidecar, allowed: Path) -> ServedSidecar:
    """The sidecar in a mount namespace of its own, where a procfs is mounted inside the
    allowed directory at ``jail/proc`` (nobody else sees the mount)."""
    mount_point = allowed / "jail" / "proc"
    mount_point.mkdir(parents=True)
    if (why := _can_mount_procfs(mount_point)) is not None:
        pytest.skip(f"cannot make a bind-mounted procfs: {why}")
    script = 'mount -t proc proc "$0" && exec "$@"'
    return _serve(
        serve_sidecar, allowed, wrapper=("unshare", "-m", "sh", "-c", script, str(mount_point))
    )


@pytest.mark.parametrize(
    ("inside", "says"),
    [("jail", "proc file system mounted inside it"), ("jail/proc", "on a proc file system")],
)
async def test_a_root_with_a_procfs_mounted_in_it_is_refused(
    procfs_sidecar: ServedSidecar, allowed: Path, inside: str, says: str
) -> None:
    code, details, seen = await _hostile_run(
        procfs_sidecar.address, str(allowed / inside), "jailed"
    )

    assert not [s for s in SECRETS for blob in seen if s in blob]
    assert (code, says in details) == (grpc.StatusCode.PERMISSION_DENIED, True), details

"""Approvals against a real ``cleveragents-sidecar serve``: the unanswerable call that no longer
hangs (and is logged), and ``cleveragents-sidecar approve|deny RUN_ID CALL_ID``."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

from cleveragents.client import AsyncSidecarClient
from cleveragents.tool import (
    ApprovalDecided,
    ApprovalRequested,
    ErrorKind,
    RunCompleted,
    RunEvent,
    ToolActorContext,
)

from .conftest import CLI, CLI_WAIT_S, cli_sidecar, terminate


def write_then_done(path: str = "notes.md") -> list[dict[str, Any]]:
    arguments = {"path": path, "content": "hello"}
    return [
        {"tool_calls": [{"id": "w1", "name": "write_file", "arguments": arguments}]},
        {"content": "done"},
    ]


async def run_cli(*args: str) -> tuple[int, str, str]:
    """Run ``cleveragents-sidecar args`` (from a thread: the same on every event loop)."""
    done = await asyncio.to_thread(
        subprocess.run, [CLI, *args], capture_output=True, text=True, timeout=CLI_WAIT_S
    )
    return done.returncode, done.stdout, done.stderr


async def decided_by_cli(
    address: str, sandbox: Path, verb: str, *extra: str
) -> tuple[list[RunEvent], tuple[int, str, str]]:
    """Stream a run that writes a file; answer its approval with ``cleveragents-sidecar verb``."""
    events: list[RunEvent] = []
    answered = (0, "", "")
    context = ToolActorContext(sandbox_root=str(sandbox))
    async with AsyncSidecarClient(address) as client, asyncio.timeout(CLI_WAIT_S):
        async for streamed in client.stream_tool_loop(
            "write it", script=write_then_done(), context=context, run_id="r1"
        ):
            events.append(streamed.event)
            if isinstance(streamed.event, ApprovalRequested):
                answered = await run_cli(verb, "r1", streamed.event.call_id,
                                         "--target", address, *extra)  # fmt: skip
    return events, answered


async def test_a_unary_run_nobody_can_answer_ends_at_once_with_a_warning(tmp_path: Path) -> None:
    async with cli_sidecar("--log-format", "json") as (process, address):
        context = ToolActorContext(sandbox_root=str(tmp_path))
        async with AsyncSidecarClient(address) as client, asyncio.timeout(CLI_WAIT_S):
            result = await client.run_tool_loop(
                "write it", script=write_then_done(), context=context, run_id="quiet"
            )
        code = await terminate(process)
        assert process.stderr is not None
        lines = [json.loads(line) for line in (await process.stderr.read()).splitlines()]
    assert code == 0
    record = result.tool_call_history[0]
    assert (record.tool_name, record.error_kind) == ("write_file", ErrorKind.DENIED)
    assert not (tmp_path / "notes.md").exists()
    (warning,) = [line for line in lines if line.get("level") == "warning"]
    assert (warning["run_id"], warning["call_id"], warning["tool"]) == ("quiet", "w1", "write_file")
    assert "nobody can give" in warning["event"]
    assert "approval_timeout_unattended_s" in warning["how_to_answer"]


async def test_approve_lets_the_waiting_call_run(tmp_path: Path) -> None:
    async with cli_sidecar() as (_, address):
        events, (code, out, err) = await decided_by_cli(
            address, tmp_path, "approve", "--reason", "fine by me"
        )
    assert (code, out, err) == (0, "approved call w1 of run r1\n", "")
    (decided,) = [e for e in events if isinstance(e, ApprovalDecided)]
    assert (decided.approved, decided.by, decided.reason) == (True, "rpc", "fine by me")
    final = events[-1]
    assert isinstance(final, RunCompleted)
    assert final.result.tool_call_history[0].success
    assert (tmp_path / "notes.md").read_text() == "hello"


async def test_deny_refuses_the_waiting_call(tmp_path: Path) -> None:
    async with cli_sidecar() as (_, address):
        events, (code, out, _) = await decided_by_cli(address, tmp_path, "deny")
    assert (code, out) == (0, "denied call w1 of run r1\n")
    final = events[-1]
    assert isinstance(final, RunCompleted)
    record = final.result.tool_call_history[0]
    assert (record.error_kind, record.error) == (ErrorKind.DENIED, "denied by rpc")
    assert not (tmp_path / "notes.md").exists()


async def test_deciding_a_call_that_does_not_wait_exits_1(tmp_path: Path) -> None:
    async with cli_sidecar() as (_, address):
        await decided_by_cli(address, tmp_path, "deny")
        code, out, err = await run_cli("approve", "r1", "w1", "--target", address)
        missing = await run_cli("approve", "no-such-run", "w1", "--target", address)
    assert (code, out) == (1, "")
    assert "FAILED_PRECONDITION" in err
    assert "no tool call 'w1' is waiting for approval" in err
    assert missing[0] == 1
    assert "NOT_FOUND" in missing[2]

"""``[clients.NAME]`` identities from a TOML file, against a real ``cleveragents-sidecar serve``:
the ``approve`` command acts with its caller's identity."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from cleveragents.client import AsyncSidecarClient
from cleveragents.tool import ApprovalRequested, RunCompleted, ToolActorContext

from .conftest import CLI_WAIT_S, cli_sidecar
from .test_approve_cli import run_cli, write_then_done

CONFIG = """
[clients.alice]
token_file = "alice.token"

[clients.bob]
token_env = "BOB_TOKEN"

[clients.ops]
token_env = "OPS_TOKEN"
roles = ["approver"]
"""


async def test_approve_needs_the_runs_owner_or_an_approver(tmp_path: Path) -> None:
    (tmp_path / "sidecar.toml").write_text(CONFIG)
    (tmp_path / "alice.token").write_text("alice-file-token\n")
    env = {**os.environ, "BOB_TOKEN": "bob-env-token", "OPS_TOKEN": "ops-env-token"}
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    answers: list[tuple[int, str, str]] = []
    events = []
    config = str(tmp_path / "sidecar.toml")
    async with cli_sidecar("--config", config, env=env) as (_, address):
        context = ToolActorContext(sandbox_root=str(sandbox))
        async with AsyncSidecarClient(address, token="alice-file-token") as alice, \
                asyncio.timeout(CLI_WAIT_S):  # fmt: skip
            async for streamed in alice.stream_tool_loop(
                "write it", script=write_then_done(), context=context, run_id="r1"
            ):
                events.append(streamed.event)
                if isinstance(streamed.event, ApprovalRequested):
                    for token in ("bob-env-token", "ops-env-token"):
                        answers.append(await run_cli(
                            "approve", "r1", "w1", "--target", address, "--token", token
                        ))  # fmt: skip
    (bob_code, _, bob_err), (ops_code, ops_out, _) = answers
    assert bob_code == 1
    assert "NOT_FOUND" in bob_err
    assert "no run with id 'r1'" in bob_err
    assert (ops_code, ops_out) == (0, "approved call w1 of run r1\n")
    assert isinstance(events[-1], RunCompleted)
    assert (sandbox / "notes.md").read_text() == "hello"

"""A sidecar woken after its runs were adopted (it was stopped past its lease) starts no tool
call of theirs: a call runs only once the store took its ``tool_call_started`` (a fenced
write), so a stale owner finds out it lost the run before the call, never after. The tool is
not safe to run twice: it appends to a ledger, which shows who ran it."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

import grpc
import pytest

from cleveragents.client import AsyncSidecarClient, SidecarRpcError
from cleveragents.tool import RunBudget, RunCompleted, ToolCallStarted
from tests.conftest import ServeSidecar
from tests.redis_server import RedisServer

TOOLS = '''
import os
from cleveragents.tool import ToolRegistry

registry = ToolRegistry()


@registry.tool
async def charge(amount: int) -> dict:
    """Charge ``amount``: not safe to run twice.

    Args:
        amount: What to charge.
    """
    with open({ledger!r}, "a") as ledger:
        ledger.write(f"{{os.getpid()}} {{amount}}\\n")
    return {{"charged": amount}}
'''
NAP_S = 1.0
#: A nap (the owner is stopped in it), then a charge, asked for in one response and run one
#: after the other: the charge starts as the nap ends, in the same step of the event loop.
NAP_THEN_CHARGE: list[dict[str, Any]] = [
    {
        "tool_calls": [
            {"id": "nap", "name": "sleep", "arguments": {"seconds": NAP_S}},
            {"id": "c2", "name": "charge", "arguments": {"amount": 2}},
        ]
    },
    {"content": "charged"},
]
IN_TURN = RunBudget(max_concurrent_tool_calls=1)


def _tools(tmp_path: Path) -> tuple[Path, Path]:
    """The config naming the ``charge`` tool module, and its ledger."""
    ledger = tmp_path / "ledger"
    (tmp_path / "charge_tools.py").write_text(TOOLS.format(ledger=str(ledger)), encoding="utf-8")
    config = tmp_path / "sidecar.toml"
    config.write_text(
        f'tool_modules = ["charge_tools"]\npython_path = ["{tmp_path}"]\n', encoding="utf-8"
    )
    return config, ledger


async def _start_and_stop_mid_nap(
    address: str, process: Any, stopped: asyncio.Future[float]
) -> SidecarRpcError | None:
    """Start a detached run, ``SIGSTOP`` its sidecar once its nap began (``stopped`` is set to
    the time by then), and read its stream on to the end: the error it ended with."""
    async with AsyncSidecarClient(address) as client:
        stream = client.stream_tool_loop(
            "go", script=NAP_THEN_CHARGE, run_id="charged", detach=True, budget=IN_TURN
        )
        try:
            async for streamed in stream:
                event = streamed.event
                if isinstance(event, ToolCallStarted) and event.call_id == "nap":
                    process.send_signal(signal.SIGSTOP)  # mid-nap, its lease left to expire
                    stopped.set_result(time.monotonic())
        except SidecarRpcError as exc:
            return exc
    return None


@pytest.mark.timeout(90)
async def test_a_sidecar_woken_after_its_run_was_adopted_does_not_run_its_next_tool_call(
    serve_sidecar: ServeSidecar, redis_server: RedisServer, tmp_path: Path
) -> None:
    config, ledger = _tools(tmp_path)
    alpha, beta = [
        serve_sidecar(
            config=config, event_store=redis_server.url, sidecar_id=name, event_store_lease_s=0.5
        )
        for name in ("alpha", "beta")
    ]
    stopped: asyncio.Future[float] = asyncio.get_running_loop().create_future()
    on_alpha = asyncio.create_task(_start_and_stop_mid_nap(alpha.address, alpha.process, stopped))
    try:
        napping_since = await asyncio.wait_for(stopped, 30)
        async with AsyncSidecarClient(beta.address) as client:  # beta adopts it and ends it
            adopted = [e.event async for e in client.watch("charged")]
        # alpha wakes with its nap over (its timer due), as after a longer stall: the charge
        # is its next step.
        await asyncio.sleep(max(0.0, napping_since + NAP_S - time.monotonic()))
    finally:
        alpha.process.send_signal(signal.SIGCONT)
    error = await asyncio.wait_for(on_alpha, 30)
    assert isinstance(adopted[-1], RunCompleted)
    assert error is not None
    assert error.code is grpc.StatusCode.FAILED_PRECONDITION
    assert "taken over by sidecar 'beta'" in error.details
    charges = ledger.read_text().splitlines()
    assert charges == [f"{beta.process.pid} 2"], "charge(2) ran on the stale owner too"

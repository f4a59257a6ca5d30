"""Runs that outlive their sidecar: killed with SIGKILL mid-run, resumed from the SQLite log.

The tools wait for a release file and leave a file each time they begin, so the test knows
what ran where without sleeping. A watcher gets a call's ``tool_call_started`` once the store
holds it, which need not be after the call began (on a shared store a call may wait for that
write), so each tool reports its progress (``tool_call_progress``) once it has left its file,
and the tests wait for that.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from cleveragents.client import AsyncSidecarClient, SidecarRpcError, StreamedEvent
from cleveragents.tool import (
    RunCompleted,
    RunFailed,
    RunResumed,
    RunStarted,
    ToolCallCompleted,
    ToolCallProgress,
    ToolCallStarted,
)

from .conftest import SidecarProcess, Spawn

TOOLS = '''
import asyncio, os
from cleveragents.tool import ToolRegistry, current_call

GATE = {gate!r}
registry = ToolRegistry()


async def _wait(tag: str) -> dict:
    n = len([f for f in os.listdir(GATE) if f.startswith(f"started-{{tag}}-")])
    open(os.path.join(GATE, f"started-{{tag}}-{{n + 1}}"), "w").close()
    current_call().progress(0.0, None, "began")
    while not os.path.exists(os.path.join(GATE, "release")):
        await asyncio.sleep(0.02)
    return {{"tag": tag}}


@registry.tool(idempotent=True)
async def wait_idem(tag: str) -> dict:
    """Wait for the release file; safe to run twice.

    Args:
        tag: Names the call.
    """
    return await _wait(tag)


@registry.tool
async def wait_plain(tag: str) -> dict:
    """Wait for the release file; not safe to run twice.

    Args:
        tag: Names the call.
    """
    return await _wait(tag)
'''
LONG_S = 60


def _script(tool: str, tag: str) -> list[dict[str, Any]]:
    return [
        {"tool_calls": [{"id": "e1", "name": "echo", "arguments": {"text": tag}}]},
        {"tool_calls": [{"id": "w1", "name": tool, "arguments": {"tag": tag}}]},
        {"content": f"{tag} done"},
    ]


def gated_tools(tmp_path: Path) -> tuple[Path, Path]:
    """A config loading ``TOOLS`` (waiting on the returned gate directory), and the gate."""
    gate = tmp_path / "gate"
    gate.mkdir()
    (tmp_path / "resume_tools.py").write_text(TOOLS.format(gate=str(gate)), encoding="utf-8")
    config = tmp_path / "sidecar.toml"
    config.write_text(
        f'tool_modules = ["resume_tools"]\npython_path = ["{tmp_path}"]\n', encoding="utf-8"
    )
    return config, gate


async def _until_waiting(client: AsyncSidecarClient, run_id: str) -> list[StreamedEvent]:
    """The run's events up to the first progress of its waiting call (the tool then runs)."""
    seen = []
    async for streamed in client.watch(run_id):
        seen.append(streamed)
        event = streamed.event
        if isinstance(event, ToolCallProgress) and event.call_id == "w1":
            return seen
    raise AssertionError(f"run {run_id} ended before its waiting call")


def _check_log(log: list[StreamedEvent], before: list[StreamedEvent]) -> RunResumed:
    """One log, whole and in order: what was seen before the kill, resumed once, one end."""
    assert [e.sequence for e in log] == list(range(1, len(log) + 1))
    assert [e.event for e in log[: len(before)]] == [e.event for e in before]
    assert isinstance(log[0].event, RunStarted)
    assert sum(isinstance(e.event, RunStarted) for e in log) == 1
    ends = [e for e in log if isinstance(e.event, RunCompleted | RunFailed)]
    assert ends == [log[-1]]
    (resumed,) = [e for e in log if isinstance(e.event, RunResumed)]
    assert isinstance(resumed.event, RunResumed)
    assert resumed.event.after_sequence == resumed.sequence - 1
    starts = [e.event.call_id for e in log if isinstance(e.event, ToolCallStarted)]
    assert sorted(starts) == ["e1", "w1"]  # each call started once, a rerun included
    return resumed.event


async def test_runs_killed_mid_call_resume_once_from_the_log_after_a_restart(
    spawn: Spawn, tmp_path: Path
) -> None:
    config, gate = gated_tools(tmp_path)
    runs = {f"idem-{i}": ("wait_idem", f"idem{i}") for i in range(3)}
    runs |= {f"plain-{i}": ("wait_plain", f"plain{i}") for i in range(3)}
    first: SidecarProcess = spawn(config=str(config))
    async with AsyncSidecarClient(first.address) as client, asyncio.timeout(LONG_S):
        for run_id, (tool, tag) in runs.items():
            async for _ in client.stream_tool_loop(
                "go", script=_script(tool, tag), run_id=run_id, detach=True
            ):
                break  # detached: the run goes on without this stream
        before = {run_id: await _until_waiting(client, run_id) for run_id in runs}
    first.kill()
    (gate / "release").touch()

    second: SidecarProcess = spawn(config=str(config))
    async with AsyncSidecarClient(second.address) as client, asyncio.timeout(LONG_S):
        logs = {run_id: [e async for e in client.watch(run_id)] for run_id in runs}
        infos = {run_id: await client.get_run(run_id) for run_id in runs}

    for run_id, (tool, tag) in runs.items():
        log = logs[run_id]
        resumed = _check_log(log, before[run_id])
        end = log[-1].event
        assert isinstance(end, RunCompleted), (run_id, end)
        assert end.result.content == f"{tag} done"
        assert infos[run_id].state == "completed"
        (record,) = [
            e.event.record
            for e in log
            if isinstance(e.event, ToolCallCompleted) and e.event.record.call_id == "w1"
        ]
        ran = sorted(p.name for p in gate.glob(f"started-{tag}-*"))
        if tool == "wait_idem":
            assert resumed.rerun_call_ids == ("w1",)
            assert record.success
            assert ran == [f"started-{tag}-1", f"started-{tag}-2"]  # before the kill, and after
        else:
            assert resumed.interrupted_call_ids == ("w1",)
            assert not record.success
            assert record.error is not None
            assert "interrupted by a sidecar restart" in record.error
            assert ran == [f"started-{tag}-1"]  # never run twice
        assert [r.call_id for r in end.result.tool_call_history] == ["e1", "w1"]


async def test_a_run_not_detached_fails_at_the_restart_saying_why(
    spawn: Spawn, tmp_path: Path
) -> None:
    config, gate = gated_tools(tmp_path)
    first: SidecarProcess = spawn(config=str(config))
    seen: list[StreamedEvent] = []
    async with AsyncSidecarClient(first.address) as client, asyncio.timeout(LONG_S):
        stream = client.stream_tool_loop("go", script=_script("wait_plain", "a"), run_id="a")
        try:
            async for streamed in stream:
                seen.append(streamed)
                event = streamed.event
                if isinstance(event, ToolCallStarted) and event.call_id == "w1":
                    first.kill()  # the stream that owns the run dies with the sidecar
        except SidecarRpcError:
            pass
    (gate / "release").touch()

    second: SidecarProcess = spawn(config=str(config))
    async with AsyncSidecarClient(second.address) as client, asyncio.timeout(LONG_S):
        log = [e async for e in client.watch("a")]
    assert [e.sequence for e in log] == list(range(1, len(log) + 1))
    end = log[-1].event
    assert isinstance(end, RunFailed)
    assert "was not detached" in end.message
    assert not any(isinstance(e.event, RunResumed) for e in log)


async def test_a_run_resumes_again_after_a_second_kill(spawn: Spawn, tmp_path: Path) -> None:
    config, gate = gated_tools(tmp_path)
    script = _script("wait_idem", "twice")
    first: SidecarProcess = spawn(config=str(config))
    async with AsyncSidecarClient(first.address) as client, asyncio.timeout(LONG_S):
        async for _ in client.stream_tool_loop("go", script=script, run_id="t", detach=True):
            break
        before = await _until_waiting(client, "t")
    first.kill()

    second: SidecarProcess = spawn(config=str(config))
    async with AsyncSidecarClient(second.address) as client, asyncio.timeout(LONG_S):
        async for streamed in client.watch("t", after_sequence=len(before)):
            before.append(streamed)
            if isinstance(streamed.event, RunResumed):
                break
    second.kill()  # killed again, the rerun of w1 in flight or about to be
    (gate / "release").touch()

    third: SidecarProcess = spawn(config=str(config))
    async with AsyncSidecarClient(third.address) as client, asyncio.timeout(LONG_S):
        log = [e async for e in client.watch("t")]
    assert [e.sequence for e in log] == list(range(1, len(log) + 1))
    assert [e.event for e in log[: len(before)]] == [e.event for e in before]
    assert sum(isinstance(e.event, RunResumed) for e in log) == 2
    end = log[-1].event
    assert isinstance(end, RunCompleted)
    assert end.result.content == "twice done"
    assert sum(isinstance(e.event, ToolCallStarted) for e in log) == 2  # e1, w1


async def test_a_session_run_nobody_reattaches_to_fails_once_when_the_window_passes(
    spawn: Spawn, tmp_path: Path
) -> None:
    first: SidecarProcess = spawn()
    running = asyncio.Event()

    async def remote(text: str) -> dict[str, str]:
        """Wait until the test is done with the sidecar.

        Args:
            text: Anything.
        """
        running.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    script = [{"tool_calls": [{"id": "r1", "name": "remote", "arguments": {"text": "x"}}]}]

    async def hold() -> None:
        async for _ in client.session("go", tools=[remote], script=script, run_id="s"):
            pass

    async with AsyncSidecarClient(first.address) as client, asyncio.timeout(LONG_S):
        session = asyncio.create_task(hold())
        await running.wait()  # the sidecar sent the invocation: the call is in flight
        first.kill()
        await asyncio.gather(session, return_exceptions=True)

    second: SidecarProcess = spawn(session_reattach_s="0.5")
    async with AsyncSidecarClient(second.address) as client, asyncio.timeout(LONG_S):
        log = [e async for e in client.watch("s")]
    assert [e.sequence for e in log] == list(range(1, len(log) + 1))
    assert sum(isinstance(e.event, RunFailed) for e in log) == 1
    end = log[-1].event
    assert isinstance(end, RunFailed)
    assert "no client re-attached within session_reattach_s (0.5 s) of the restart" in end.message

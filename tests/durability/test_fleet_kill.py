"""The issue's kill test: one sidecar under 50 live runs (40 server-hosted, 10 Session runs
whose client hosts the tool) is killed with SIGKILL while every run is inside a tool call; a
second sidecar on the same Redis adopts them all once the dead one's lease expires and
finishes each exactly once. Idempotent calls run again; the others get the interrupted record.

The Session client reaches the fleet through one target naming both sidecars (as a load
balancer would): it re-attaches on its own (``reattach=True``) and lands on the survivor.
A watcher on the survivor follows every run from before the kill to its end.

The server tools wait for a release file and leave a file each time they begin (see
``test_resume``): the test knows what ran where without sleeping.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from cleveragents.client import AsyncSidecarClient, StreamedEvent
from cleveragents.sidecar.runs.recovery import ADOPTION_REASON
from cleveragents.tool import (
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunResumed,
    ToolCallCompleted,
    ToolCallProgress,
    ToolCallStarted,
    ToolRegistry,
)
from tests.conftest import ServeSidecar
from tests.redis_server import RedisServer

from .test_resume import TOOLS

LONG_S = 60
TERMINAL = (RunCompleted, RunFailed, RunCancelled)
SERVER_RUNS = {f"idem-{i}": "wait_idem" for i in range(20)} | {
    f"plain-{i}": "wait_plain" for i in range(20)
}
SESSION_RUNS = {f"s-idem-{i}": "remote_idem" for i in range(5)} | {
    f"s-plain-{i}": "remote_plain" for i in range(5)
}


def _script(tool: str, tag: str) -> list[dict[str, Any]]:
    return [
        {"tool_calls": [{"id": "w1", "name": tool, "arguments": {"tag": tag}}]},
        {"content": f"{tag} done"},
    ]


def _tag(run_id: str) -> str:
    return run_id.replace("-", "")


class ClientTools:
    """The Session client's tools: each call is counted, then waits until ``release``."""

    def __init__(self) -> None:
        self.registry = ToolRegistry()
        self.release = asyncio.Event()
        self.calls: dict[str, int] = {}
        self.started: dict[str, asyncio.Event] = {_tag(r): asyncio.Event() for r in SESSION_RUNS}

        async def wait(tag: str) -> dict[str, str]:
            self.calls[tag] = self.calls.get(tag, 0) + 1
            self.started[tag].set()
            await self.release.wait()
            return {"tag": tag}

        @self.registry.tool(idempotent=True)
        async def remote_idem(tag: str) -> dict[str, str]:
            """Wait for the release; safe to run twice.

            Args:
                tag: Names the call.
            """
            return await wait(tag)

        @self.registry.tool
        async def remote_plain(tag: str) -> dict[str, str]:
            """Wait for the release; not safe to run twice.

            Args:
                tag: Names the call.
            """
            return await wait(tag)


async def _session(
    client: AsyncSidecarClient, tools: ClientTools, run_id: str
) -> list[StreamedEvent]:
    """Run one Session run to its end, re-attaching after the kill; every event it yields."""
    tool = SESSION_RUNS[run_id]
    stream = client.session(
        "go", tools=tools.registry, script=_script(tool, _tag(run_id)), run_id=run_id,
        reattach=True,
    )  # fmt: skip
    return [streamed async for streamed in stream]


async def _watch(
    client: AsyncSidecarClient, run_id: str, in_call: asyncio.Event
) -> list[StreamedEvent]:
    """The whole log of ``run_id`` as one watcher sees it; ``in_call`` once its tool runs (a
    server tool reports its progress as it begins: its start may be stored before it runs)."""
    begun = ToolCallProgress if run_id in SERVER_RUNS else ToolCallStarted
    seen = []
    async for streamed in client.watch(run_id):
        seen.append(streamed)
        if isinstance(streamed.event, begun) and streamed.event.call_id == "w1":
            in_call.set()
    return seen


@pytest.fixture
def gate(tmp_path: Path) -> Path:
    gate = tmp_path / "gate"
    gate.mkdir()
    (tmp_path / "resume_tools.py").write_text(TOOLS.format(gate=str(gate)), encoding="utf-8")
    return gate


@pytest.fixture
async def tasks() -> AsyncIterator[list[asyncio.Task[Any]]]:
    """Tasks the test starts; any still running at its end are cancelled and awaited."""
    started: list[asyncio.Task[Any]] = []
    yield started
    for task in started:
        task.cancel()
    await asyncio.gather(*started, return_exceptions=True)


@pytest.mark.timeout(120)
async def test_fifty_live_runs_of_a_killed_sidecar_are_adopted_and_each_ends_exactly_once(
    serve_sidecar: ServeSidecar,
    redis_server: RedisServer,
    gate: Path,
    tasks: list[asyncio.Task[Any]],
) -> None:
    config = gate.parent / "sidecar.toml"
    config.write_text(
        f'tool_modules = ["resume_tools"]\npython_path = ["{gate.parent}"]\n', encoding="utf-8"
    )
    alpha, beta = await asyncio.gather(*(  # started side by side: each takes a while
        asyncio.to_thread(
            serve_sidecar, config=config, event_store=redis_server.url, sidecar_id=name,
            event_store_lease_s=1.0, session_reattach_s=30,
        )
        for name in ("alpha", "beta")
    ))  # fmt: skip
    fleet = f"ipv4:{alpha.address},{beta.address}"  # alpha first: it takes every run
    tools = ClientTools()
    in_call = {run_id: asyncio.Event() for run_id in [*SERVER_RUNS, *SESSION_RUNS]}
    async with (
        asyncio.timeout(LONG_S),
        AsyncSidecarClient(alpha.address) as on_alpha,
        AsyncSidecarClient(fleet) as through_fleet,
        AsyncSidecarClient(beta.address) as on_beta,
    ):
        for run_id, tool in SERVER_RUNS.items():
            script = _script(tool, _tag(run_id))
            async for _ in on_alpha.stream_tool_loop(
                "go", script=script, run_id=run_id, detach=True
            ):
                break  # detached: the run goes on without this stream
        sessions = {
            run_id: asyncio.create_task(_session(through_fleet, tools, run_id))
            for run_id in SESSION_RUNS
        }
        tasks.extend(sessions.values())
        for run_id in SESSION_RUNS:
            await tools.started[_tag(run_id)].wait()
        watchers = {
            run_id: asyncio.create_task(_watch(on_beta, run_id, event))
            for run_id, event in in_call.items()
        }
        tasks.extend(watchers.values())
        for event in in_call.values():
            await event.wait()  # every run is inside its tool call, and watched from beta
        alpha.process.kill()
        alpha.process.wait(10)
        (gate / "release").touch()
        tools.release.set()
        watched = {run_id: await task for run_id, task in watchers.items()}
        seen = {run_id: await task for run_id, task in sessions.items()}
        logs = {run_id: [e async for e in on_beta.watch(run_id)] for run_id in in_call}
        states = {run_id: (await on_beta.get_run(run_id)).state for run_id in in_call}

    ended_otherwise = {  # a run that did not complete, with how its log ends
        run_id: [str(e.event)[:400] for e in logs[run_id][-3:]]
        for run_id, state in states.items()
        if state != "completed"
    }
    assert set(states.values()) == {"completed"}, ended_otherwise
    for run_id, log in logs.items():
        assert [e.sequence for e in log] == list(range(1, len(log) + 1)), run_id
        assert [e.event for e in watched[run_id]] == [e.event for e in log], run_id
        assert sum(isinstance(e.event, TERMINAL) for e in log) == 1, run_id
        assert isinstance(log[-1].event, RunCompleted), run_id
        assert log[-1].event.result.content == f"{_tag(run_id)} done"
        [resumed] = [e.event for e in log if isinstance(e.event, RunResumed)]
        assert resumed.reason == ADOPTION_REASON, run_id
        [record] = [e.event.record for e in log if isinstance(e.event, ToolCallCompleted)]
        if "idem" in run_id:  # ran again on beta, with its result
            assert (resumed.rerun_call_ids, resumed.interrupted_call_ids) == (("w1",), ())
            assert record.success, run_id
        else:
            assert (resumed.rerun_call_ids, resumed.interrupted_call_ids) == ((), ("w1",))
            assert not record.success
            assert "interrupted by a sidecar restart" in (record.error or "")
    started = sorted(os.listdir(gate))
    for run_id in SERVER_RUNS:  # idempotent server tools ran again on beta; the others once
        runs = [name for name in started if name.startswith(f"started-{_tag(run_id)}-")]
        assert len(runs) == (2 if "idem" in run_id else 1), run_id
    for run_id, events in seen.items():  # the client saw its run whole, each event once
        assert [e.sequence for e in events] == [e.sequence for e in logs[run_id]], run_id
    assert tools.calls == {_tag(run_id): 1 for run_id in SESSION_RUNS}  # answered, not rerun

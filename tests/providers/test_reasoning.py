"""Reasoning items in the run's log: a Responses API run that restarts between two turns
passes its encrypted reasoning back exactly as the run that received it would have, and
reasoning too large for one event is left out of the log, not the live conversation.

The restart is a crash, without the cost of a process: the SQLite log is copied (SQLite's
backup, which sees only committed transactions, as a killed process leaves them) while the
second LLM call hangs, and a new sidecar with the same id opens the copy and resumes the run.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from cleveragents.client import AsyncSidecarClient
from cleveragents.sidecar import ProfileConfig, Sidecar, SidecarConfig
from cleveragents.sidecar.builtin_tools import builtin_registry
from cleveragents.tool import IterationStarted, LLMResponded, RunCompleted, RunResumed
from cleveragents.toolruntime.v1 import service_pb2, service_pb2_grpc

from . import streams
from .conftest import SECRET, FakeProvider, Reply, sse

KEY_ENV = "CLEVERAGENTS_TEST_PROVIDER_KEY"
ENCRYPTED = {
    "id": "rs_68af4030baa48193b0b43b4c2a176a1a02d7b6d7dad0ef4e",
    "type": "reasoning",
    "summary": [{"type": "summary_text", "text": "**Echoing the word**\n\nCall echo once."}],
    "encrypted_content": "gAAAAABor0AxvF8kZ3F1bWc2x-3Zg0tOQ2ZKp1fJ_bd4oFh7Yx0wq9Q==",
}
Start = Callable[..., Awaitable[tuple[Sidecar, AsyncSidecarClient]]]


@pytest.fixture
async def start(provider: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Start]:
    """Start a sidecar (on the SQLite log at ``db``, if given) with a ``resp`` profile
    (store = false) aimed at the fake provider; always the same sidecar id, as a restarted
    one has. Keyword arguments are more settings."""
    monkeypatch.setenv(KEY_ENV, SECRET)
    made: list[tuple[Sidecar, AsyncSidecarClient]] = []

    async def make(db: Path | None = None, **fields: Any) -> tuple[Sidecar, AsyncSidecarClient]:
        profile = ProfileConfig(
            "resp", "openai_responses", model="o4-mini", base_url=f"{provider.url}/v1",
            api_key_env=KEY_ENV, max_retries=0, params={"store": False},
        )  # fmt: skip
        config = SidecarConfig(
            listen="127.0.0.1:0", log_format="json", profiles={"resp": profile},
            event_store=str(db or ""), sidecar_id="reasoning-sidecar", **fields,
        )  # fmt: skip
        sidecar = Sidecar(config, registry=builtin_registry())
        await sidecar.start()
        made.append((sidecar, AsyncSidecarClient(sidecar.address)))
        return made[-1]

    yield make
    for sidecar, client in reversed(made):
        await client.close()
        await sidecar.stop(0.2)


def _first_turn(reasoning: dict[str, Any] = ENCRYPTED) -> dict[str, Any]:
    first = streams.responses_body("", (("call_1", "echo", '{"text": "one"}'),))
    return {**first, "store": False, "output": [reasoning, *first["output"]]}


async def _until_second_call(client: AsyncSidecarClient, run_id: str) -> list[Any]:
    """The run's logged events up to the start of its second LLM call (stored, so a crash
    now leaves them all in the file)."""
    seen = []
    async for streamed in client.watch(run_id):
        seen.append(streamed.event)
        if isinstance(streamed.event, IterationStarted) and streamed.event.iteration == 2:
            return seen
    raise AssertionError("the run ended before its second LLM call")


async def test_a_resumed_run_passes_back_the_encrypted_reasoning_of_the_turn_before(
    provider: FakeProvider, start: Start, tmp_path: Path
) -> None:
    # The first turn; the live run's second call never gets an answer; the resumed one's does.
    provider.queue(sse(streams.responses_stream(_first_turn())), Reply(hang=True))
    provider.queue(sse(streams.responses_stream(streams.responses_body("Echoed one."))))
    _, client = await start(tmp_path / "live.sqlite")
    async with asyncio.timeout(10):
        async for _ in client.stream_tool_loop(
            "Echo one.", profile="resp", run_id="r1", detach=True
        ):
            break  # detached: the run goes on without this stream
        before = await _until_second_call(client, "r1")
        with (
            sqlite3.connect(tmp_path / "live.sqlite") as source,
            sqlite3.connect(tmp_path / "crashed.sqlite") as copy,
        ):
            source.backup(copy)  # what the log holds if the process dies now
        await provider.wait_for_requests(2)  # the live run's second call, left hanging

        _, restarted = await start(tmp_path / "crashed.sqlite")
        after = [e.event async for e in restarted.watch("r1")]

    assert len(provider.requests) == 3
    uninterrupted, resumed = provider.requests[1], provider.requests[2]
    assert resumed.raw == uninterrupted.raw  # byte for byte what the live run sent
    assert resumed.body["input"][1] == ENCRYPTED
    assert resumed.body["include"] == ["reasoning.encrypted_content"]
    assert [item.get("type") for item in resumed.body["input"][1:]] == [
        "reasoning", "function_call", "function_call_output",
    ]  # fmt: skip
    (responded,) = [e for e in before if isinstance(e, LLMResponded)]
    assert responded.reasoning is not None
    assert responded.reasoning.provider == "openai_responses"
    assert responded.reasoning.summary == "**Echoing the word**\n\nCall echo once."
    assert any(isinstance(e, RunResumed) for e in after)
    assert isinstance(after[-1], RunCompleted)
    assert after[-1].result.content == "Echoed one."


async def test_reasoning_too_large_for_an_event_is_logged_without_its_items_and_still_sent(
    provider: FakeProvider, start: Start
) -> None:
    big = {**ENCRYPTED, "encrypted_content": "gAAAAAB" + "x" * (200 * 1024)}
    provider.queue(
        sse(streams.responses_stream(_first_turn(big))),
        sse(streams.responses_stream(streams.responses_body("Echoed one."))),
    )
    sidecar, client = await start(max_message_bytes=64 * 1024)

    result = await client.run_tool_loop("Echo one.", profile="resp", run_id="r1", timeout=10)

    assert result.content == "Echoed one."
    assert provider.bodies()[1]["input"][1] == big  # the live conversation kept it
    async with grpc.aio.insecure_channel(sidecar.address) as channel:
        stub = service_pb2_grpc.ToolRuntimeServiceStub(channel)
        watched = [r.event async for r in stub.WatchRun(service_pb2.WatchRunRequest(run_id="r1"))]
    responded = next(e.llm_responded for e in watched if e.HasField("llm_responded"))
    reasoning = responded.reasoning
    assert (reasoning.items, reasoning.items_omitted) == ("", True)
    assert reasoning.items_bytes > 200 * 1024
    assert reasoning.summary == "**Echoing the word**\n\nCall echo once."
    assert [c.id for c in responded.tool_calls] == ["call_1"]

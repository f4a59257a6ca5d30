"""`make bench`'s message counts: the gRPC messages a Session iteration takes each way.

A raw Session client (the generated stub, no client library) hosts the no-op tool that the
sidecar's scripted LLM calls each iteration, as the session rows of ``run.py`` do, and counts
the messages read and written, with ``batch_events`` (what the Python, Node.js and Go clients
set: the events before an invocation ride in its message) and without (one event a message).
With a client-hosted LLM as well, an iteration is two exchanges: the LLM's and the tool's.
What the protocol needs is one message each way an exchange.

Run alone: .venv/bin/python bench/session_messages.py TARGET
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass
from typing import Any

import grpc

from cleveragents.toolruntime.v1 import service_pb2_grpc, session_pb2, types_pb2

ITERATIONS = 50


@dataclass(frozen=True)
class Counts:
    """One session's messages, each way, per iteration."""

    iterations: int
    received: int
    sent: int

    @property
    def received_per_iteration(self) -> float:
        return self.received / self.iterations

    @property
    def sent_per_iteration(self) -> float:
        """The client's messages per iteration, its opening ``start`` not counted."""
        return (self.sent - 1) / self.iterations


async def count(target: str, *, batch_events: bool, client_llm: bool) -> Counts:
    """One ``ITERATIONS``-iteration session's messages."""
    turns: list[dict[str, Any]] = [
        {"tool_calls": [{"id": f"c{i}", "name": "client_noop", "arguments": {}}]}
        for i in range(ITERATIONS - 1)
    ]
    turns.append({"content": "done"})
    spec = types_pb2.RunSpec(prompt="go", max_iterations=ITERATIONS, no_server_tools=True)
    if not client_llm:
        spec.llm.script = json.dumps(turns)
    start = session_pb2.SessionStart(
        spec=spec,
        tools=[types_pb2.ToolSpec(name="client_noop", description="Do nothing.")],
        client_llm=client_llm,
        batch_events=batch_events,
    )
    received = sent = 0
    answered = 0
    async with grpc.aio.insecure_channel(target) as channel:
        call: Any = service_pb2_grpc.ToolRuntimeServiceStub(channel).Session()

        async def write(request: session_pb2.SessionRequest) -> None:
            nonlocal sent
            sent += 1
            await call.write(request)

        await write(session_pb2.SessionRequest(start=start))
        while (response := await call.read()) is not grpc.aio.EOF:
            received += 1
            events = [*response.events, *([response.event] if response.HasField("event") else [])]
            for event in events:
                if event.WhichOneof("payload") in ("run_completed", "run_failed", "run_cancelled"):
                    if not event.HasField("run_completed"):
                        raise RuntimeError(f"the session ended with {event}")
                    await call.done_writing()
            if response.HasField("tool_invocation"):
                result = session_pb2.ToolResult(
                    call_id=response.tool_invocation.call_id, output="{}"
                )
                await write(session_pb2.SessionRequest(tool_result=result))
            if response.HasField("llm_invocation"):
                invocation = response.llm_invocation
                turn = turns[answered]
                answered += 1
                answer = session_pb2.LlmResult(
                    request_id=invocation.request_id, content=turn.get("content", "")
                )
                for tool_call in turn.get("tool_calls", []):
                    answer.tool_calls.add(
                        id=tool_call["id"], name=tool_call["name"], arguments="{}"
                    )
                await write(session_pb2.SessionRequest(llm_result=answer))
    return Counts(ITERATIONS, received, sent)


async def measure(target: str) -> list[tuple[str, Counts]]:
    """The counts with and without ``batch_events``, the LLM the sidecar's or the client's."""
    cases = []
    for client_llm in (False, True):
        for batch_events in (True, False):
            name = (
                f"{'client LLM + tool' if client_llm else 'client tool'}, "
                f"{'batch_events' if batch_events else 'one event a message'}"
            )
            cases.append(
                (name, await count(target, batch_events=batch_events, client_llm=client_llm))
            )
    return cases


def report(cases: list[tuple[str, Counts]]) -> None:
    print(
        f"\nSession messages an iteration ({ITERATIONS} iterations; the protocol needs one each "
        "way an exchange: 1 for a client tool, 2 with a client-hosted LLM too)"
    )
    for name, counts in cases:
        print(
            f"  {name:42} sidecar -> client {counts.received_per_iteration:5.2f}   "
            f"client -> sidecar {counts.sent_per_iteration:5.2f}"
        )


if __name__ == "__main__":
    report(asyncio.run(measure(sys.argv[1])))

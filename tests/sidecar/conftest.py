"""Shared fixtures, fakes and helpers for the integration tests of the gRPC sidecar.

Every test talks to a real ``grpc.aio`` server bound to a real socket (port 0) in the test's
own event loop, so server-side tools can be steered with ``asyncio.Event``s. Tests import the
helpers with ``from .conftest import ...``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import sys
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Mapping,
    Sequence,
)
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
import pytest

from cleveragents.client import AsyncSidecarClient, StreamedEvent
from cleveragents.sidecar import ProfileConfig, Sidecar, SidecarConfig, configure_logging
from cleveragents.tool import (
    LLMRequest,
    LLMResponse,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunStarted,
    ScriptedLLMCaller,
    ToolCallCompleted,
    ToolCallRunResult,
    ToolCallStarted,
    ToolError,
    ToolRegistry,
    ToolSpec,
    current_call,
)
from cleveragents.toolruntime.v1 import events_pb2, service_pb2_grpc, session_pb2, types_pb2

LoopFactory = Callable[[], asyncio.AbstractEventLoop]
_new_uvloop: LoopFactory | None
try:
    import uvloop

    _new_uvloop = uvloop.new_event_loop
except ImportError:  # not on Windows or PyPy: the sidecar serves on asyncio's loop there
    _new_uvloop = None

#: The sidecar's command line, in the same environment as the tests.
CLI = str(Path(sys.executable).parent / "cleveragents-sidecar")
#: A fresh interpreter importing the sidecar: seconds on a loaded machine.
CLI_WAIT_S = 20.0


@contextlib.asynccontextmanager
async def cli_sidecar(
    *args: str, env: Mapping[str, str] | None = None
) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    """``cleveragents-sidecar serve`` on a free loopback port with ``args`` (and ``env``), and
    the address it printed; killed on the way out if the test left it running."""
    process = await asyncio.create_subprocess_exec(
        CLI, "serve", "--listen", "127.0.0.1:0", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=dict(env) if env is not None else None,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        async with asyncio.timeout(CLI_WAIT_S):
            line = (await process.stdout.readline()).decode().strip()
        prefix = "cleveragents-sidecar listening on "
        assert line.startswith(prefix), line
        yield process, line.removeprefix(prefix)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def terminate(process: asyncio.subprocess.Process) -> int:
    """Send SIGTERM; the exit code once the process has stopped."""
    process.send_signal(signal.SIGTERM)
    async with asyncio.timeout(CLI_WAIT_S):
        return await process.wait()


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> dict[str, LoopFactory]:
    """Every async sidecar test runs on each loop the sidecar may serve on (``event_loop``)."""
    factories: dict[str, LoopFactory] = {"asyncio": asyncio.new_event_loop}
    if _new_uvloop is not None:
        factories["uvloop"] = _new_uvloop
    return factories


if TYPE_CHECKING:
    from cleveragents.toolruntime.v1.service_pb2_grpc import ToolRuntimeServiceAsyncStub

SessionCall = grpc.aio.StreamStreamCall[session_pb2.SessionRequest, session_pb2.SessionResponse]
T = TypeVar("T")
SidecarFactory = Callable[..., Awaitable[Sidecar]]
TERMINAL = (RunCompleted, RunFailed, RunCancelled)
#: How long a test waits for something that should happen promptly.
WAIT_S = 5.0


# -- server-side tools -------------------------------------------------------------------------


class ServerTools:
    """The server's tools for one test, with the events and lists tests observe.

    ``echo`` returns its text; ``hang`` waits forever and, in its ``finally``, appends its
    call id to ``hang_finalised`` and sets ``hang_ended``; ``gate`` waits for ``release``;
    ``fail`` raises ``ToolError("boom")``.
    """

    def __init__(self) -> None:
        self.registry = ToolRegistry()
        self.echo_texts: list[str] = []
        self.hang_started = asyncio.Event()
        self.hang_ended = asyncio.Event()
        self.hang_finalised: list[str] = []
        self.gate_started = asyncio.Event()
        self.release = asyncio.Event()
        self.registry.register(
            ToolSpec(
                "echo",
                "Return the text.",
                {"type": "object", "properties": {"text": {"type": "string"}}},
            ),
            self._echo,
        )
        self.registry.register(ToolSpec("hang", "Never returns."), self._hang)
        self.registry.register(ToolSpec("gate", "Returns once released."), self._gate)
        self.registry.register(ToolSpec("fail", "Always fails."), self._fail)

    async def _echo(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        text = str(inputs.get("text", ""))
        self.echo_texts.append(text)
        return {"text": text}

    async def _hang(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        scope = current_call()
        self.hang_started.set()
        try:
            await asyncio.Event().wait()
        finally:
            self.hang_finalised.append(scope.call.id if scope is not None else "")
            self.hang_ended.set()
        raise AssertionError("unreachable")

    async def _gate(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        self.gate_started.set()
        await self.release.wait()
        return {"released": True}

    async def _fail(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        raise ToolError("boom")

    async def wait_hang_ended(self) -> None:
        """Wait (bounded) until a ``hang`` call has run its ``finally``."""
        async with asyncio.timeout(WAIT_S):
            await self.hang_ended.wait()


# -- hand-written client-side LLM fakes ----------------------------------------------------------


def recording_llm(responses: Sequence[LLMResponse]) -> ScriptedLLMCaller:
    """A client-hosted LLM answering from ``responses`` in order and keeping every request."""
    return ScriptedLLMCaller(responses, record=True)


class RaisingLLM:
    """A client-hosted LLM that always raises ``RuntimeError(message)``."""

    def __init__(self, message: str) -> None:
        self.message = message
        self.calls = 0

    async def call(self, request: LLMRequest) -> LLMResponse:
        self.calls += 1
        raise RuntimeError(self.message)


class FailingProvider:
    """An OpenAI-compatible endpoint on loopback that answers its queued completions (each a
    list of ``(call id, tool, arguments)``), then 503 ``overloaded``: an LLM that fails as a
    real one does, after the run has made some progress (``UNAVAILABLE``: worth a retry)."""

    def __init__(self) -> None:
        self.completions: list[list[tuple[str, str, dict[str, Any]]]] = []
        self.server: asyncio.Server | None = None

    @property
    def base_url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1"

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").lower()
                length = int(head.partition("content-length:")[2].split("\r\n")[0] or 0)
                await reader.readexactly(length)
                status, body = self._reply()
                data = json.dumps(body).encode()
                writer.write(
                    f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n"
                    f"content-length: {len(data)}\r\n\r\n".encode()
                    + data
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def _reply(self) -> tuple[int, dict[str, Any]]:
        if not self.completions:
            return 503, {"error": {"message": "the model is overloaded", "type": "overloaded"}}
        calls = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, n, a in self.completions.pop(0)
        ]
        message = {"role": "assistant", "content": None, "tool_calls": calls}
        choice = {"index": 0, "message": message, "finish_reason": "tool_calls"}
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        return 200, {"id": "x", "object": "chat.completion", "choices": [choice], "usage": usage}


# -- scripts and specs ---------------------------------------------------------------------------


def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    """One scripted tool call."""
    return {"id": call_id, "name": name, "arguments": arguments}


def turn(content: str = "", *calls: dict[str, Any]) -> dict[str, Any]:
    """One scripted LLM turn."""
    out: dict[str, Any] = {"content": content}
    if calls:
        out["tool_calls"] = list(calls)
    return out


def echo_script(n: int = 1) -> list[dict[str, Any]]:
    """``n`` turns each calling ``echo`` once (ids ``c1``..), then a final ``done``."""
    turns = [turn(f"step {i}", call(f"c{i}", "echo", text=f"t{i}")) for i in range(1, n + 1)]
    return [*turns, turn("done")]


def run_spec(
    script: Sequence[Mapping[str, Any]] | None = None,
    *,
    prompt: str = "do it",
    **fields: Any,
) -> types_pb2.RunSpec:
    """A ``RunSpec`` for raw stubs, with an inline script on the ``scripted`` profile."""
    spec = types_pb2.RunSpec(prompt=prompt, **fields)
    if script is not None:
        spec.llm.script = json.dumps(list(script))
    return spec


def session_start(
    spec: types_pb2.RunSpec, *tools: types_pb2.ToolSpec, client_llm: bool = False
) -> session_pb2.SessionRequest:
    """The first message of a raw session."""
    return session_pb2.SessionRequest(
        start=session_pb2.SessionStart(spec=spec, tools=list(tools), client_llm=client_llm)
    )


def tool_result(call_id: str, output: str | None = None, error: str | None = None) -> Any:
    """A raw ``tool_result`` message (``output`` is JSON text)."""
    result = session_pb2.ToolResult(call_id=call_id)
    if error is not None:
        result.error = error
    else:
        result.output = output if output is not None else "{}"
    return session_pb2.SessionRequest(tool_result=result)


# -- reading streams -----------------------------------------------------------------------------


async def collect(
    stream: AsyncIterator[StreamedEvent], timeout: float = WAIT_S
) -> list[StreamedEvent]:
    """Every event of a client stream, failing the test if it does not end in time."""
    events: list[StreamedEvent] = []
    async with asyncio.timeout(timeout):
        async for event in stream:
            events.append(event)
    return events


async def until_tool_started(
    stream: AsyncIterator[StreamedEvent], tool: str | None = None
) -> list[StreamedEvent]:
    """Read ``stream`` until a call (of ``tool``, if given) starts; the events read so far."""
    seen: list[StreamedEvent] = []
    async with asyncio.timeout(WAIT_S):
        async for event in stream:
            seen.append(event)
            if isinstance(event.event, ToolCallStarted) and tool in (None, event.event.tool_name):
                return seen
    raise AssertionError(f"no call of {tool or 'any tool'} started")


async def watch_to_end(client: AsyncSidecarClient, run_id: str) -> list[StreamedEvent]:
    """The whole log of a run, waiting for its end."""
    return await collect(client.watch(run_id))


async def next_response(call: SessionCall, timeout: float = WAIT_S) -> session_pb2.SessionResponse:
    """The next message of a raw session (fails the test at end of stream)."""
    async with asyncio.timeout(timeout):
        response = await call.read()
    assert response is not grpc.aio.EOF, "the session ended early"
    assert isinstance(response, session_pb2.SessionResponse)
    return response


async def read_until_invocation(
    call: SessionCall, events: list[events_pb2.RunEvent] | None = None
) -> session_pb2.ToolInvocation:
    """Read a raw session until a tool invocation arrives; events go to ``events``."""
    while True:
        response = await next_response(call)
        if response.HasField("tool_invocation"):
            return response.tool_invocation
        if events is not None and response.HasField("event"):
            events.append(response.event)


async def drain_session(call: SessionCall) -> list[events_pb2.RunEvent]:
    """Read a raw session to its end (status not checked); the events received."""
    events: list[events_pb2.RunEvent] = []
    async with asyncio.timeout(WAIT_S):
        while (response := await call.read()) is not grpc.aio.EOF:
            assert isinstance(response, session_pb2.SessionResponse)
            if response.HasField("event"):
                events.append(response.event)
    return events


async def rpc_code(awaitable: Awaitable[Any]) -> tuple[grpc.StatusCode, str]:
    """The status code and details an RPC fails with (fails the test if it succeeds)."""
    try:
        async with asyncio.timeout(WAIT_S):
            await awaitable
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details() or ""
    raise AssertionError("the RPC succeeded")


async def stream_code(
    call: grpc.aio.UnaryStreamCall[Any, Any] | grpc.aio.StreamStreamCall[Any, Any],
) -> tuple[grpc.StatusCode, str]:
    """Read a raw stream to its end; the status code and details it ended with."""
    async with asyncio.timeout(WAIT_S):
        try:
            while await call.read() is not grpc.aio.EOF:
                pass
        except grpc.aio.AioRpcError as exc:
            return exc.code(), exc.details() or ""
        code = await call.code()
        details = await call.details()
    return code, details or ""


async def read_to_status(
    call: grpc.aio.UnaryStreamCall[Any, Any] | SessionCall,
) -> tuple[list[Any], grpc.StatusCode, str]:
    """Every message of a raw stream, then the status code and details it ended with."""
    messages: list[Any] = []
    async with asyncio.timeout(WAIT_S):
        try:
            while (message := await call.read()) is not grpc.aio.EOF:
                messages.append(message)
        except grpc.aio.AioRpcError as exc:
            return messages, exc.code(), exc.details() or ""
        return messages, await call.code(), await call.details() or ""


def as_generator(stream: AsyncIterator[T]) -> AsyncGenerator[T, None]:
    """A client stream as the async generator it is (to ``aclose`` it)."""
    assert isinstance(stream, AsyncGenerator)
    return stream


# -- checking logs ----------------------------------------------------------------------------


def kinds(events: Sequence[StreamedEvent]) -> list[str]:
    """The event types' names, in order."""
    return [type(e.event).__name__ for e in events]


def assert_well_formed(events: Sequence[StreamedEvent]) -> None:
    """The invariants of every run log: gap-free sequences from 1, one run id, run_started
    first, exactly one terminal event (last), one started and one completed per call id."""
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert len({e.run_id for e in events}) == 1
    assert isinstance(events[0].event, RunStarted)
    terminal = [e for e in events if isinstance(e.event, TERMINAL)]
    assert terminal == [events[-1]]
    started = [e.event.call_id for e in events if isinstance(e.event, ToolCallStarted)]
    completed = [e.event.record.call_id for e in events if isinstance(e.event, ToolCallCompleted)]
    assert len(started) == len(set(started))
    assert sorted(started) == sorted(completed)


def pb_sequences(events: Sequence[events_pb2.RunEvent]) -> list[int]:
    """The sequence numbers of raw events."""
    return [e.sequence for e in events]


def comparable(result: ToolCallRunResult) -> ToolCallRunResult:
    """``result`` without what differs between two runs of one script: run id and timings."""
    history = tuple(
        dataclasses.replace(r, duration_ms=0.0, started_at=0.0) for r in result.tool_call_history
    )
    return dataclasses.replace(result, run_id="", tool_call_history=history)


# -- a fake network ------------------------------------------------------------------------------


class LaggingProxy:
    """A TCP proxy in front of the sidecar, standing for the network between a client and it.

    ``lag(seconds, during=...)`` gives each client-to-server chunk read in the next ``during``
    seconds a latency of ``seconds`` (order kept, latencies do not add up), as a slow uplink
    would. Server-to-client bytes always pass at once.
    """

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self._target = (host, int(port))
        self._windows: list[tuple[float, float, float]] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: list[asyncio.StreamWriter] = []
        self.address = ""

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.address = f"127.0.0.1:{port}"
        return self.address

    def lag(self, seconds: float, *, during: float = 60.0) -> None:
        now = asyncio.get_running_loop().time()
        self._windows.append((now, now + during, seconds))

    def retarget(self, target: str) -> None:
        """Send the connections made from now on to ``target`` (a load balancer picking another
        backend); those open stay where they are."""
        host, port = target.rsplit(":", 1)
        self._target = (host, int(port))

    def cut(self) -> None:
        """Drop every connection through the proxy at once, as a network failure would (new
        connections are still accepted)."""
        for writer in self._writers:
            writer.transport.abort()
        self._writers.clear()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in self._writers:
            writer.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _lag_at(self, moment: float) -> float:
        return max((lag for start, end, lag in self._windows if start <= moment < end), default=0)

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self._target)
        self._writers += [writer, up_writer]
        uplink: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        self._spawn(self._read(reader, uplink))
        self._spawn(self._deliver(uplink, up_writer))
        self._spawn(self._pipe(up_reader, writer))

    async def _read(
        self, reader: asyncio.StreamReader, uplink: asyncio.Queue[tuple[float, bytes]]
    ) -> None:
        loop = asyncio.get_running_loop()
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                now = loop.time()
                uplink.put_nowait((now + self._lag_at(now), data))
        uplink.put_nowait((0.0, b""))

    async def _deliver(
        self, uplink: asyncio.Queue[tuple[float, bytes]], writer: asyncio.StreamWriter
    ) -> None:
        loop = asyncio.get_running_loop()
        try:
            while (item := await uplink.get())[1]:
                release_at, data = item
                if (wait := release_at - loop.time()) > 0:
                    await asyncio.sleep(wait)  # the simulated latency, not a synchronisation
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()


# -- fixtures --------------------------------------------------------------------------------


@pytest.fixture(scope="session", autouse=True)
def _quiet_logs() -> None:
    configure_logging("console", "error")


@pytest.fixture
def server_tools() -> ServerTools:
    """Fresh server-side tools (their events belong to the test's loop)."""
    return ServerTools()


@pytest.fixture
async def make_sidecar(server_tools: ServerTools) -> AsyncIterator[SidecarFactory]:
    """Start sidecars with ``SidecarConfig`` overrides; all are stopped after the test."""
    started: list[Sidecar] = []

    async def make(**settings: Any) -> Sidecar:
        settings.setdefault("listen", "127.0.0.1:0")
        settings.setdefault("log_format", "console")
        settings.setdefault("sandbox_roots", (os.environ["CLEVERAGENTS_SIDECAR_SANDBOX_ROOTS"],))
        sidecar = Sidecar(SidecarConfig(**settings), registry=server_tools.registry)
        await sidecar.start()
        started.append(sidecar)
        return sidecar

    yield make
    for sidecar in started:
        await sidecar.stop(0.2)


@pytest.fixture
async def sidecar(make_sidecar: SidecarFactory) -> Sidecar:
    """A sidecar with the default settings and the test tools."""
    return await make_sidecar()


@pytest.fixture
async def failing_provider() -> AsyncIterator[FailingProvider]:
    """A loopback OpenAI endpoint that fails once its queued completions are used."""
    provider = FailingProvider()
    await provider.start()
    yield provider
    await provider.close()


@pytest.fixture
async def failing_sidecar(
    make_sidecar: SidecarFactory, failing_provider: FailingProvider
) -> Sidecar:
    """A sidecar whose default LLM profile (``openai``, no retries) is ``failing_provider``."""
    profile = ProfileConfig(
        "failing", "openai", model="m", base_url=failing_provider.base_url, api_key_env="",
        max_retries=0,
    )  # fmt: skip
    return await make_sidecar(profiles={"failing": profile}, default_profile="failing")


@pytest.fixture
async def client(sidecar: Sidecar) -> AsyncIterator[AsyncSidecarClient]:
    """The asyncio client, connected to ``sidecar``."""
    async with AsyncSidecarClient(sidecar.address) as c:
        yield c


@pytest.fixture
async def channel(sidecar: Sidecar) -> AsyncIterator[grpc.aio.Channel]:
    """A raw channel to ``sidecar``."""
    async with grpc.aio.insecure_channel(sidecar.address) as ch:
        yield ch


@pytest.fixture
def stub(channel: grpc.aio.Channel) -> ToolRuntimeServiceAsyncStub:
    """The generated stub on ``channel``."""
    return service_pb2_grpc.ToolRuntimeServiceStub(channel)


@pytest.fixture
async def proxy(sidecar: Sidecar) -> AsyncIterator[LaggingProxy]:
    """A lagging proxy in front of ``sidecar``."""
    lagging = LaggingProxy(sidecar.address)
    await lagging.start()
    yield lagging
    await lagging.close()


@pytest.fixture
async def proxied(proxy: LaggingProxy) -> AsyncIterator[AsyncSidecarClient]:
    """An asyncio client talking to the sidecar through ``proxy``, its connection warm."""
    async with AsyncSidecarClient(proxy.address) as c:
        await c.list_tools()
        yield c

"""One MCP server's connection, kept up for as long as the sidecar serves.

``McpConnection.run`` is a task the sidecar owns: it starts the server (a stdio command in its
own process group, through ``stdio.py``'s transport, which stops it as a group and reads a
line of any size without stalling the event loop; or a Streamable HTTP session),
sends ``initialize`` with the sidecar's name and version, lists the tools (every page), and
waits. When the server dies or the connection fails it reconnects after a backoff that doubles
from 0.5 s to 30 s (back to 0.5 s after a connection that lasted). Meanwhile calls fail at once
with a record saying the server is unavailable and why: a run never waits for a server that
is down. ``notifications/tools/list_changed`` lists the tools again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from importlib import metadata
from typing import Any

import anyio
import pydantic
import structlog
from anyio.abc import ObjectReceiveStream, ObjectSendStream
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

from cleveragents.sidecar.config.mcp import McpServerConfig, expand_env
from cleveragents.sidecar.mcp.commands import locate_command
from cleveragents.sidecar.mcp.stdio import MessageTooLarge, stdio_transport
from cleveragents.sidecar.observability.throttle import LogThrottle
from cleveragents.tool import ToolError

__all__ = ["McpConnection", "ToolsListed"]

log = structlog.get_logger("cleveragents.sidecar.mcp")

#: Called with the connection and its tools each time they are listed.
ToolsListed = Callable[["McpConnection", list[types.Tool]], None]

#: How long starting, initializing and listing the tools may take before the attempt fails.
START_TIMEOUT_S = 30.0
_FIRST_BACKOFF_S = 0.5
_MAX_BACKOFF_S = 30.0
#: A connection that lasted this long resets the backoff.
_STABLE_S = 10.0
_MAX_PAGES = 1000


def _client_info() -> types.Implementation:
    try:
        version = metadata.version("cleveragents-sidecar")
    except metadata.PackageNotFoundError:  # pragma: no cover - run from a bare checkout
        version = "0"
    return types.Implementation(name="cleveragents-sidecar", version=version)


class McpConnection:
    """The live session with one MCP server, or why there is none (``state``, ``problem``)."""

    def __init__(
        self, config: McpServerConfig, on_tools: ToolsListed, log_interval_s: float = 1.0
    ) -> None:
        self.config = config
        #: Its "not JSON-RPC" warnings: at most one per ``log_interval_s``, the rest counted.
        self._skip_log = LogThrottle(log_interval_s)
        self.state = "starting"
        self.problem = ""
        #: Connections lost or failed, since the sidecar started (a metric).
        self.failures = 0
        #: The server's name and version as it gave them in ``initialize``.
        self.server_info: types.Implementation | None = None
        self._on_tools = on_tools
        self._session: ClientSession | None = None
        self._settled = asyncio.Event()
        self._up = asyncio.Event()
        self._tools_changed: anyio.Event | None = None
        #: How many times its tools have been listed; ``listed_after`` waits for the next.
        self.listings = 0
        self._listed = asyncio.Event()
        #: Why the current connection is being dropped although the server still runs.
        self._broken = ""
        #: Whether ``initialize`` has been answered on the current connection: before, lines
        #: that are not JSON (a banner) are skipped rather than fatal.
        self._initialized = False

    async def settled(self) -> None:
        """Wait until the first attempt to connect has succeeded or failed."""
        await self._settled.wait()

    async def listed_after(self, listings: int) -> None:
        """Wait until the tools have been listed more than ``listings`` times."""
        while self.listings <= listings:
            await self._listed.wait()

    def _publish(self, tools: list[types.Tool]) -> None:
        self._on_tools(self, tools)
        self.listings += 1
        self._listed.set()
        self._listed = asyncio.Event()

    async def up(self) -> None:
        """Wait until the server is connected (now, or after a restart)."""
        await self._up.wait()

    async def run(self) -> None:
        """Connect, and reconnect with backoff whenever the connection is lost; until cancelled."""
        delay = _FIRST_BACKOFF_S
        while True:
            began = time.monotonic()
            try:
                await self._connect_once()
                problem = "the server closed the connection"
            except Exception as exc:
                problem = self._broken or describe(exc)
            self._session = None
            self._up.clear()
            self.state, self.problem = "down", problem
            self.failures += 1
            self._settled.set()
            if time.monotonic() - began > _STABLE_S:
                delay = _FIRST_BACKOFF_S
            log.warning(
                "mcp server unavailable",
                server=self.config.name,
                problem=problem,
                restart_in_s=delay,
                failures=self.failures,
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, _MAX_BACKOFF_S)

    async def call(
        self, name: str, arguments: dict[str, Any], progress: ProgressFnT | None = None
    ) -> types.CallToolResult:
        """``tools/call``; ``ToolError`` when the server is down or the connection fails.
        ``progress`` (when given) gets the call's progress notifications.

        Cancelling the caller (the call's timeout, a cancelled run) sends
        ``notifications/cancelled`` for the request (the SDK does).
        """
        session = self._session
        if session is None:
            raise ToolError(
                f"MCP server {self.config.name!r} is unavailable ({self.problem or self.state}); "
                "the sidecar is reconnecting to it, try again later"
            )
        try:
            return await session.call_tool(name, arguments, progress_callback=progress)
        except MCPError as exc:
            if self._broken and self._session is not session:  # its connection broke under it
                raise ToolError(
                    f"MCP server {self.config.name!r} failed the call: {self._broken}; the "
                    "sidecar is restarting it"
                ) from None
            raise ToolError(f"MCP server {self.config.name!r} failed the call: {exc}") from None

    async def _connect_once(self) -> None:
        self._broken = ""
        self._initialized = False
        async with contextlib.AsyncExitStack() as stack:
            read, write = await stack.enter_async_context(self._transport())
            eof = anyio.Event()
            send, receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)
            group = await stack.enter_async_context(anyio.create_task_group())
            group.start_soon(self._forward, read, send, eof)
            session = await stack.enter_async_context(
                ClientSession(
                    receive, write, client_info=_client_info(), message_handler=self._on_message
                )
            )
            with anyio.fail_after(START_TIMEOUT_S):
                result = await session.initialize()
                self._initialized = True
                tools = await _list_tools(session)
            self.server_info = result.server_info
            self._session = session
            self.state, self.problem = "up", ""
            self._publish(tools)
            self._up.set()
            self._settled.set()
            log.info(
                "mcp server connected",
                server=self.config.name,
                server_info=f"{result.server_info.name} {result.server_info.version}",
                protocol=result.protocol_version,
                tools=len(tools),
            )
            self._tools_changed = anyio.Event()
            group.start_soon(self._follow_tool_list, session)
            await eof.wait()
            # Calls from now on fail at once, while the transport winds down.
            self._session = None
            self._up.clear()
            self.state, self.problem = "down", self._broken or "the server closed the connection"
            group.cancel_scope.cancel()
            if self._broken:
                raise ToolError(self._broken)

    async def _forward(
        self,
        source: ObjectReceiveStream[SessionMessage | Exception],
        sink: ObjectSendStream[SessionMessage | Exception],
        eof: anyio.Event,
    ) -> None:
        """Pass the transport's messages to the session; ``eof`` once the transport has no more
        (the server exited or closed its output), which is how a dead server is noticed.

        Once ``initialize`` is answered, a line that is not JSON-RPC ends the connection too:
        the SDK would skip it, and a call whose answer it was would wait for its timeout. The
        server is restarted instead, and the calls in flight fail at once saying why. Before
        that (a server printing a banner), and for a line that cannot be a response (it does
        not start with ``{``), the line is skipped and logged: at most one warning a
        ``log_interval_s``, the others counted (``not_logged_since_last_line``), so that a
        server writing such lines without end cannot flood the sidecar's log.
        """
        try:
            async with sink:
                async for item in source:
                    if isinstance(item, MessageTooLarge):
                        self._broken = self._too_large(item)
                        log.warning(
                            "mcp server sent a message over its size limit",
                            server=self.config.name,
                            problem=self._broken,
                        )
                        return
                    if isinstance(item, Exception) and self._skippable(item):
                        if (unlogged := self._skip_log.admit()) is not None:
                            log.warning(
                                "mcp server wrote a line that is not JSON-RPC; skipped",
                                server=self.config.name,
                                problem=_malformed(item),
                                not_logged_since_last_line=unlogged,
                            )
                        continue
                    if isinstance(item, Exception):
                        self._broken = f"it broke the protocol: {_malformed(item)}"
                        log.warning(
                            "mcp server sent a malformed message",
                            server=self.config.name,
                            problem=self._broken,
                        )
                        return
                    await sink.send(item)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        finally:
            eof.set()
            if unlogged := self._skip_log.flush():
                log.warning(
                    "mcp server's skipped lines not logged",
                    server=self.config.name,
                    not_logged_since_last_line=unlogged,
                )

    def _too_large(self, exc: MessageTooLarge) -> str:
        return (
            f"it wrote a message over {exc.limit} bytes, the most one may be (raise "
            f"mcp_servers.{self.config.name}.max_message_bytes to accept larger ones)"
        )

    def _skippable(self, exc: Exception) -> bool:
        """Whether a line the transport could not parse can be skipped (see ``_forward``)."""
        if not self._initialized:
            return True
        line = _raw_line(exc)
        return line is not None and not line.lstrip().startswith("{")

    @contextlib.asynccontextmanager
    async def _transport(self) -> AsyncIterator[Any]:
        config, where = self.config, f"mcp_servers.{self.config.name}"
        if config.command:
            env = expand_env(config.env, f"{where}.env")
            async with stdio_transport(
                locate_command(config.command, env.get("PATH")),
                config.args,
                env=env,
                cwd=config.cwd or None,
                max_message_bytes=config.max_message_bytes,
            ) as streams:
                yield streams
        else:
            headers = expand_env(config.headers, f"{where}.headers")
            async with (
                create_mcp_http_client(headers=headers) as http,
                streamable_http_client(config.url, http_client=http) as streams,
            ):
                yield streams

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification) and self._tools_changed:
            self._tools_changed.set()

    async def _follow_tool_list(self, session: ClientSession) -> None:
        while self._tools_changed is not None:
            await self._tools_changed.wait()
            self._tools_changed = anyio.Event()
            try:
                tools = await _list_tools(session)
            except Exception as exc:
                log.warning(
                    "mcp tools not relisted", server=self.config.name, problem=describe(exc)
                )
                continue
            self._publish(tools)
            log.info("mcp tools changed", server=self.config.name, tools=len(tools))


async def _list_tools(session: ClientSession) -> list[types.Tool]:
    """Every page of ``tools/list``."""
    tools: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools
    raise ToolError(f"tools/list returned more than {_MAX_PAGES} pages")


def _malformed(exc: Exception) -> str:
    """What was wrong with a message the transport could not parse, in a line."""
    if isinstance(exc, pydantic.ValidationError) and (errors := exc.errors()):
        first = errors[0]
        kind = "not valid JSON" if first["type"] == "json_invalid" else "not JSON-RPC"
        return f"it wrote a line that is {kind} ({first['msg']})"
    return f"it wrote a message that could not be read ({describe(exc)})"


def _raw_line(exc: Exception) -> str | None:
    """The text of the line a parse failure was about, when the error keeps it."""
    if isinstance(exc, pydantic.ValidationError) and (errors := exc.errors()):
        value = errors[0].get("input")
        if isinstance(value, bytes):
            return value.decode("utf-8", "replace")
        if isinstance(value, str):
            return value
    return None


def describe(exc: BaseException) -> str:
    """One line for a failure, the innermost of exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__

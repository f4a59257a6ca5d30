"""The configured MCP servers as one tool source: their connections and their tools.

``McpServers.start`` starts a task per eager server (``McpConnection.run``) and waits for them:
one that cannot start makes the sidecar refuse to serve, naming it and why. A lazy server is
started on first use: by ``wanted``, when a run may select one of its tools (its
``tool_names`` name one with the server's prefix, or are empty: every tool) or ``ListTools``
asks for them all; the caller waits for it to connect or fail, and a run naming a tool with
its prefix that it could not offer is refused with ``UNAVAILABLE`` saying why. Each time a
server lists its tools, the sidecar's registry gets them (under the server's prefix, filtered
by its allow-list) in place of the ones it had: runs started afterwards are offered the new
list, runs already going keep theirs. ``origins`` says which server each tool comes from.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

import grpc
import structlog
from mcp import types

from cleveragents.sidecar.config import SidecarConfig
from cleveragents.sidecar.errors import ConfigError, SidecarError
from cleveragents.sidecar.mcp.connection import McpConnection
from cleveragents.sidecar.mcp.progress import ProgressRelay
from cleveragents.sidecar.mcp.results import DEFAULT_INLINE_BYTES, call_output, offered_specs
from cleveragents.tool import ToolRegistry, ToolSpec, current_call
from cleveragents.tool.spec import RESERVED_INPUT_KEYS

__all__ = ["McpServers"]

log = structlog.get_logger("cleveragents.sidecar.mcp")


class McpServers:
    """The sidecar's MCP servers; ``start`` and ``stop`` bracket their tasks."""

    def __init__(self, config: SidecarConfig, registry: ToolRegistry) -> None:
        self.config = config
        self.registry = registry
        self.connections = {
            name: McpConnection(server, self._listed, config.mcp_log_interval_s)
            for name, server in config.mcp_servers.items()
        }
        #: Offered tool name -> ``mcp:<server>``, for ``ListTools``.
        self.origins: dict[str, str] = {}
        self._offered: dict[str, list[str]] = {name: [] for name in self.connections}
        self._tasks: list[asyncio.Task[None]] = []
        self._launched: set[str] = set()

    async def start(self) -> None:
        """Start the eager servers and wait for them; ``ConfigError`` if one failed."""
        eager = [c for c in self.connections.values() if c.config.startup == "eager"]
        for connection in eager:
            self._launch(connection)
        await asyncio.gather(*(c.settled() for c in eager))
        if failed := [c for c in eager if c.state != "up"]:
            await self.stop()
            first = failed[0].config
            target = f"command {first.command!r}" if first.command else f"url {first.url!r}"
            raise ConfigError(
                f'MCP server {first.name!r} (mcp_servers.{first.name}, startup = "eager") '
                f"could not start with {target}: {failed[0].problem}"
            )

    async def wanted(self, tool_names: Sequence[str]) -> None:
        """Start the lazy servers whose tools ``tool_names`` may name (every one when it is
        empty), and wait until each has connected or failed (at most ``START_TIMEOUT_S``)."""
        needed = [
            c
            for c in self.connections.values()
            if c.config.startup == "lazy"
            and (not tool_names or any(self._may_offer(c, n) for n in tool_names))
        ]
        for connection in needed:
            self._launch(connection)
        await asyncio.gather(*(c.settled() for c in needed))
        for connection in needed:
            missing = [n for n in tool_names if self._may_offer(connection, n)]
            if connection.state != "up" and missing:
                server = connection.config.name
                raise SidecarError(
                    grpc.StatusCode.UNAVAILABLE,
                    f"MCP server {server!r} (mcp_servers.{server}), which would offer "
                    f"{', '.join(missing)}, is unavailable: "
                    f"{connection.problem or connection.state}; the sidecar is restarting it, "
                    "try again later",
                )

    def _may_offer(self, connection: McpConnection, name: str) -> bool:
        return name.startswith(connection.config.prefix) and name not in self.registry

    def _launch(self, connection: McpConnection) -> None:
        name = connection.config.name
        if name not in self._launched:
            self._launched.add(name)
            self._tasks.append(asyncio.create_task(connection.run(), name=f"mcp-server-{name}"))

    async def stop(self) -> None:
        """Stop every server (a stdio server's whole process group) and wait for it."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        self._launched.clear()

    def states(self) -> list[tuple[str, bool, int]]:
        """Each server's name, whether it is connected, and its failures so far (metrics)."""
        return [(n, c.state == "up", c.failures) for n, c in self.connections.items()]

    def _listed(self, connection: McpConnection, tools: list[types.Tool]) -> None:
        server = connection.config
        for name in self._offered[server.name]:
            self.registry.remove(name)
            self.origins.pop(name, None)
        offered = offered_specs(
            server,
            tools,
            max_schema_bytes=self.config.limits.max_schema_bytes,
            max_schema_depth=self.config.limits.max_schema_depth,
            max_schema_expansion=self.config.limits.max_schema_expansion,
        )
        kept: list[str] = []
        for name, (spec, remote) in offered.items():
            if name in self.registry:
                log.warning(
                    "mcp tool skipped",
                    server=server.name,
                    tool=remote,
                    reason=f"another tool is already named {name!r}: set tool_prefix",
                )
                continue
            self.registry.register(spec, _handler(connection, remote, spec))
            self.origins[name] = f"mcp:{server.name}"
            kept.append(name)
        self._offered[server.name] = kept


def _handler(connection: McpConnection, remote: str, spec: ToolSpec) -> Any:
    """The registry handler calling ``remote`` on ``connection``; the context keys the runner
    threads into every call's inputs stay in the sidecar, and its progress goes to the run."""

    async def call(inputs: dict[str, Any]) -> dict[str, Any]:
        arguments = {k: v for k, v in inputs.items() if k not in RESERVED_INPUT_KEYS}
        relay = ProgressRelay(connection.config, current_call())
        try:
            result = await connection.call(remote, arguments, relay)
        finally:  # a call that fails or times out still sends its held report first
            relay.flush()
        return call_output(result, inline_bytes=DEFAULT_INLINE_BYTES)

    call.__name__ = spec.name
    return call

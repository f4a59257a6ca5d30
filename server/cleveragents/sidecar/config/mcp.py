"""``[mcp_servers.NAME]`` tables: the MCP servers whose tools the sidecar offers.

Only the operator's configuration names them (a client can never make the sidecar start a
process). A server is either a command the sidecar starts and owns (stdio) or a URL it
connects to (Streamable HTTP). ``${VAR}`` in ``env`` and ``headers`` values is replaced by
that environment variable when the sidecar connects, so tokens stay out of the file.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cleveragents.sidecar.errors import ConfigError

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "SIDE_EFFECTS",
    "STARTUP_MODES",
    "McpServerConfig",
    "expand_env",
    "parse_mcp_servers",
]

STARTUP_MODES = ("eager", "lazy")
#: ``annotations``: trust the server's ``readOnlyHint``/``destructiveHint``; or all or none.
SIDE_EFFECTS = ("annotations", "true", "false")
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
_PREFIX = re.compile(r"^[A-Za-z0-9_-]{0,32}$")
_VARIABLE = re.compile(r"\$\{([^}]*)\}")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_KEYS = {
    "command", "args", "env", "cwd", "url", "headers", "tool_prefix", "tools", "timeout",
    "side_effects", "startup", "progress_interval", "progress_extends_timeout", "max_timeout",
    "max_message_bytes",
}  # fmt: skip
#: The most bytes one message (one line) from a stdio server may have, by default.
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
_MIN_MESSAGE_BYTES = 1024


@dataclass(frozen=True, slots=True)
class McpServerConfig:
    """One MCP server: how to reach it and which of its tools runs get, under what names.

    ``command``/``args``/``env``/``cwd`` start a stdio server (``cwd`` empty: in the
    sidecar's working directory; from a config file it is never empty, see
    ``parse_mcp_servers``); ``url``/``headers`` reach a Streamable HTTP one (exactly one of
    ``command`` and ``url``). ``tool_prefix`` (``None``:
    ``"<name>_"``) is put before each tool's name; ``tools`` are globs over the server's own
    tool names (empty: all). ``timeout_s`` bounds each call (``None``: the sidecar's
    ``default_tool_timeout_s``). ``side_effects`` is ``annotations``, ``true`` or ``false``.
    ``startup`` is ``eager`` (connected before the sidecar serves; ``serve`` fails if it
    cannot) or ``lazy`` (started when a run may select its tools, or ``ListTools`` asks).
    ``progress_interval_s`` spaces the ``ToolCallProgress`` events of one call; with
    ``progress_extends_timeout`` each progress report renews the call's timeout, up to
    ``max_timeout_s`` after it began (``None``: ten times its timeout).
    ``max_message_bytes`` caps one message from a stdio server: a longer line breaks the
    connection (the server is restarted) rather than being buffered without end.
    """

    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str = ""
    url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    tool_prefix: str | None = None
    tools: tuple[str, ...] = ()
    timeout_s: float | None = None
    side_effects: str = "annotations"
    startup: str = "eager"
    progress_interval_s: float = 1.0
    progress_extends_timeout: bool = False
    max_timeout_s: float | None = None
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES

    def check_max_timeout(self, default_timeout_s: float) -> None:
        """``ConfigError`` when ``max_timeout_s`` is below the timeout its calls get (its own
        ``timeout_s``, else the sidecar's ``default_tool_timeout_s``, given here)."""
        applies = self.timeout_s if self.timeout_s is not None else default_timeout_s
        if self.max_timeout_s is None or self.max_timeout_s >= applies:
            return
        source = "its timeout" if self.timeout_s is not None else "default_tool_timeout_s"
        raise ConfigError(
            f"mcp_servers.{self.name}.max_timeout ({self.max_timeout_s:g}) is below {source} "
            f"({applies:g}): it is the most a call may run with its timeout extended"
        )

    def __post_init__(self) -> None:
        where = f"mcp_servers.{self.name}"
        if not _NAME.fullmatch(self.name):
            raise ConfigError(
                f"{where}: a server's name is 1-32 characters from a-z, A-Z, 0-9, _ and -"
            )
        if bool(self.command) == bool(self.url):
            raise ConfigError(
                f"{where}: set command (a stdio server) or url (Streamable HTTP), exactly one"
            )
        if self.url and not self.url.startswith(("http://", "https://")):
            raise ConfigError(f"{where}.url must be an http:// or https:// URL")
        if self.url and (self.args or self.env or self.cwd):
            raise ConfigError(f"{where}: args, env and cwd are for a command, not a url")
        if self.command and self.headers:
            raise ConfigError(f"{where}.headers are for a url, not a command")
        if self.tool_prefix is not None and not _PREFIX.fullmatch(self.tool_prefix):
            raise ConfigError(
                f"{where}.tool_prefix must be at most 32 characters from a-z, A-Z, 0-9, _ and -"
            )
        if self.timeout_s is not None and not (
            math.isfinite(self.timeout_s) and self.timeout_s > 0
        ):
            raise ConfigError(f"{where}.timeout must be a positive number of seconds")
        if not (math.isfinite(self.progress_interval_s) and self.progress_interval_s >= 0):
            raise ConfigError(f"{where}.progress_interval must be a number of seconds, 0 or more")
        if self.max_timeout_s is not None and not (
            math.isfinite(self.max_timeout_s) and self.max_timeout_s > 0
        ):
            raise ConfigError(f"{where}.max_timeout must be a positive number of seconds")
        if self.max_timeout_s is not None and self.timeout_s is not None:
            self.check_max_timeout(self.timeout_s)
        self._check_max_message_bytes(where)
        if self.side_effects not in SIDE_EFFECTS:
            raise ConfigError(
                f'{where}.side_effects must be "annotations", true or false, '
                f"got {self.side_effects!r}"
            )
        if self.startup not in STARTUP_MODES:
            raise ConfigError(f'{where}.startup must be "eager" or "lazy", got {self.startup!r}')
        for key in ("env", "headers"):
            for name, value in getattr(self, key).items():
                _check_variables(f"{where}.{key}.{name}", value)

    def _check_max_message_bytes(self, where: str) -> None:
        value = self.max_message_bytes
        if isinstance(value, bool) or not isinstance(value, int) or value < _MIN_MESSAGE_BYTES:
            raise ConfigError(
                f"{where}.max_message_bytes must be a whole number of bytes, at least "
                f"{_MIN_MESSAGE_BYTES}, got {value!r}"
            )
        if self.url and value != DEFAULT_MAX_MESSAGE_BYTES:
            raise ConfigError(f"{where}.max_message_bytes is for a command, not a url")

    @property
    def prefix(self) -> str:
        """What goes before each of its tools' names."""
        return f"{self.name}_" if self.tool_prefix is None else self.tool_prefix

    @property
    def transport(self) -> str:
        """``stdio`` or ``http``."""
        return "stdio" if self.command else "http"


def expand_env(
    values: Mapping[str, str], where: str, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``values`` with each ``${VAR}`` replaced from the environment; a variable that is not
    set is a ``ConfigError`` naming the key (an empty token would fail later, less clearly)."""
    environ = os.environ if environ is None else environ

    def one(key: str, value: str) -> str:
        def substitute(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in environ:
                raise ConfigError(
                    f"{where}.{key} uses ${{{name}}}, but the environment variable {name} is "
                    "not set"
                )
            return environ[name]

        return _VARIABLE.sub(substitute, value)

    return {key: one(key, value) for key, value in values.items()}


def parse_mcp_servers(value: Any, base: Path) -> dict[str, McpServerConfig]:
    """The ``mcp_servers`` table of ``[mcp_servers.NAME]`` tables, from the config file in the
    directory ``base``: a stdio server runs in its ``cwd`` relative to ``base``, or in ``base``
    itself when it has none (so its relative ``args`` are from the config file's directory
    too), and a ``command`` with a ``/`` is a path from ``base``. A bare command is looked up
    when the server starts (see ``mcp/commands.py``)."""
    if not isinstance(value, dict):
        raise ConfigError("mcp_servers must be a table of [mcp_servers.NAME] tables")
    return {name: _server(name, table, base) for name, table in value.items()}


def _server(name: str, table: Any, base: Path) -> McpServerConfig:
    where = f"mcp_servers.{name}"
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table")
    if unknown := sorted(set(table) - _KEYS):
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(_KEYS))}"
        )
    for key in ("command", "cwd", "url", "tool_prefix", "startup"):
        if not isinstance(table.get(key, ""), str):
            raise ConfigError(f"{where}.{key} must be a string")
    for key in ("args", "tools"):
        items = table.get(key, [])
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise ConfigError(f"{where}.{key} must be a list of strings")
    for key in ("env", "headers"):
        entries = table.get(key, {})
        if not isinstance(entries, dict) or not all(isinstance(v, str) for v in entries.values()):
            raise ConfigError(f"{where}.{key} must be a table of strings")
    timeout, max_timeout = _seconds(table, "timeout", where), _seconds(table, "max_timeout", where)
    interval = _seconds(table, "progress_interval", where)
    extends = table.get("progress_extends_timeout", False)
    if not isinstance(extends, bool):
        raise ConfigError(f"{where}.progress_extends_timeout must be true or false")
    side_effects = table.get("side_effects", "annotations")
    if isinstance(side_effects, bool):
        side_effects = "true" if side_effects else "false"
    elif side_effects != "annotations":
        raise ConfigError(
            f'{where}.side_effects must be "annotations", true or false, got {side_effects!r}'
        )
    command, cwd = table.get("command", ""), table.get("cwd", "")
    if "/" in command:
        command = str(base / command)
    return McpServerConfig(
        name,
        command=command,
        args=tuple(table.get("args", [])),
        env=dict(table.get("env", {})),
        cwd=str(base / cwd) if command or cwd else "",
        url=table.get("url", ""),
        headers=dict(table.get("headers", {})),
        tool_prefix=table.get("tool_prefix"),
        tools=tuple(table.get("tools", [])),
        timeout_s=timeout,
        side_effects=side_effects,
        startup=table.get("startup", "eager"),
        progress_interval_s=1.0 if interval is None else interval,
        progress_extends_timeout=extends,
        max_timeout_s=max_timeout,
        max_message_bytes=table.get("max_message_bytes", DEFAULT_MAX_MESSAGE_BYTES),
    )


def _seconds(table: dict[str, Any], key: str, where: str) -> float | None:
    value = table.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise ConfigError(f"{where}.{key} must be a number of seconds, got {value!r}")
    return None if value is None else float(value)


def _check_variables(where: str, value: str) -> None:
    for match in _VARIABLE.finditer(value):
        if not _ENV_NAME.fullmatch(match.group(1)):
            raise ConfigError(
                f"{where}: ${{{match.group(1)}}} does not name an environment variable"
            )

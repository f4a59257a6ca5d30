"""A server-side no-op tool for the benchmarks (loaded through the `tool_modules` setting)."""

from __future__ import annotations

from typing import Any

from cleveragents.tool import ToolRegistry

registry = ToolRegistry()


@registry.tool
async def noop() -> dict[str, Any]:
    """Do nothing and return an empty object."""
    return {}

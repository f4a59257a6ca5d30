"""Server-side tools for the benchmarks (loaded through the `tool_modules` setting)."""

from __future__ import annotations

import asyncio
from typing import Any

from cleveragents.tool import ToolRegistry

registry = ToolRegistry()


@registry.tool
async def noop() -> dict[str, Any]:
    """Do nothing and return an empty object."""
    return {}


@registry.tool
async def pause(seconds: float) -> dict[str, Any]:
    """Wait `seconds`, so that watchers can attach to a run before its timed part begins."""
    await asyncio.sleep(seconds)
    return {}

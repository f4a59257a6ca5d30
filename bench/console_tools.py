"""The gate ``bench/console.py`` holds its runs at: a tool with side effects, which the
supervised profile asks approval for, so that every page is open before the runs go on."""

from __future__ import annotations

from cleveragents.tool import ToolRegistry

tools = ToolRegistry()


@tools.tool(side_effects=True)
async def gate() -> str:
    """Let the run go on."""
    return "open"

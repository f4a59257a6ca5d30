"""The tools the sidecar hosts itself unless configured not to."""

from __future__ import annotations

import asyncio

from cleveragents.tool import ToolRegistry

__all__ = ["MAX_SLEEP_S", "builtin_registry"]

MAX_SLEEP_S = 300.0


def builtin_registry() -> ToolRegistry:
    """A registry with ``echo`` and ``sleep``: harmless tools for dry runs and client tests."""
    registry = ToolRegistry()

    @registry.tool(idempotent=True)
    async def echo(text: str) -> dict[str, str]:
        """Return the given text unchanged.

        Args:
            text: The text to send back.
        """
        return {"text": text}

    @registry.tool
    async def sleep(seconds: float) -> dict[str, float]:
        """Wait for a number of seconds (at most 300), then report how long it waited.

        Args:
            seconds: How long to wait, between 0 and 300.
        """
        seconds = min(max(seconds, 0.0), MAX_SLEEP_S)
        await asyncio.sleep(seconds)
        return {"slept_s": seconds}

    return registry

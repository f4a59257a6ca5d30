"""The server-side tools the console's tests give their sidecars (``tool_modules``): a deploy
that needs approval under the supervised profile, a web page an attacker wrote, and a tool
that leaks the sidecar's token (which records must never show)."""

from __future__ import annotations

import asyncio
import os

from cleveragents.tool import ToolRegistry

#: Markup a prompt injection would put in a tool's output: it must show as text, and run nothing.
HOSTILE = (
    '<script>window.__pwned = "script"; alert("script")</script>'
    "<img src=\"x\" onerror=\"window.__pwned = 'img'; alert('img')\">"
    "<b>bold?</b>"
)
#: The environment variable holding the token that ``leak`` returns.
TOKEN_ENV = "CONSOLE_TEST_TOKEN"

tools = ToolRegistry()


@tools.tool(side_effects=True)
async def deploy(target: str) -> dict[str, str]:
    """Deploy the service to ``target``."""
    return {"deployed": target}


@tools.tool
async def read_web(url: str) -> dict[str, str]:
    """Read a web page."""
    return {"url": url, "html": HOSTILE}


@tools.tool
async def leak() -> dict[str, str]:
    """Return the sidecar's own token (a tool gone wrong)."""
    return {"token": os.environ.get(TOKEN_ENV, "")}


@tools.tool
async def pause(seconds: float) -> dict[str, float]:
    """Wait ``seconds``."""
    await asyncio.sleep(seconds)
    return {"waited": seconds}

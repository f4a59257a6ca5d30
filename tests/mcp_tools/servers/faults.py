"""An MCP server (stdio, written with the SDK) that misbehaves on request, for the sidecar's
fault tests. ``FAULT_DIR`` (an environment variable) is where it leaves what a test checks:
``pid-<pid>`` when it starts, ``cancelled-<text>`` when a ``hang`` call is cancelled, and
with ``FAULT_CHILD`` set ``child-<pid>`` for a child it starts in its own process group.
It is also a script test servers run (``python faults.py``), hence its own imports only.
"""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.types import ImageContent, TextContent, ToolAnnotations

server = MCPServer("faults", version="1.0")
marks = Path(os.environ["FAULT_DIR"])


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def echo(text: str) -> str:
    """Return the text."""
    return text


@server.tool()
def write_note(text: str) -> str:
    """Pretend to write a note (no annotations: a tool that may change something)."""
    return f"wrote {text}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def hang(text: str) -> str:
    """Never return; note a cancellation. With a FIFO ``started`` in ``FAULT_DIR``, first
    write ``text`` to it, so a test knows the call has reached the server."""
    if (fifo := marks / "started").exists():
        await anyio.to_thread.run_sync(fifo.write_text, text + "\n")
    try:
        await asyncio.Event().wait()
    except BaseException:
        (marks / f"cancelled-{text}").touch()
        raise
    return "unreachable"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def cancellations() -> list[str]:
    """The ``text`` of every ``hang`` call cancelled so far."""
    return sorted(p.name.removeprefix("cancelled-") for p in marks.glob("cancelled-*"))


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def grow(name: str, ctx: Context) -> str:
    """Add a tool ``name`` (answering ``grown``) and tell the client the list changed."""

    def grown() -> str:
        return "grown"

    server.add_tool(grown, name=name, annotations=ToolAnnotations(read_only_hint=True))
    await ctx.session.send_tool_list_changed()
    return "ok"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def spam_progress(count: int, ctx: Context) -> str:
    """Report progress ``count`` times as fast as it can, then answer."""
    for step in range(1, count + 1):
        await ctx.report_progress(step, count, f"step {step}")
    return f"reported {count}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def slow_progress(steps: int, every: float, ctx: Context) -> str:
    """Report progress every ``every`` seconds, ``steps`` times (0: for ever), then answer."""
    step = 0
    while steps == 0 or step < steps:
        await anyio.sleep(every)
        step += 1
        await ctx.report_progress(step, steps or None)
    return f"done after {step}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def gapped_progress(pause: float, ctx: Context) -> str:
    """Report 1/10 and 2/10 at once, then 9/10 after ``pause`` seconds, then answer."""
    await ctx.report_progress(1, 10)
    await ctx.report_progress(2, 10)
    await anyio.sleep(pause)
    await ctx.report_progress(9, 10)
    return "gapped"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def crash() -> str:
    """Exit mid-call."""
    os._exit(3)


@server.tool(annotations=ToolAnnotations(read_only_hint=True), structured_output=False)
def huge_image(megabytes: int) -> list[Any]:
    """An image of ``megabytes`` MiB and a caption."""
    data = base64.b64encode(b"\x89PNG" + b"\0" * (megabytes * 1024 * 1024)).decode()
    return [
        ImageContent(type="image", data=data, mime_type="image/png"),
        TextContent(type="text", text="a picture"),
    ]


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def whoami(ctx: Context) -> dict[str, str]:
    """The client's name and version from its ``initialize``, and (over HTTP) the
    ``Authorization`` header it sent."""
    params = ctx.session.client_params
    info = params.client_info if params is not None else None
    headers = getattr(ctx.request_context.request, "headers", None) or {}
    return {
        "name": info.name if info else "",
        "version": info.version if info else "",
        "authorization": headers.get("authorization", ""),
    }


if __name__ == "__main__":
    (marks / f"pid-{os.getpid()}").touch()
    if (marks / "refuse").exists():  # a server that cannot start any more
        raise SystemExit("refusing to start: FAULT_DIR/refuse exists")
    if os.environ.get("FAULT_CHILD"):  # a helper left in its process group, deaf to stdin
        child = subprocess.Popen(
            ["sleep", "600"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        (marks / f"child-{child.pid}").touch()
    if len(sys.argv) > 1:  # python faults.py PORT: Streamable HTTP on 127.0.0.1:PORT/mcp
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
    else:
        server.run()

"""A supervised run: the model may read freely, but every write waits for this client's yes.

Starts a sidecar in this process with its built-in file tools, then runs a Session under the
default `supervised` automation profile with an approver that allows writes to Markdown files
only. Run: .venv/bin/python examples/supervised.py
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from typing import Any

from cleveragents.client import AsyncSidecarClient
from cleveragents.sidecar import Sidecar, SidecarConfig, configure_logging
from cleveragents.tool import (
    ApprovalDecided,
    ApprovalDecision,
    ApprovalRequest,
    ApprovalRequested,
    RunCompleted,
    ToolActorContext,
    ToolCallCompleted,
)

SCRIPT: list[dict[str, Any]] = [
    {
        "content": "I'll write the notes and tweak the build script.",
        "tool_calls": [
            {"id": "w1", "name": "write_file",
             "arguments": {"path": "NOTES.md", "content": "# Notes\n"}},
            {"id": "w2", "name": "write_file",
             "arguments": {"path": "build.sh", "content": "rm -rf /\n"}},
        ],
    },
    {
        "content": "Reading back what I could write.",
        "tool_calls": [{"id": "r1", "name": "list_dir", "arguments": {"path": "."}}],
    },
    {"content": "Wrote NOTES.md; the build script change was refused."},
]  # fmt: skip


def approve_markdown_only(request: ApprovalRequest) -> ApprovalDecision:
    path = str(request.inputs.get("path", ""))
    ok = path.endswith(".md")
    return ApprovalDecision(ok, "docs only" if ok else "only Markdown files may be written")


async def main() -> None:
    configure_logging("console", "warning")
    sandbox = tempfile.mkdtemp(prefix="sandbox-")
    # The operator allows runs this one directory as their sandbox (none by default).
    config = SidecarConfig(listen="127.0.0.1:0", log_level="warning", sandbox_roots=(sandbox,))
    sidecar = Sidecar(config)
    await sidecar.start()
    try:
        async with AsyncSidecarClient(sidecar.address) as client:
            async for streamed in client.session(
                "Write the release notes.",
                script=SCRIPT,
                context=ToolActorContext(sandbox_root=sandbox),
                approver=approve_markdown_only,
            ):
                event = streamed.event
                if isinstance(event, ApprovalRequested):
                    print(
                        f"#{streamed.sequence:<3} approval?  {event.tool_name}"
                        f"({json.dumps(dict(event.inputs)['path'])})  {event.reason}"
                    )
                elif isinstance(event, ApprovalDecided):
                    verdict = "approved" if event.approved else "DENIED"
                    print(f"#{streamed.sequence:<3} {verdict:<9}  by {event.by}: {event.reason}")
                elif isinstance(event, ToolCallCompleted):
                    r = event.record
                    outcome = "ok" if r.success else f"{r.error_kind}: {r.error}"
                    print(f"#{streamed.sequence:<3} record     {r.tool_name} -> {outcome}")
                elif isinstance(event, RunCompleted):
                    print(f"\nfinal: {event.result.content}")
    finally:
        await sidecar.stop(1.0)


if __name__ == "__main__":
    asyncio.run(main())

"""A sandbox root with an outside world next to it, and a runner for the file tools."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from cleveragents.sandbox import file_tools
from cleveragents.tool import ToolActorContext, ToolCall, ToolCallRecord, ToolRunner

CallTool = Callable[..., Awaitable[ToolCallRecord]]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """``tmp/root`` holds ``notes.txt``; siblings ``root2`` and ``root_backup`` hold secrets."""
    inside = tmp_path / "root"
    inside.mkdir()
    (inside / "notes.txt").write_text("hello\nworld\n")
    for sibling in ("root2", "root_backup", "outside"):
        (tmp_path / sibling).mkdir()
        (tmp_path / sibling / "secret.txt").write_text("TOP SECRET\n")
    return inside


@pytest.fixture
def outside(root: Path) -> Path:
    """A directory next to the root that no tool may touch."""
    return root.parent / "outside"


@pytest.fixture
def call_tool(root: Path) -> CallTool:
    """Run one file tool through a ToolRunner, with the root as the context's sandbox."""
    registry = file_tools()
    runner = ToolRunner(registry)
    context = ToolActorContext(sandbox_root=str(root))
    counter = iter(range(1, 10_000))

    async def call(name: str, **arguments: Any) -> ToolCallRecord:
        tool_call = ToolCall(f"c{next(counter)}", name, arguments)
        return await runner.run(tool_call, iteration=1, context=context)

    return call

"""The tool of bench/large_outputs.py, loaded by its sidecar through the `tool_modules` setting."""

from __future__ import annotations

import functools
from typing import Any

from cleveragents.tool import ToolRegistry

registry = ToolRegistry()


@functools.cache
def output_of(mib: int, shape: str) -> dict[str, Any]:
    """A tool output of about ``mib`` MiB as JSON: one string, or rows of nested JSON."""
    size = mib << 20
    if shape == "string":
        return {"result": "x" * size}
    row = {"id": 0, "name": "row 0", "tags": ["alpha", "beta"], "score": 0.5, "ok": True}
    count = size // 90  # about 90 bytes of JSON a row
    return {"rows": [dict(row, id=i, name=f"row {i}") for i in range(count)]}


@registry.tool
async def big(mib: int, shape: str) -> dict[str, Any]:
    """Return a prebuilt output of ``mib`` MiB (``shape``: "string" or "json")."""
    return output_of(mib, shape)

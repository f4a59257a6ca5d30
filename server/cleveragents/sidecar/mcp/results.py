"""An MCP server's tools as ``ToolSpec``s, and its ``tools/call`` results as record outputs.

A result's ``structuredContent`` is the output when present; otherwise its content blocks,
as JSON: text as text, and image, audio and embedded blobs by MIME type and size with at most
``inline_bytes`` of their base64 data (a screenshot's megabytes would otherwise be copied into
every event and every LLM request). ``isError`` fails the call with the blocks' text, which
the model sees in its tool message.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Mapping, Sequence
from typing import Any

import structlog
from mcp import types

from cleveragents.sidecar.config.mcp import McpServerConfig
from cleveragents.tool import ToolError, ToolSpec
from cleveragents.tool.execution.schemacost import SchemaCostError, measure_schema
from cleveragents.tool.spec import TOOL_NAME_PATTERN

__all__ = ["DEFAULT_INLINE_BYTES", "call_output", "offered_specs"]

log = structlog.get_logger("cleveragents.sidecar.mcp")

#: Base64 characters of a binary block copied into a record; the rest is counted, not kept.
DEFAULT_INLINE_BYTES = 4096


def offered_specs(
    server: McpServerConfig,
    tools: Sequence[types.Tool],
    *,
    max_schema_bytes: int,
    max_schema_depth: int,
    max_schema_expansion: int,
) -> dict[str, tuple[ToolSpec, str]]:
    """The tools runs are offered, by offered name, each with the server's own name for it.

    A tool the allow-list leaves out is skipped silently; one whose name (with the prefix) a
    provider would refuse, or whose schema is over the sidecar's schema limits (the same as
    for client tools), is skipped with a warning naming the reason.
    """
    offered: dict[str, tuple[ToolSpec, str]] = {}
    for tool in tools:
        if server.tools and not any(fnmatch.fnmatchcase(tool.name, g) for g in server.tools):
            continue
        name = server.prefix + tool.name
        problem = _schema_problem(
            tool.input_schema, max_schema_bytes, max_schema_depth, max_schema_expansion
        )
        if problem is None and not TOOL_NAME_PATTERN.fullmatch(name):
            problem = f"{name!r} is not a tool name providers accept (1-64 of a-z A-Z 0-9 _ -)"
        if problem is None and name in offered:
            problem = f"a second tool would be offered as {name!r}"
        if problem is not None:
            log.warning("mcp tool skipped", server=server.name, tool=tool.name, reason=problem)
            continue
        spec = ToolSpec(
            name,
            tool.description or tool.title or "",
            dict(tool.input_schema) or {"type": "object"},
            server.timeout_s,
            _side_effects(server.side_effects, tool.annotations),
        )
        offered[name] = (spec, tool.name)
    return offered


def call_output(result: types.CallToolResult, *, inline_bytes: int) -> dict[str, Any]:
    """The record output of a result; ``ToolError`` (the model sees its text) for ``isError``."""
    if result.is_error:
        text = "\n".join(b.text for b in result.content if isinstance(b, types.TextContent))
        raise ToolError(text or "the MCP tool reported an error")
    if result.structured_content is not None:
        return dict(result.structured_content)
    return {"content": [_block(b, inline_bytes) for b in result.content]}


def _side_effects(mode: str, annotations: types.ToolAnnotations | None) -> bool:
    if mode != "annotations":
        return mode == "true"
    # The spec's defaults: a tool is not read-only and may be destructive unless it says so.
    if annotations is None or annotations.read_only_hint is None:
        return True
    return not annotations.read_only_hint


def _block(block: Any, inline_bytes: int) -> dict[str, Any]:
    if isinstance(block, types.TextContent):
        return {"type": "text", "text": block.text}
    if isinstance(block, types.ImageContent | types.AudioContent):
        return {"type": block.type, "mime_type": block.mime_type, **_data(block.data, inline_bytes)}
    if isinstance(block, types.ResourceLink):
        link = {"type": "resource_link", "uri": str(block.uri), "name": block.name}
        if block.mime_type:
            link["mime_type"] = block.mime_type
        return link
    if isinstance(block, types.EmbeddedResource):
        resource = block.resource
        out: dict[str, Any] = {"type": "resource", "uri": str(resource.uri)}
        if resource.mime_type:
            out["mime_type"] = resource.mime_type
        if isinstance(resource, types.TextResourceContents):
            out["text"] = resource.text
        else:
            out.update(_data(resource.blob, inline_bytes))
        return out
    return {"type": str(getattr(block, "type", "unknown"))}


def _data(data: str, inline_bytes: int) -> dict[str, Any]:
    """Base64 ``data`` kept whole when short, else its size and its first characters."""
    size = len(data) * 3 // 4 - data[-2:].count("=")
    if len(data) <= inline_bytes:
        return {"data": data, "bytes": size}
    return {"data": data[:inline_bytes], "bytes": size, "truncated": True}


def _schema_problem(
    schema: Mapping[str, Any], max_bytes: int, max_depth: int, max_expansion: int
) -> str | None:
    if schema.get("type", "object") != "object":
        return "its input schema does not describe an object"
    if len(json.dumps(schema).encode()) > max_bytes:
        return f"its input schema is over max_schema_bytes ({max_bytes})"
    try:
        measure_schema(schema, max_depth=max_depth, max_expansion=max_expansion)
    except SchemaCostError as exc:
        return str(exc)
    return None

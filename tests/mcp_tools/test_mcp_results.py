"""How a ``tools/call`` result becomes a record's output: each kind of content block as JSON,
binary data cut to what a record may carry, ``structuredContent`` first, ``isError`` a
failure with the server's text."""

from __future__ import annotations

import base64

import pytest
from mcp import types

from cleveragents.sidecar.mcp.results import call_output
from cleveragents.tool import ToolError


def test_resource_blocks_keep_their_uri_mime_type_and_text_and_cut_their_blobs() -> None:
    blob = base64.b64encode(b"\0" * 3000).decode()
    result = types.CallToolResult(
        content=[
            types.ResourceLink(
                type="resource_link", uri="file:///a.txt", name="a", mime_type="text/plain"
            ),
            types.EmbeddedResource(
                type="resource",
                resource=types.TextResourceContents(
                    uri="file:///b.md", mime_type="text/markdown", text="# b"
                ),
            ),
            types.EmbeddedResource(
                type="resource",
                resource=types.BlobResourceContents(
                    uri="file:///c.bin", mime_type="application/octet-stream", blob=blob
                ),
            ),
        ]
    )

    link, text, binary = call_output(result, inline_bytes=100)["content"]

    assert link == {
        "type": "resource_link",
        "uri": "file:///a.txt",
        "name": "a",
        "mime_type": "text/plain",
    }
    assert text == {
        "type": "resource",
        "uri": "file:///b.md",
        "mime_type": "text/markdown",
        "text": "# b",
    }
    assert binary["bytes"] == 3000
    assert binary["truncated"] is True
    assert binary["data"] == blob[:100]


def test_structured_content_is_the_output_when_the_server_sends_it() -> None:
    result = types.CallToolResult(
        content=[types.TextContent(type="text", text='{"n": 1}')], structured_content={"n": 1}
    )

    assert call_output(result, inline_bytes=100) == {"n": 1}


def test_an_error_result_raises_the_servers_text_for_the_model() -> None:
    result = types.CallToolResult(
        content=[types.TextContent(type="text", text="no such city")], is_error=True
    )

    with pytest.raises(ToolError, match="no such city"):
        call_output(result, inline_bytes=100)

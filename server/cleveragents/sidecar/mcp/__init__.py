"""MCP servers as tool sources (``[mcp_servers.NAME]``): connections kept up by the sidecar
(``connection``), their tools and results in the sidecar's terms (``results``), and the set of
them as one source of the registry's tools (``servers``)."""

from cleveragents.sidecar.mcp.servers import McpServers

__all__ = ["McpServers"]

"""What the gateway answers besides runs: a watcher's view of one run (``Following``) and the
sidecar's state at a glance (``SidecarStatus``), as frozen values."""

from __future__ import annotations

from dataclasses import dataclass

from cleveragents.sidecar.runs import Run, WatchCursor

__all__ = ["Following", "McpState", "SidecarStatus"]


@dataclass(frozen=True, slots=True)
class Following:
    """A watcher's cursor on ``run``, which runs on ``sidecar`` (this one's id, or ``""`` for
    a sidecar alone), and what the watcher may do to it: decide its approvals
    (``may_decide``), cancel it (``may_cancel``)."""

    run: Run
    cursor: WatchCursor
    sidecar: str
    may_decide: bool
    may_cancel: bool


@dataclass(frozen=True, slots=True)
class McpState:
    """One MCP server: whether it is connected, and how often it failed so far."""

    name: str
    up: bool
    failures: int


@dataclass(frozen=True, slots=True)
class SidecarStatus:
    """The sidecar at a glance: whether it serves (``False`` while its store fails, or while it
    stops: ``draining``), its live runs, its store (``memory``, ``sqlite`` or ``redis``) and
    why it fails if it does, its MCP servers, and its id in a fleet (``""`` alone)."""

    serving: bool
    draining: bool
    live_runs: int
    store: str
    store_failure: str | None
    mcp_servers: tuple[McpState, ...]
    sidecar_id: str

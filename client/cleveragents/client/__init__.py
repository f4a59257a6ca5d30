"""Python clients of the sidecar: blocking (``SidecarClient``) and asyncio
(``AsyncSidecarClient``). They return the core's dataclasses, never protobuf."""

from cleveragents.client.aio import AsyncSidecarClient
from cleveragents.client.errors import RunFailedError, SidecarRpcError
from cleveragents.client.sync import SidecarClient
from cleveragents.client.types import RunInfo, RunSummary, StreamedEvent

__all__ = [
    "AsyncSidecarClient",
    "RunFailedError",
    "RunInfo",
    "RunSummary",
    "SidecarClient",
    "SidecarRpcError",
    "StreamedEvent",
]

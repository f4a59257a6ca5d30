"""Python clients of the sidecar: blocking (``SidecarClient``) and asyncio
(``AsyncSidecarClient``). They return the core's dataclasses, never protobuf, and import
nothing of the sidecar: only the core's values, ``cleveragents.wire`` and the generated code.
The public surface is ``__all__`` (a test pins it)."""

from cleveragents.client.aio import AsyncSidecarClient
from cleveragents.client.errors import RunFailedError, SidecarRpcError
from cleveragents.client.output import OutputType, TypedResult
from cleveragents.client.sync import SidecarClient
from cleveragents.client.types import RunInfo, RunSummary, StreamedEvent

__all__ = [
    "AsyncSidecarClient",
    "OutputType",
    "RunFailedError",
    "RunInfo",
    "RunSummary",
    "SidecarClient",
    "SidecarRpcError",
    "StreamedEvent",
    "TypedResult",
]

"""The binary trailer in which a failed ``RunToolLoop`` returns the run's partial result."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cleveragents.toolruntime.v1 import types_pb2

__all__ = ["MAX_TRAILER_BYTES", "RESULT_TRAILER", "result_from_trailers", "result_trailer"]

#: Trailing metadata key under which the sidecar returns a failed run's partial result.
RESULT_TRAILER = "cleveragents-result-bin"
#: gRPC refuses metadata above 8 KiB by default; the result trailer stays well below it.
MAX_TRAILER_BYTES = 6 * 1024


def result_trailer(result: types_pb2.ToolCallRunResult) -> tuple[tuple[str, bytes], ...]:
    """The trailing metadata carrying ``result``.

    A result too large for it leaves out its records (``history_omitted``: clients read them
    with ``GetRunHistory``), then has its ``content`` cut (``content_truncated``), so that a
    failed run of any length still gives its client the partial result.
    """
    partial = result.SerializeToString()
    if len(partial) > MAX_TRAILER_BYTES:
        bounded = types_pb2.ToolCallRunResult()
        bounded.CopyFrom(result)
        if bounded.tool_call_history:
            bounded.tool_call_count = len(bounded.tool_call_history)
            bounded.history_omitted = True
            del bounded.tool_call_history[:]
        over = bounded.ByteSize() - MAX_TRAILER_BYTES
        if over > 0:
            data = bounded.content.encode()
            bounded.content = data[: max(len(data) - over - 16, 0)].decode("utf-8", "ignore")
            bounded.content_truncated = True
        partial = bounded.SerializeToString()
    return ((RESULT_TRAILER, partial),)


def result_from_trailers(
    trailers: Iterable[tuple[str, Any]] | None,
) -> types_pb2.ToolCallRunResult | None:
    """The partial result in a call's trailing metadata, if the sidecar sent one, still as
    protobuf: its ``history_omitted`` says whether its records were left out."""
    for key, value in tuple(trailers or ()):
        if key == RESULT_TRAILER and isinstance(value, bytes):
            return types_pb2.ToolCallRunResult.FromString(value)
    return None

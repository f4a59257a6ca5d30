"""Errors raised by the client, and the one place that turns gRPC errors into them."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

import grpc

from cleveragents.tool import ToolCallRunResult, ToolRuntimeError
from cleveragents.wire import result_from_pb, result_from_trailers

__all__ = ["RunFailedError", "SidecarRpcError", "rpc_error", "rpc_errors"]


class SidecarRpcError(ToolRuntimeError):
    """The sidecar answered an RPC with a non-OK status."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details

    @classmethod
    def from_rpc_error(cls, error: grpc.RpcError) -> SidecarRpcError:
        """Wrap a gRPC error (sync or aio)."""
        code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
        details = error.details() if hasattr(error, "details") else str(error)
        return cls(code, _explained(code, details or ""))


#: gRPC's own refusal of a message over a limit: ``SERVER:`` the sidecar's, ``CLIENT:`` ours.
_TOO_LARGE = re.compile(r"(SERVER|CLIENT): Received message larger than max \((\d+) vs\. (\d+)\)")


def _explained(code: grpc.StatusCode, details: str) -> str:
    """``details``, with gRPC's bare "larger than max" told as the limit to raise."""
    if code is not grpc.StatusCode.RESOURCE_EXHAUSTED or not (match := _TOO_LARGE.search(details)):
        return details
    side, size, limit = match.groups()
    if side == "SERVER":
        return (
            f"the request is {size} bytes, more than the sidecar's max_message_bytes ({limit}): "
            "send less (a shorter prompt, context or tool list), or have the sidecar's operator "
            f"raise max_message_bytes [gRPC: {details}]"
        )
    return (
        f"a message from the sidecar is {size} bytes, more than this client's "
        f"max_message_bytes ({limit}): raise it to the sidecar's max_message_bytes "
        f"(SidecarClient(..., max_message_bytes=N)) [gRPC: {details}]"
    )


class RunFailedError(SidecarRpcError):
    """A run ended with ``run_failed``; ``result`` holds what it did before failing.

    ``history_omitted``: the sidecar sent the result without its records, too many for one
    message (the clients' ``run_tool_loop`` puts them back before raising).
    """

    def __init__(
        self,
        code: grpc.StatusCode,
        details: str,
        result: ToolCallRunResult,
        *,
        history_omitted: bool = False,
    ) -> None:
        super().__init__(code, details)
        self.result = result
        self.history_omitted = history_omitted


def rpc_error(error: grpc.RpcError) -> SidecarRpcError:
    """A ``RunFailedError`` when the status carries a run's partial result, else the status."""
    wrapped = SidecarRpcError.from_rpc_error(error)
    trailers: Any = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
    pb = result_from_trailers(trailers)
    if pb is not None:
        return RunFailedError(
            wrapped.code, wrapped.details, result_from_pb(pb), history_omitted=pb.history_omitted
        )
    return wrapped


@contextlib.contextmanager
def rpc_errors() -> Iterator[None]:
    """Raise a gRPC error inside the block as a ``SidecarRpcError`` (or ``RunFailedError``).

    Works around blocking calls and ``await``s alike.
    """
    try:
        yield
    except grpc.RpcError as exc:
        raise rpc_error(exc) from None

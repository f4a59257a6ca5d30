"""Errors raised by the client."""

from __future__ import annotations

import grpc

from cleveragents.tool import ToolCallRunResult, ToolRuntimeError

__all__ = ["RunFailedError", "SidecarRpcError"]


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
        return cls(code, details or "")


class RunFailedError(SidecarRpcError):
    """A run ended with ``run_failed``; ``result`` holds what it did before failing."""

    def __init__(self, code: grpc.StatusCode, details: str, result: ToolCallRunResult) -> None:
        super().__init__(code, details)
        self.result = result

"""Errors the sidecar turns into gRPC statuses."""

from __future__ import annotations

import grpc

from cleveragents.tool import ToolRuntimeError

__all__ = ["ConfigError", "DamagedLog", "SidecarError"]


class SidecarError(ToolRuntimeError):
    """A request the sidecar refuses, with the gRPC status code that says why."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    @classmethod
    def invalid(cls, message: str) -> SidecarError:
        """``INVALID_ARGUMENT``: the request itself is wrong."""
        return cls(grpc.StatusCode.INVALID_ARGUMENT, message)

    @classmethod
    def not_found(cls, message: str) -> SidecarError:
        """``NOT_FOUND``: a run, profile or tool the request names does not exist."""
        return cls(grpc.StatusCode.NOT_FOUND, message)

    @classmethod
    def denied(cls, message: str) -> SidecarError:
        """``PERMISSION_DENIED``: the operator's settings or policy do not allow what the
        request asks; the message names the setting or rule."""
        return cls(grpc.StatusCode.PERMISSION_DENIED, message)

    @classmethod
    def quota(cls, message: str) -> SidecarError:
        """``RESOURCE_EXHAUSTED``: the caller used up a quota; it may retry later."""
        return cls(grpc.StatusCode.RESOURCE_EXHAUSTED, message)

    @classmethod
    def failed_precondition(cls, message: str) -> SidecarError:
        """``FAILED_PRECONDITION``: the request is well formed, but something it names is
        not in the state it needs (a sandbox root that is not a directory)."""
        return cls(grpc.StatusCode.FAILED_PRECONDITION, message)

    @classmethod
    def out_of_order(cls, message: str) -> SidecarError:
        """``FAILED_PRECONDITION``: a session message that does not fit the conversation."""
        return cls(grpc.StatusCode.FAILED_PRECONDITION, message)


class DamagedLog(SidecarError):
    """``DATA_LOSS``: a run's stored log cannot be read back from event ``sequence`` on (it
    does not decode, or is not that run's event): the store holds data no sidecar wrote."""

    def __init__(self, run_id: str, sequence: int, why: str) -> None:
        super().__init__(
            grpc.StatusCode.DATA_LOSS,
            f"run {run_id!r} cannot be read back: its stored log is damaged at event "
            f"{sequence} ({why}); the other runs are not affected. Restore the run store from "
            "a backup, or delete the run's keys to free its id; the sidecar that ran it may "
            "still serve its copy",
        )
        self.run_id = run_id
        self.sequence = sequence


class ConfigError(ToolRuntimeError, ValueError):
    """The sidecar's configuration is invalid; the message names the setting."""

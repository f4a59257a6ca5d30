"""What every RPC handler shares: ending a call with the status a refusal maps to, and
reading a ``RunSpec`` as a request."""

from __future__ import annotations

from typing import Any, NoReturn

import grpc

from cleveragents.sidecar.errors import SidecarError
from cleveragents.sidecar.status import status_of
from cleveragents.toolruntime.v1 import types_pb2
from cleveragents.wire import RunRequest, run_request_from_pb

__all__ = ["DEADLINE_SLACK_S", "Context", "abort", "request_of"]

#: A client that gives up this close to its deadline gave up *at* it (clocks differ).
DEADLINE_SLACK_S = 0.1

Context = grpc.aio.ServicerContext[Any, Any]


async def abort(context: Context, error: SidecarError) -> NoReturn:
    """End the call with the status that ``error`` maps to, and its message."""
    await context.abort(status_of(error), error.message)
    raise AssertionError("unreachable: abort raises")  # pragma: no cover


def request_of(spec: types_pb2.RunSpec) -> RunRequest:
    """The request a ``RunSpec`` stands for; ``INVALID_ARGUMENT`` names a malformed field."""
    try:
        return run_request_from_pb(spec)
    except ValueError as exc:
        raise SidecarError.invalid(str(exc)) from None

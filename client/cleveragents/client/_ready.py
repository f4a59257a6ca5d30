"""Waiting for a sidecar that is still starting: the pieces both Python clients share.

A runtime that has just spawned its sidecar races its start-up: a call made before the
sidecar listens fails ``UNAVAILABLE``. ``wait_ready`` asks the standard health service (which
needs no token) until the sidecar's service is ``SERVING``, connecting again as often as
``RECONNECT_OPTIONS`` allow, within a deadline.
"""

from __future__ import annotations

import grpc
from grpc_health.v1 import health_pb2

from cleveragents.client.errors import SidecarRpcError
from cleveragents.toolruntime.v1 import service_pb2

__all__ = ["HEALTH_REQUEST", "RECONNECT_OPTIONS", "ReadyPoll"]

#: The service whose health ``wait_ready`` asks for (set once the sidecar serves runs).
_SERVICE = service_pb2.DESCRIPTOR.services_by_name["ToolRuntimeService"].full_name
HEALTH_REQUEST = health_pb2.HealthCheckRequest(service=_SERVICE)

#: gRPC waits 1 s before connecting again, then 1.6 times longer each time (up to 2 min): a
#: sidecar that starts a few seconds late would be seen seconds later still. A sidecar runs
#: next to its client, so the client connects again within 0.1 s, at most 1 s apart.
RECONNECT_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]

_FIRST_PAUSE_S = 0.05
_MAX_PAUSE_S = 0.5


class ReadyPoll:
    """One ``wait_ready``: what the last health answer said, and the pause before the next."""

    def __init__(self, target: str, timeout: float) -> None:
        if timeout <= 0:
            raise ValueError(f"wait_ready's timeout must be positive, not {timeout!r}")
        self.target = target
        self.timeout = timeout
        self.last = "nothing answered (no sidecar listening there yet?)"
        self.pause = _FIRST_PAUSE_S

    def answered(self, response: health_pb2.HealthCheckResponse) -> bool:
        """Whether ``response`` says the sidecar is ready; otherwise remember what it said."""
        if response.status == health_pb2.HealthCheckResponse.SERVING:
            return True
        name = health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
        self.last = f"its health is {name}"
        return False

    def failed(self, error: grpc.RpcError) -> SidecarRpcError | None:
        """The error to raise for a failed health check, or ``None`` to ask again."""
        code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return self.not_ready()
        if code == grpc.StatusCode.NOT_FOUND:  # started, its health not set yet
            self.last = "it has no health status yet"
        else:
            details = error.details() if hasattr(error, "details") else str(error)
            self.last = f"{code.name}: {details}"
        return None

    def next_pause(self, left: float) -> float:
        """How long to pause before asking again (doubling, at most 0.5 s and ``left``)."""
        pause = min(self.pause, max(left, 0.0))
        self.pause = min(self.pause * 2, _MAX_PAUSE_S)
        return pause

    def not_ready(self) -> SidecarRpcError:
        """The error for a sidecar that was not ready in time."""
        return SidecarRpcError(
            grpc.StatusCode.DEADLINE_EXCEEDED,
            f"the sidecar at {self.target or 'the given channel'} was not ready within "
            f"{self.timeout:g} s: {self.last}; is it started, and listening on that address?",
        )

"""Health checking with a bound on ``Watch`` streams, which anyone may open without a token.

Each open ``Watch`` holds a gRPC call and a coroutine for as long as its peer likes (5,000
unauthenticated ones held about 71 MB). At most ``max_health_watchers`` are open at once
from callers without credentials, and as many from callers with them; one more is refused
with ``RESOURCE_EXHAUSTED`` naming the setting, and ``Check``, which holds nothing, stays
open to all.
"""

from __future__ import annotations

from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2

from cleveragents.sidecar.identity import ANONYMOUS
from cleveragents.sidecar.transport.caller import current_caller

__all__ = ["BoundedHealthServicer"]


class BoundedHealthServicer(health.aio.HealthServicer):
    """gRPC's health servicer, with at most ``max_watchers`` ``Watch`` streams at once from
    callers without credentials, and as many again from callers with them: a peer without
    the token cannot take the places of clients that health-check with it."""

    def __init__(self, max_watchers: int) -> None:
        super().__init__()
        self.max_watchers = max_watchers
        #: Open Watch streams: of callers without credentials, and of the others.
        self.watchers = {True: 0, False: 0}

    async def Watch(self, request: health_pb2.HealthCheckRequest, context: Any) -> None:
        anonymous = current_caller() is ANONYMOUS
        if (open_now := self.watchers[anonymous]) >= self.max_watchers:
            whose = "unauthenticated " if anonymous else ""
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"this sidecar already serves {open_now} {whose}health Watch streams, its "
                "max_health_watchers; use Check, or retry later",
            )
        self.watchers[anonymous] += 1
        try:
            await super().Watch(request, context)
        finally:
            self.watchers[anonymous] -= 1

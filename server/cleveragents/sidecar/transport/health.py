"""Health checking with a bound on ``Watch`` streams, which anyone may open without a token.

Each open ``Watch`` holds a gRPC call and a coroutine for as long as its peer likes (5,000
unauthenticated ones held about 71 MB). At most ``max_health_watchers`` are open at once;
one more is refused with ``RESOURCE_EXHAUSTED`` naming the setting, and ``Check``, which
holds nothing, stays open to all.
"""

from __future__ import annotations

from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2

__all__ = ["BoundedHealthServicer"]


class BoundedHealthServicer(health.aio.HealthServicer):
    """gRPC's health servicer, with at most ``max_watchers`` ``Watch`` streams at once."""

    def __init__(self, max_watchers: int) -> None:
        super().__init__()
        self.max_watchers = max_watchers
        self.watchers = 0

    async def Watch(self, request: health_pb2.HealthCheckRequest, context: Any) -> None:
        if self.watchers >= self.max_watchers:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"this sidecar already serves {self.watchers} health Watch streams, its "
                "max_health_watchers; use Check, or retry later",
            )
        self.watchers += 1
        try:
            await super().Watch(request, context)
        finally:
            self.watchers -= 1

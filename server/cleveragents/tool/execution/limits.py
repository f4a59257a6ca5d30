"""Per-tool concurrency caps and rate limits, shared by every run that uses a runner."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

__all__ = ["ToolLimit", "ToolLimits"]


@dataclass(frozen=True, slots=True)
class ToolLimit:
    """At most ``max_concurrent`` calls at once; at most ``rate_per_s`` starts per second
    (with bursts of up to ``burst``). Calls over a limit wait; they do not fail."""

    max_concurrent: int | None = None
    rate_per_s: float | None = None
    burst: int = 1

    def __post_init__(self) -> None:
        if self.max_concurrent is not None and self.max_concurrent < 1:
            raise ValueError("max_concurrent must be at least 1")
        if self.rate_per_s is not None and not (
            math.isfinite(self.rate_per_s) and self.rate_per_s > 0
        ):
            raise ValueError("rate_per_s must be a positive number")
        if self.burst < 1:
            raise ValueError("burst must be at least 1")


class _Bucket:
    """A token bucket refilled at ``rate`` tokens per second, holding at most ``capacity``."""

    __slots__ = ("capacity", "rate", "tokens", "updated")

    def __init__(self, rate: float, capacity: int) -> None:
        self.rate, self.capacity = rate, float(capacity)
        self.tokens, self.updated = float(capacity), time.monotonic()

    def wait_time(self) -> float:
        """Take a token if there is one (0.0), else how long until there will be."""
        now = time.monotonic()
        self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate


class ToolLimits:
    """Limits by tool name; tools without an entry are not limited."""

    def __init__(self, limits: Mapping[str, ToolLimit]) -> None:
        self._semaphores = {
            name: asyncio.Semaphore(limit.max_concurrent)
            for name, limit in limits.items()
            if limit.max_concurrent is not None
        }
        self._buckets = {
            name: _Bucket(limit.rate_per_s, limit.burst)
            for name, limit in limits.items()
            if limit.rate_per_s is not None
        }

    @contextlib.asynccontextmanager
    async def slot(self, tool_name: str) -> AsyncIterator[None]:
        """Hold one of the tool's concurrency slots, after waiting for its rate limit."""
        bucket = self._buckets.get(tool_name)
        if bucket is not None:
            while (delay := bucket.wait_time()) > 0:  # noqa: ASYNC110 - a rate limit is time
                await asyncio.sleep(delay)
        semaphore = self._semaphores.get(tool_name)
        if semaphore is None:
            yield
            return
        async with semaphore:
            yield

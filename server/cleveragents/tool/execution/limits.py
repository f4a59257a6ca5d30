"""Per-tool concurrency caps and rate limits, shared by every run, counted per tool origin."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import math
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

__all__ = ["ToolLimit", "ToolLimits"]

#: The origin of the tools a runner does not name in ``ToolLimits.for_origins``.
_SERVER_ORIGIN = "server"


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
    """Limits by tool name, counted apart per tool origin; tools without an entry are not
    limited.

    A runner sees the limits through ``for_origins``: the tools it names there (a session
    client's own tools) count under their origin, every other tool under the sidecar's. So a
    client tool that never answers holds only its own origin's slots, never those of the
    server tool with the same name.
    """

    def __init__(self, limits: Mapping[str, ToolLimit]) -> None:
        self._limits = dict(limits)
        self._semaphores: dict[tuple[str, str], asyncio.Semaphore] = {}
        self._buckets: dict[tuple[str, str], _Bucket] = {}
        self._origins: Mapping[str, str] = {}

    def for_origins(self, origins: Mapping[str, str]) -> ToolLimits:
        """A view of these limits where each tool in ``origins`` counts under that origin;
        the slots and tokens stay shared with every other view."""
        view = copy.copy(self)
        view._origins = dict(origins)
        return view

    @contextlib.asynccontextmanager
    async def slot(self, tool_name: str) -> AsyncIterator[None]:
        """Hold one of the tool's concurrency slots, after waiting for its rate limit."""
        limit = self._limits.get(tool_name)
        if limit is None:
            yield
            return
        key = (self._origins.get(tool_name, _SERVER_ORIGIN), tool_name)
        if limit.rate_per_s is not None:
            bucket = self._buckets.get(key)
            if bucket is None:
                bucket = self._buckets[key] = _Bucket(limit.rate_per_s, limit.burst)
            while (delay := bucket.wait_time()) > 0:  # noqa: ASYNC110 - a rate limit is time
                await asyncio.sleep(delay)
        if limit.max_concurrent is None:
            yield
            return
        semaphore = self._semaphores.get(key)
        if semaphore is None:
            semaphore = self._semaphores[key] = asyncio.Semaphore(limit.max_concurrent)
        async with semaphore:
            yield

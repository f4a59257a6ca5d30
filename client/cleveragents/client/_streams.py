"""``OpenStreams``: the blocking client's streaming calls still under way, so that closing
the client ends them (gRPC sends their requests from a thread of its own, which only the end
of their request queue ends)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["OpenStreams"]

Stop = Callable[[], None]


class OpenStreams:
    """The streams opened and not yet closed, each known by the function that ends it."""

    def __init__(self) -> None:
        self._open: set[Stop] = set()
        self._lock = threading.Lock()

    def __contains__(self, stop: Stop) -> bool:
        """Whether the stream ``stop`` ends is still open (``close_all`` did not end it)."""
        with self._lock:
            return stop in self._open

    def opened(self, requests: queue.SimpleQueue[Any] | None, call: Any) -> Stop:
        """Track a streaming ``call`` (and its ``requests`` queue) until :meth:`closed`; how
        to end it."""

        def stop() -> None:
            if requests is not None:
                requests.put(None)  # ends the thread that sends them
            call.cancel()

        with self._lock:
            self._open.add(stop)
        return stop

    def closed(self, stop: Stop) -> None:
        """The stream ``stop`` ends is over: end it, and forget it."""
        with self._lock:
            self._open.discard(stop)
        stop()

    def close_all(self) -> None:
        """End every stream still open."""
        with self._lock:
            stops, self._open = list(self._open), set()
        for stop in stops:
            stop()

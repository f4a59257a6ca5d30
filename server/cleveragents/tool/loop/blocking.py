"""Running the async loop to its end from code that cannot await."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["run_blocking"]

T = TypeVar("T")


def run_blocking(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` and return its result, from any thread.

    Where an event loop already runs in this thread, ``coro`` runs on a fresh loop in a worker
    thread while this one blocks: it cannot run on a loop that is waiting for it.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="tool-loop") as pool:
        return pool.submit(asyncio.run, coro).result()

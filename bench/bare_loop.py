"""The in-process loop's floor: a bare hand-written tool loop, a generator's worth of Python.

The same workload as the in-process row (a scripted model that calls a no-op async tool N-1
times, then answers; four events an iteration, read by the caller as they come) with nothing
else: no schemas, policies, records, budgets or timeouts, the events plain tuples handed to
the reader through an ``asyncio.Queue``, the tool's output encoded with ``json.dumps``. What
the loop costs beyond it is what its features cost.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any


async def bare_loop(iterations: int) -> float:
    """Run the bare loop for ``iterations`` iterations; the time per iteration in us."""
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": f"c{i}", "name": "noop", "arguments": {}}]}
        for i in range(iterations - 1)
    ]
    script.append({"content": "done"})

    async def noop() -> dict[str, Any]:
        return {}

    tools = {"noop": noop}
    queue: asyncio.Queue[tuple[Any, ...] | None] = asyncio.Queue()

    async def loop() -> None:
        queue.put_nowait(("run_started",))
        for iteration, answer in enumerate(script, 1):
            queue.put_nowait(("iteration_started", iteration))
            queue.put_nowait(("llm_responded", iteration, answer))
            calls = answer.get("tool_calls", [])
            for call in calls:
                queue.put_nowait(("tool_call_started", call["id"], call["name"]))
                output = await tools[call["name"]](**call["arguments"])
                queue.put_nowait(("tool_call_completed", call["id"], json.dumps(output)))
            if not calls:
                queue.put_nowait(("run_completed", answer["content"]))
        queue.put_nowait(None)

    began = time.perf_counter()
    events = 0
    task = asyncio.create_task(loop())
    while await queue.get() is not None:
        events += 1
    await task
    elapsed = time.perf_counter() - began
    assert events == 4 * iterations, events
    return elapsed / iterations * 1e6

"""The request that gives the model a large tool output: the same bytes however it is encoded."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cleveragents.providers import OpenAIChatCaller
from cleveragents.tool import ToolCallingRuntime, ToolRegistry, ToolRunner, ToolSpec

from .conftest import NO_WAIT, SECRET, FakeProvider, ok, openai_completion

OUTPUTS = {
    "string": {"result": 'a, b: "c"\n\\ é ✓ ' * 16384, "n": 1.5, "ok": None},
    "nested": {"rows": [{"id": i, "text": "x, y: z é", "v": [True]} for i in range(4096)]},
}


@pytest.mark.parametrize("shape", sorted(OUTPUTS))
async def test_the_request_after_a_large_tool_output_carries_it_as_json_dumps_writes_it(
    provider: FakeProvider, shape: str
) -> None:
    output = OUTPUTS[shape]
    registry = ToolRegistry()
    registry.register(ToolSpec("large", "A large output."), lambda inputs: output)
    provider.queue(
        ok(openai_completion(None, [("call_a", "large", "{}")])), ok(openai_completion("done"))
    )
    caller = OpenAIChatCaller("gpt-test", base_url=f"{provider.url}/v1", api_key=SECRET,
                              retry=NO_WAIT, stream=False)  # fmt: skip
    try:
        runtime = ToolCallingRuntime(registry, ToolRunner(registry), caller, router=caller.router)
        await runtime.arun_tool_loop("go")
    finally:
        await caller.aclose()

    second = provider.requests[1]
    body: Any = second.body
    assert body["messages"][-1] == {
        "role": "tool", "tool_call_id": "call_a", "content": json.dumps(output, ensure_ascii=False),
    }  # fmt: skip
    assert second.raw == json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()

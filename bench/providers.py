"""The vendors' SDKs against plain HTTP clients for the sidecar's provider adapters.

Measures, in fresh interpreters, the import time and resident memory each client adds, then
the client-side CPU per request (and wall time) of a chat turn with tools against a loopback
fake provider that answers at once with a realistic response, so that what is left is the
client's own cost: building the request, HTTP, parsing, and conversion to an ``LLMResponse``.
The fake server runs in a subprocess so its CPU is not counted. Our adapters run on
``aiohttp``; the SDKs, ``httpx`` 0.28 (the floor of the original plan) and ``httpx2`` (the
adapters' client before ``bench/http_stacks.py`` chose aiohttp) are not dependencies:
    .venv/bin/pip install openai anthropic httpx httpx2
Run: .venv/bin/python bench/providers.py [--requests N] [--concurrency C]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from cleveragents.tool import (
    LLMRequest,
    LLMResponse,
    Message,
    Role,
    ToolCall,
    ToolCallRouter,
    ToolSpec,
    Usage,
)

MODEL = "bench-model"
KEY = "sk-bench"
SPECS = [
    ToolSpec(
        f"tool_{i}",
        f"Tool number {i}: reads a file, with options.",
        {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "A path in the sandbox."},
                "limit": {"type": "integer", "minimum": 0},
                "mode": {"enum": ["fast", "slow"]},
            },
            "required": ["path"],
            "additionalProperties": False,
        },
    )
    for i in range(4)
]


def conversation() -> list[Message]:
    """System, user, then three rounds of one tool call and its result."""
    messages = [
        Message(Role.SYSTEM, "You are a careful assistant. Use the tools."),
        Message(Role.USER, "Summarise the three files in the sandbox. " * 5),
    ]
    for i in range(3):
        call = ToolCall(f"call_{i}", "tool_0", {"path": f"docs/file_{i}.md", "limit": 100})
        messages.append(Message(Role.ASSISTANT, f"Reading file {i}.", [call]))
        result = json.dumps({"text": "Lorem ipsum dolor sit amet. " * 40})
        messages.append(Message(Role.TOOL, result, tool_call_id=f"call_{i}"))
    return messages


OPENAI_RESPONSE = {
    "id": "chatcmpl-bench",
    "object": "chat.completion",
    "created": 1718000000,
    "model": MODEL,
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Reading the last file.",
                "tool_calls": [
                    {
                        "id": "call_3",
                        "type": "function",
                        "function": {
                            "name": "tool_0",
                            "arguments": '{"path": "docs/file_3.md", "limit": 100}',
                        },
                    }
                ],
                "refusal": None,
                "annotations": [],
            },
            "logprobs": None,
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {
        "prompt_tokens": 1520,
        "completion_tokens": 31,
        "total_tokens": 1551,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
    },
    "service_tier": "default",
    "system_fingerprint": "fp_bench",
}
ANTHROPIC_RESPONSE = {
    "id": "msg_bench",
    "type": "message",
    "role": "assistant",
    "model": MODEL,
    "content": [
        {"type": "text", "text": "Reading the last file."},
        {
            "type": "tool_use",
            "id": "toolu_3",
            "name": "tool_0",
            "input": {"path": "docs/file_3.md", "limit": 100},
        },
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 1520,
        "output_tokens": 31,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "service_tier": "standard",
    },
}


# -- the fake provider (subprocess) ------------------------------------------------------------


async def serve() -> None:
    """Answer every POST at once: a chat completion, or a message for ``/v1/messages``."""
    bodies = {
        path: json.dumps(body).encode()
        for path, body in (("openai", OPENAI_RESPONSE), ("anthropic", ANTHROPIC_RESPONSE))
    }

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                lines = head.decode("latin-1").split("\r\n")
                path = lines[0].split(" ")[1]
                length = 0
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                await reader.readexactly(length)
                body = bodies["anthropic" if path.endswith("/v1/messages") else "openai"]
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b"x-request-id: req_bench\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


# -- import cost ------------------------------------------------------------------------------

IMPORT_PROBE = """
import sys, time
def rss():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096 / 2**20
before = rss()
start = time.perf_counter()
import {module}
elapsed = time.perf_counter() - start
print(elapsed, rss() - before, len(sys.modules))
"""


def import_cost(module: str, repeat: int) -> tuple[float, float, int]:
    """Median import time (ms), resident memory added (MiB) and modules loaded."""
    samples = []
    for _ in range(repeat):
        out = subprocess.run(
            [sys.executable, "-c", IMPORT_PROBE.format(module=module)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        samples.append((float(out[0]) * 1000, float(out[1]), int(out[2])))
    return (
        statistics.median(s[0] for s in samples),
        statistics.median(s[1] for s in samples),
        int(statistics.median(s[2] for s in samples)),
    )


# -- per-request cost ---------------------------------------------------------------------------

Call = Callable[[], Awaitable[LLMResponse | None]]


async def measure(call: Call, requests: int, concurrency: int) -> tuple[float, float]:
    """Client CPU µs per request and wall µs per request, after a warm-up."""
    for _ in range(50):
        await call()

    async def worker(n: int) -> None:
        for _ in range(n):
            await call()

    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker(requests // concurrency) for _ in range(concurrency)))
    done = (requests // concurrency) * concurrency
    return (
        (time.process_time() - cpu) / done * 1e6,
        (time.perf_counter() - wall) / done * 1e6,
    )


async def contenders(base: str) -> dict[str, tuple[Call, Callable[[], Awaitable[None]]]]:
    """Each contender's one-request coroutine factory and its clean-up."""
    import aiohttp

    # Not dependencies, so untyped here: mypy passes whether or not they are installed.
    anthropic: Any = importlib.import_module("anthropic")
    httpx: Any = importlib.import_module("httpx")
    httpx2: Any = importlib.import_module("httpx2")
    openai: Any = importlib.import_module("openai")

    from cleveragents.providers import AnthropicMessagesCaller, OpenAIChatCaller

    messages = conversation()
    request_o = LLMRequest(messages, ToolCallRouter("openai").tool_schemas(SPECS), 4)
    request_a = LLMRequest(messages, ToolCallRouter("anthropic").tool_schemas(SPECS), 4)
    openai_fields = ToolCallRouter("openai").format_messages(messages)
    anthropic_fields = ToolCallRouter("anthropic").format_messages(messages)

    raw_body = json.dumps({"model": MODEL, **openai_fields, "tools": list(request_o.tools)})
    headers = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
    raw = httpx.AsyncClient()
    raw2 = httpx2.AsyncClient()

    async def raw_post() -> None:
        response = await raw.post(
            f"{base}/v1/chat/completions", content=raw_body.encode(), headers=headers
        )
        json.loads(response.content)

    async def raw2_post() -> None:
        response = await raw2.post(
            f"{base}/v1/chat/completions", content=raw_body.encode(), headers=headers
        )
        json.loads(response.content)

    raw3 = aiohttp.ClientSession()

    async def raw3_post() -> None:
        url = f"{base}/v1/chat/completions"
        async with raw3.post(url, data=raw_body.encode(), headers=headers) as response:
            json.loads(await response.read())

    shared = aiohttp.ClientSession()
    ours_o = OpenAIChatCaller(MODEL, base_url=f"{base}/v1", api_key=KEY, client=shared)
    ours_a = AnthropicMessagesCaller(MODEL, base_url=base, api_key=KEY, client=shared)

    sdk_o = openai.AsyncOpenAI(api_key=KEY, base_url=f"{base}/v1")
    sdk_a = anthropic.AsyncAnthropic(api_key=KEY, base_url=base)

    async def openai_sdk() -> LLMResponse:
        completion = await sdk_o.chat.completions.create(
            model=MODEL,
            messages=openai_fields["messages"],
            tools=list(request_o.tools),
        )
        message = completion.choices[0].message
        usage = completion.usage
        return LLMResponse(
            message.content or "",
            [
                ToolCall(c.id, c.function.name, json.loads(c.function.arguments))
                for c in message.tool_calls or ()
                if c.type == "function"
            ],
            Usage(usage.prompt_tokens, usage.completion_tokens) if usage else None,
        )

    async def anthropic_sdk() -> LLMResponse:
        message = await sdk_a.messages.create(
            model=MODEL,
            max_tokens=4096,
            system=anthropic_fields["system"],
            messages=anthropic_fields["messages"],
            tools=list(request_a.tools),
        )
        text = "".join(b.text for b in message.content if b.type == "text")
        calls = [
            ToolCall(b.id, b.name, dict(b.input)) for b in message.content if b.type == "tool_use"
        ]
        usage = Usage(message.usage.input_tokens, message.usage.output_tokens)
        return LLMResponse(text, calls, usage)

    async def ours_openai() -> LLMResponse:
        return await ours_o.call(request_o)

    async def ours_anthropic() -> LLMResponse:
        return await ours_a.call(request_a)

    async def close_shared() -> None:
        await shared.close()

    async def nothing() -> None:
        return None

    return {
        "httpx 0.28: POST + json.loads (floor)": (raw_post, raw.aclose),
        "httpx2: POST + json.loads (floor)": (raw2_post, raw2.aclose),
        "aiohttp: POST + json.loads (floor)": (raw3_post, raw3.close),
        "ours: OpenAIChatCaller.call": (ours_openai, nothing),
        "ours: AnthropicMessagesCaller.call": (ours_anthropic, close_shared),
        "openai SDK: chat.completions.create": (openai_sdk, sdk_o.close),
        "anthropic SDK: messages.create": (anthropic_sdk, sdk_a.close),
    }


async def per_request(base: str, requests: int, concurrency: int) -> None:
    rows = await contenders(base)
    print(f"\nper request ({requests} requests, concurrency {concurrency}; µs)")
    print(f"{'client':<40} {'CPU':>8} {'wall':>8}")
    for name, (call, close) in rows.items():
        cpu, wall = await measure(call, requests, concurrency)
        print(f"{name:<40} {cpu:8.0f} {wall:8.0f}")
        await close()


def missing(modules: tuple[str, ...]) -> list[str]:
    """Which of ``modules`` cannot be imported here."""
    return [m for m in modules if importlib.util.find_spec(m) is None]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--import-repeat", type=int, default=5)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve())
        return
    if absent := missing(("openai", "anthropic", "httpx", "httpx2")):
        sys.exit(f"install the contenders first: .venv/bin/pip install {' '.join(absent)}")

    print("import (fresh interpreter, median)")
    print(f"{'module':<32} {'ms':>8} {'+MiB RSS':>9} {'modules':>8}")
    for module in (
        "httpx",
        "httpx2",
        "aiohttp",
        "cleveragents.providers.openai",
        "openai",
        "anthropic",
    ):
        ms, mib, modules = import_cost(module, args.import_repeat)
        print(f"{module:<32} {ms:8.0f} {mib:9.1f} {modules:8d}")

    server = subprocess.Popen(
        [sys.executable, __file__, "--serve"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        base = f"http://127.0.0.1:{port}"
        asyncio.run(per_request(base, args.requests, args.concurrency))
        if args.concurrency == 1:
            asyncio.run(per_request(base, args.requests, 32))
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()

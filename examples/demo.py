"""`make demo`: start a sidecar, host two Python tools in a client, watch the run live.

The sidecar runs on a `scripted` profile, so no API key is needed: the script below plays
the model's part and asks for the client's tools, which the sidecar calls back over the
Session stream. The profile streams each turn word by word (`stream_delay`), and the client
asks for the deltas (`stream_deltas=True`), so the model's text appears as it is "typed".
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

from cleveragents.client import SidecarClient
from cleveragents.tool import (
    IterationStarted,
    LLMDelta,
    LLMResponded,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunStarted,
    ToolCallCompleted,
    ToolCallStarted,
    ToolRegistry,
)

tools = ToolRegistry()

CAPITALS = {"france": "Paris", "japan": "Tokyo", "kenya": "Nairobi"}


@tools.tool
def capital_of(country: str) -> dict[str, str]:
    """Look up the capital city of a country.

    Args:
        country: The country's English name.
    """
    try:
        return {"country": country, "capital": CAPITALS[country.lower()]}
    except KeyError:
        raise LookupError(f"no capital on file for {country!r}") from None


@tools.tool
async def word_count(text: str) -> int:
    """Count the words in a text.

    Args:
        text: Any text.
    """
    return len(text.split())


SCRIPT: list[dict[str, Any]] = [
    {
        "content": "I'll look up both capitals at once.",
        "tool_calls": [
            {"id": "call_fr", "name": "capital_of", "arguments": {"country": "France"}},
            {"id": "call_at", "name": "capital_of", "arguments": {"country": "Atlantis"}},
        ],
        "usage": {"input_tokens": 412, "output_tokens": 38},
    },
    {
        "content": "Atlantis has no capital on file. Counting the words of my answer.",
        "tool_calls": [
            {
                "id": "call_wc",
                "name": "word_count",
                "arguments": {"text": "The capital of France is Paris."},
            }
        ],
        "usage": {"input_tokens": 530, "output_tokens": 41},
    },
    {
        "content": "The capital of France is Paris (6 words). Atlantis is not on file.",
        "usage": {"input_tokens": 588, "output_tokens": 19},
    },
]


#: The embedded scripted profile, streaming its turns 40 ms a word, as a model would.
CONFIG = """
[profiles.scripted]
kind = "scripted"
stream_delay = 0.04
"""


def start_sidecar(config: str) -> tuple[subprocess.Popen[str], str]:
    """Start `cleveragents-sidecar serve` on a free port and read the address it prints."""
    command = [
        os.path.join(os.path.dirname(sys.executable), "cleveragents-sidecar"),
        "serve", "--listen", "127.0.0.1:0", "--log-format", "console", "--log-level", "warning",
        "--config", config,
    ]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if not line.startswith("cleveragents-sidecar listening on "):
        process.kill()
        raise SystemExit(f"the sidecar did not start: {line!r}")
    return process, line.rsplit(" ", 1)[1]


#: Whether the model's streamed text is being written on the current line.
typing_text = False


def show(sequence: int, event: object) -> None:
    """One line per event, as it arrives; the model's text piece by piece as it streams."""
    global typing_text
    prefix = f"  #{sequence:<3}"
    if isinstance(event, LLMDelta):
        if event.text:
            if not typing_text:
                print("        model is typing: ", end="")
                typing_text = True
            print(event.text, end="", flush=True)
        return
    if typing_text:
        print()
        typing_text = False
    if isinstance(event, RunStarted):
        mine = [name for name in event.tool_names if name in tools]
        served = len(event.tool_names) - len(mine)
        print(
            f"{prefix} run started      {event.run_id[:8]}  tools: {', '.join(mine)} (this client)"
            f" + {served} served by the sidecar"
        )
    elif isinstance(event, IterationStarted):
        print(f"{prefix} iteration {event.iteration}")
    elif isinstance(event, LLMResponded):
        calls = f" -> {len(event.tool_calls)} tool call(s)" if event.tool_calls else ""
        print(f"{prefix} model says       {event.content!r}{calls}")
    elif isinstance(event, ToolCallStarted):
        print(f"{prefix} calling          {event.tool_name}({json.dumps(dict(event.inputs))})")
    elif isinstance(event, ToolCallCompleted):
        r = event.record
        outcome = f"ok     {json.dumps(dict(r.output))}" if r.success else f"FAILED {r.error}"
        print(f"{prefix} {r.tool_name:<16} {r.duration_ms:7.2f} ms  {outcome}")
    elif isinstance(event, RunCompleted | RunFailed | RunCancelled):
        print(f"{prefix} {type(event).__name__}")


def main() -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as config:
        config.write(CONFIG)
    process, address = start_sidecar(config.name)
    os.unlink(config.name)  # read at start-up
    print(f"sidecar listening on {address} (scripted profile, streaming)\n")
    try:
        with SidecarClient(address) as client:
            started = time.perf_counter()
            final = None
            for streamed in client.session(
                "What are the capitals of France and Atlantis?",
                tools=tools,
                script=SCRIPT,
                stream_deltas=True,
            ):
                show(streamed.sequence, streamed.event)
                if isinstance(streamed.event, RunCompleted | RunFailed | RunCancelled):
                    final = streamed.event
            elapsed_ms = (time.perf_counter() - started) * 1000
        assert final is not None
        result = final.result
        failed = sum(not r.success for r in result.tool_call_history)
        print(f"\nfinal answer: {result.content.splitlines()[-1]}")
        print(
            f"summary: stop_reason={result.stop_reason.value}, iterations={result.iterations}, "
            f"tool calls={len(result.tool_call_history)} ({failed} failed), "
            f"tokens in/out={result.usage.input_tokens}/{result.usage.output_tokens}, "
            f"{elapsed_ms:.1f} ms end to end"
        )
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=15)


if __name__ == "__main__":
    main()

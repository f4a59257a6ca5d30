"""What the loop checks of its inputs: the prompt it is given and each response it gets."""

from __future__ import annotations

from typing import Any

from cleveragents.tool.messages import LLMResponse, ToolCall

__all__ = ["check_prompt", "response_problem"]


def check_prompt(prompt: str) -> None:
    """Refuse a prompt that is not a string, or holds no text."""
    if not isinstance(prompt, str):
        raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")
    if not prompt.strip():
        raise ValueError("prompt must not be empty")


def response_problem(response: Any, max_calls: int | None) -> str | None:
    """What is wrong with what an LLM caller returned (``None``: nothing), worded to follow
    "the LLM caller of iteration N"."""
    if not isinstance(response, LLMResponse):
        return f"returned {type(response).__name__}, not an LLMResponse"
    if max_calls is not None and len(response.tool_calls) > max_calls:
        return (
            f"asked for {len(response.tool_calls)} tool calls in one response, more than "
            f"the limit of {max_calls} (max_calls_per_response)"
        )
    if not all(isinstance(call, ToolCall) for call in response.tool_calls):
        return "returned tool_calls entries that are not ToolCall objects"
    return None

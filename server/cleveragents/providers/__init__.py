"""LLM provider adapters: ``LLMCaller``s for OpenAI Chat Completions, the OpenAI Responses API
and Anthropic Messages.

All speak plain HTTP through ``aiohttp`` (whose HTTP parser is C: a streamed delta costs a
fraction of what it did on httpx2, ``bench/http_stacks.py``; the vendors' SDKs offer it as
their transport too), with our own retry policy, server-sent events read per read
(``cleveragents.providers.sse``) and a connection pool that can be shared across runs.
``ProviderError`` and ``RetryPolicy`` are importable without loading ``aiohttp``; the callers
load it on first access, so that a sidecar with no provider profile does not pay for it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from cleveragents.providers._retry import (
    AnswerTooLargeError,
    ProviderError,
    RetryPolicy,
    is_retryable_status,
    retry_after_s,
)

if TYPE_CHECKING:
    from cleveragents.providers._caller import HTTPCaller
    from cleveragents.providers._http import new_client
    from cleveragents.providers._output import anthropic_has_structured_outputs, strict_problem
    from cleveragents.providers.anthropic import AnthropicMessagesCaller
    from cleveragents.providers.openai import OpenAIChatCaller
    from cleveragents.providers.openai_responses import OpenAIResponsesCaller

__all__ = [
    "RESERVED_PARAMS",
    "AnswerTooLargeError",
    "AnthropicMessagesCaller",
    "HTTPCaller",
    "OpenAIChatCaller",
    "OpenAIResponsesCaller",
    "ProviderError",
    "RetryPolicy",
    "anthropic_has_structured_outputs",
    "is_retryable_status",
    "new_client",
    "retry_after_s",
    "strict_problem",
]

#: Request fields the callers write themselves; generation parameters may not set them.
RESERVED_PARAMS = frozenset({"model", "messages", "tools", "system", "stream", "input"})

_LAZY = {
    "AnthropicMessagesCaller": "cleveragents.providers.anthropic",
    "HTTPCaller": "cleveragents.providers._caller",
    "new_client": "cleveragents.providers._http",
    "anthropic_has_structured_outputs": "cleveragents.providers._output",
    "strict_problem": "cleveragents.providers._output",
    "OpenAIChatCaller": "cleveragents.providers.openai",
    "OpenAIResponsesCaller": "cleveragents.providers.openai_responses",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)

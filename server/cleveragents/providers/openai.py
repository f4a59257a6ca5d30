"""``OpenAIChatCaller``: the OpenAI Chat Completions API, or any server that speaks it.

``POST {base_url}/chat/completions`` with ``tools`` (function entries), the conversation as
``messages`` (assistant ``tool_calls``, ``tool`` messages with ``tool_call_id``) and the key as
a bearer token. Ollama, vLLM, LM Studio, OpenRouter and similar servers take the same request
at their own ``base_url`` (which, as with OpenAI's SDK, includes the ``/v1``).
"""

from __future__ import annotations

from typing import Any

from cleveragents.providers._caller import HTTPCaller
from cleveragents.tool import LLMRequest, ToolFormat

__all__ = ["OPENAI_BASE_URL", "OpenAIChatCaller"]

OPENAI_BASE_URL = "https://api.openai.com/v1"
#: Parameters the API accepts only beside ``tools``: "'tool_choice' is only allowed when
#: 'tools' are specified" (400), and the same for ``parallel_tool_calls``.
_TOOL_PARAMS = ("tool_choice", "parallel_tool_calls")


class OpenAIChatCaller(HTTPCaller):
    """An ``LLMCaller`` for OpenAI Chat Completions.

    Without an ``api_key`` no ``Authorization`` header is sent (local servers need none). A
    request that offers no tools (a summary call, a run with none) leaves out the profile's
    tool-only params (``tool_choice``, ``parallel_tool_calls``), which the API refuses then.
    """

    provider = "openai"
    tool_format = ToolFormat.OPENAI
    default_base_url = OPENAI_BASE_URL

    def endpoint(self, base_url: str) -> str:
        return f"{base_url}/chat/completions"

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {"authorization": f"Bearer {api_key}"} if api_key else {}

    def body(self, request: LLMRequest, tools: list[dict[str, Any]]) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, **self.params}
        body.update(self.router.format_messages(request.messages))
        if tools:  # the API rejects an empty tools array
            body["tools"] = tools
        else:
            for key in _TOOL_PARAMS:
                body.pop(key, None)
        return body

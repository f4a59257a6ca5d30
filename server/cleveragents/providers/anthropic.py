"""``AnthropicMessagesCaller``: the Anthropic Messages API.

``POST {base_url}/v1/messages`` with ``tools`` (``input_schema`` entries), system messages
lifted into the top-level ``system`` field, ``tool_use`` blocks in assistant turns and
``tool_result`` blocks (``is_error`` on failures) in user turns, the key in ``x-api-key`` and
the API version in ``anthropic-version``. ``max_tokens`` is required by the API: it defaults
to :data:`DEFAULT_MAX_TOKENS` unless the generation parameters set it.
"""

from __future__ import annotations

from typing import Any

from cleveragents.providers._caller import HTTPCaller
from cleveragents.tool import LLMRequest, ToolFormat

__all__ = [
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_VERSION",
    "DEFAULT_MAX_TOKENS",
    "AnthropicMessagesCaller",
]

ANTHROPIC_BASE_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
#: Parameters the API accepts only beside ``tools``: ``tool_choice`` (which also carries
#: ``disable_parallel_tool_use``) is refused (400) in a request without tools.
_TOOL_PARAMS = ("tool_choice",)


class AnthropicMessagesCaller(HTTPCaller):
    """An ``LLMCaller`` for Anthropic Messages.

    A request that offers no tools leaves out the profile's ``tool_choice``, which the API
    refuses then.
    """

    provider = "anthropic"
    tool_format = ToolFormat.ANTHROPIC
    default_base_url = ANTHROPIC_BASE_URL

    def endpoint(self, base_url: str) -> str:
        return f"{base_url}/v1/messages"

    def auth_headers(self, api_key: str) -> dict[str, str]:
        headers = {"anthropic-version": ANTHROPIC_VERSION}
        if api_key:
            headers["x-api-key"] = api_key
        return headers

    def body(self, request: LLMRequest, tools: list[dict[str, Any]]) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "max_tokens": DEFAULT_MAX_TOKENS}
        body.update(self.params)
        body.update(self.router.format_messages(request.messages))
        if tools:
            body["tools"] = tools
        else:
            for key in _TOOL_PARAMS:
                body.pop(key, None)
        return body

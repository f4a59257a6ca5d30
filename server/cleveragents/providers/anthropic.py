"""``AnthropicMessagesCaller``: the Anthropic Messages API.

``POST {base_url}/v1/messages`` with ``tools`` (``input_schema`` entries), system messages
lifted into the top-level ``system`` field, ``tool_use`` blocks in assistant turns and
``tool_result`` blocks (``is_error`` on failures) in user turns, the key in ``x-api-key`` and
the API version in ``anthropic-version``. ``max_tokens`` is required by the API: it defaults
to :data:`DEFAULT_MAX_TOKENS` unless the generation parameters set it.

Streaming reads the Messages events: ``message_start`` (the usage of the prompt),
``content_block_start`` (a ``text`` or ``tool_use`` block), ``content_block_delta``
(``text_delta``, ``input_json_delta``), ``content_block_stop``, ``message_delta`` (the stop
reason and output usage) and ``message_stop``; ``ping`` is skipped and ``error`` ends the call.
With ``strict_tools`` each tool goes with ``strict: true`` (Anthropic's strict tool use,
generally available without a beta header): the model's ``input`` then always matches the
schema, which must suit strict mode (``additionalProperties: false`` on every object, as the
registry's schemas have). With ``cache_prompt`` the system prompt, the tools and the
conversation so far are marked ``cache_control: ephemeral``, so that each iteration of a loop
reads the prefix that the previous one wrote to Anthropic's prompt cache instead of paying for
it again.
"""

from __future__ import annotations

from typing import Any

from cleveragents.providers._assembly import DEFAULT_MAX_ANSWER_CHARS, Assembler, StreamFailure
from cleveragents.providers._caller import HTTPCaller
from cleveragents.tool import DeltaSink, LLMRequest, ToolFormat

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
_EPHEMERAL = {"type": "ephemeral"}


class AnthropicMessagesCaller(HTTPCaller):
    """An ``LLMCaller`` for Anthropic Messages.

    A request that offers no tools leaves out the profile's ``tool_choice``, which the API
    refuses then. ``cache_prompt`` adds prompt-caching breakpoints (see the module docstring).
    """

    def __init__(self, model: str, *, cache_prompt: bool = False, **kwargs: Any) -> None:
        super().__init__(model, **kwargs)
        self.cache_prompt = cache_prompt

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

    def provider_tools(self, tools: Any) -> list[dict[str, Any]]:
        out = super().provider_tools(tools)
        if self.strict_tools:
            out = [{**t, "strict": True} for t in out]
        return out

    def body(self, request: LLMRequest, tools: list[dict[str, Any]]) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "max_tokens": DEFAULT_MAX_TOKENS}
        body.update(self.params)
        body.update(self.router.format_messages(request.messages))
        if tools:
            body["tools"] = tools
        else:
            for key in _TOOL_PARAMS:
                body.pop(key, None)
        if self.cache_prompt:
            _mark_cache_breakpoints(body)
        return body

    def assembler(self, request: LLMRequest) -> Assembler:
        return MessageStream(request.deltas, request.iteration, self.max_answer_chars)


def _mark_cache_breakpoints(body: dict[str, Any]) -> None:
    """``cache_control`` on the system prompt, the last tool and the last block of the
    conversation: three of the four breakpoints the API allows, each caching all before it."""
    if isinstance(body.get("system"), str):
        body["system"] = [{"type": "text", "text": body["system"], "cache_control": _EPHEMERAL}]
    if body.get("tools"):
        body["tools"] = [*body["tools"][:-1], {**body["tools"][-1], "cache_control": _EPHEMERAL}]
    messages = body.get("messages") or []
    if messages and isinstance(messages[-1].get("content"), list) and messages[-1]["content"]:
        last = messages[-1]
        blocks = [*last["content"][:-1], {**last["content"][-1], "cache_control": _EPHEMERAL}]
        messages[-1] = {**last, "content": blocks}


class MessageStream(Assembler):
    """Assembles a streamed message from the Messages API's events."""

    def __init__(
        self, sink: DeltaSink | None, iteration: int, max_chars: int = DEFAULT_MAX_ANSWER_CHARS
    ) -> None:
        super().__init__(sink, iteration, max_chars)
        self._blocks: dict[int, dict[str, Any]] = {}
        #: Each text block's fragments, joined once in ``body`` (not re-copied per delta).
        self._texts: dict[int, list[str]] = {}
        self._message: dict[str, Any] = {}
        self._usage: dict[str, Any] = {}

    def handle(self, event: str, data: dict[str, Any]) -> bool:
        kind = str(data.get("type", event))
        if kind == "error":
            raise StreamFailure(data.get("error") or data)
        if kind in ("message_start", "message_delta"):
            self.keep_event()  # their fields are kept as they came
        if kind == "message_start":
            self._message = dict(data.get("message") or {})
            self._usage.update(self._message.get("usage") or {})
        elif kind == "content_block_start":
            self._start_block(int(data["index"]), data.get("content_block") or {})
        elif kind == "content_block_delta":
            self._delta(int(data["index"]), data.get("delta") or {})
        elif kind == "message_delta":
            self._message.update(data.get("delta") or {})
            self._usage.update(data.get("usage") or {})
        return kind == "message_stop"

    def _start_block(self, index: int, block: dict[str, Any]) -> None:
        block = dict(block)
        if block.get("type") != "text":  # kept whole (a tool_use block's input, a thinking one)
            self.keep_event()
        if block.get("type") == "tool_use":
            block["position"] = self.start_call(block.get("id"), block.get("name"))
            block["id"] = self.calls[block["position"]].id
        elif block.get("type") == "text":
            self.add_text(block.get("text"))
            self._texts[index] = [str(block.get("text") or "")]
        self._blocks[index] = block

    def _delta(self, index: int, delta: dict[str, Any]) -> None:
        block = self._blocks[index]
        kind = delta.get("type")
        if kind == "text_delta" and block.get("type") == "text":
            self.add_text(delta.get("text"))
            self._texts[index].append(str(delta.get("text") or ""))
        elif kind == "input_json_delta" and "position" in block:
            self.add_arguments(block["position"], delta.get("partial_json"))
        # thinking_delta, signature_delta, citations_delta: not part of the answer's text

    def body(self) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        for index, block in sorted(self._blocks.items()):
            if index in self._texts:
                content.append({**block, "text": "".join(self._texts[index])})
            elif "position" in block:
                call = self.calls[block["position"]]
                content.append(
                    {"type": "tool_use", "id": call.id, "name": call.name,
                     "input": call.arguments_text or dict(block.get("input") or {})}
                )  # fmt: skip
            else:
                content.append(block)
        return {**self._message, "content": content, "usage": self._usage}

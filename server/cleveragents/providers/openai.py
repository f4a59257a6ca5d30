"""``OpenAIChatCaller``: the OpenAI Chat Completions API, or any server that speaks it.

``POST {base_url}/chat/completions`` with ``tools`` (function entries), the conversation as
``messages`` (assistant ``tool_calls``, ``tool`` messages with ``tool_call_id``) and the key as
a bearer token. Ollama, vLLM, LM Studio, OpenRouter and similar servers take the same request
at their own ``base_url`` (which, as with OpenAI's SDK, includes the ``/v1``).

Streaming sends ``stream: true`` with ``stream_options.include_usage`` and reads
``chat.completion.chunk`` events up to ``data: [DONE]``: text in ``delta.content``, tool calls
in ``delta.tool_calls`` by ``index`` (the id and name first, then fragments of the arguments),
and the usage in a last chunk without choices. An ``error`` object in any chunk ends the call
with the provider's message, whatever else the chunk holds (OpenRouter sends one beside
``choices``; reading on would complete the answer cut short). Some OpenAI-compatible servers
refuse the ``stream_options`` field (HTTP 400): ``stream_usage=False`` leaves it out (the
stream then carries no usage unless the server sends it anyway), and a 400 that names the
field says so.

A run with an output schema sends it as ``response_format`` (``json_schema``, with ``strict``
when the schema meets strict mode's rules: see ``_output.py``); the answer is the message's
content, and a ``refusal`` in its place ends the run with the refusal's text.
"""

from __future__ import annotations

from typing import Any

from cleveragents.providers._assembly import Assembler, StreamFailure
from cleveragents.providers._caller import HTTPCaller
from cleveragents.providers._http import describe_error
from cleveragents.providers._output import chat_response_format
from cleveragents.providers._retry import ProviderError
from cleveragents.tool import LLMRequest, LLMResponse, ToolFormat

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
    ``stream_usage`` (default true) asks a stream for its usage with ``stream_options``.
    """

    provider = "openai"
    tool_format = ToolFormat.OPENAI
    default_base_url = OPENAI_BASE_URL

    def __init__(self, model: str, *, stream_usage: bool = True, **kwargs: Any) -> None:
        super().__init__(model, **kwargs)
        self.stream_usage = stream_usage

    async def call(self, request: LLMRequest) -> LLMResponse:
        try:
            return await super().call(request)
        except ProviderError as error:
            if self.stream and self.stream_usage and _refuses_stream_options(error):
                error.message += (
                    "; this server does not take stream_options: set stream_usage = false "
                    "in the profile (or stream = false)"
                )
            raise

    def endpoint(self, base_url: str) -> str:
        return f"{base_url}/chat/completions"

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {"authorization": f"Bearer {api_key}"} if api_key else {}

    def provider_tools(self, tools: Any) -> list[dict[str, Any]]:
        out = super().provider_tools(tools)
        if self.strict_tools:
            out = [{**t, "function": {**t["function"], "strict": True}} for t in out]
        return out

    def stream_body(self, body: dict[str, Any]) -> dict[str, Any]:
        if not self.stream_usage:
            return {**body, "stream": True}
        options = {**body.get("stream_options", {}), "include_usage": True}
        return {**body, "stream": True, "stream_options": options}

    def assembler(self, request: LLMRequest) -> Assembler:
        return ChatStream(request.deltas, request.iteration, self.max_answer_chars)

    def parse_body(self, data: dict[str, Any]) -> LLMResponse:
        error = data.get("error")  # some servers answer 200 with one, beside choices or not
        if error:
            said = describe_error(error) if isinstance(error, dict) else str(error)[:500]
            raise ValueError(f"the provider answered with an error: {said}")
        return super().parse_body(data)

    def body(self, request: LLMRequest, tools: list[dict[str, Any]]) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, **self.params}
        body.update(self.router.format_messages(request.messages))
        if tools:  # the API rejects an empty tools array
            body["tools"] = tools
        else:
            for key in _TOOL_PARAMS:
                body.pop(key, None)
        if (output := request.output) is not None:
            strict = self.strict_for(output)
            body["response_format"] = chat_response_format(output, strict)
        return body


def _refuses_stream_options(error: ProviderError) -> bool:
    """Whether ``error`` is a server's refusal of the ``stream_options`` field."""
    return error.status in (400, 422) and "stream_options" in error.message


class ChatStream(Assembler):
    """Assembles a streamed chat completion from its ``chat.completion.chunk`` events."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._positions: dict[Any, int] = {}
        self._refusal: list[str] = []
        self._finish: Any = None
        self._usage: Any = None

    def handle(self, event: str, data: dict[str, Any]) -> bool:
        error = data.get("error")  # beside choices too (OpenRouter's "Token limit reached")
        if error or ("error" in data and not data.get("choices")):
            raise StreamFailure(error)
        if data.get("usage"):
            self._usage = data["usage"]
        for choice in data.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue  # n > 1: only the first choice is used, as without streaming
            delta = choice.get("delta") or {}
            self.add_text(delta.get("content"))
            if isinstance(delta.get("refusal"), str):
                self.keep(delta["refusal"])
                self._refusal.append(delta["refusal"])
            for entry in delta.get("tool_calls") or ():
                self._tool_call(entry)
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]
        return False  # complete at [DONE], after the usage chunk

    def _tool_call(self, entry: dict[str, Any]) -> None:
        function = entry.get("function") or {}
        # Keyed by index; servers that leave it out send each call whole, with its id.
        key = entry.get("index", entry.get("id"))
        position = self._positions.get(key)
        if position is None:
            if key is None and self.calls:
                position = len(self.calls) - 1
            else:
                position = self._positions[key] = self.start_call(
                    entry.get("id"), function.get("name")
                )
        self.add_arguments(position, function.get("arguments"))

    def body(self) -> dict[str, Any]:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(self.text) or None,
            "refusal": "".join(self._refusal) or None,
        }
        if self.calls:
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments_text},
                }
                for c in self.calls
            ]
        choice = {"index": 0, "message": message, "finish_reason": self._finish}
        return {"choices": [choice], "usage": self._usage}

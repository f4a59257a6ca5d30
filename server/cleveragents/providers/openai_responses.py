"""``OpenAIResponsesCaller``: the OpenAI Responses API (``POST {base_url}/responses``).

The conversation goes as ``input`` items: messages by role, each tool call as a
``function_call`` item and each result as a ``function_call_output`` item naming its
``call_id``. Tools are flat ``function`` entries with ``strict`` set as the caller says (the
API's own default is strict, which many schemas do not meet).

Reasoning models answer with ``reasoning`` items besides their messages and calls, and want
them back on the next turn. An answer with reasoning items carries its whole ``output`` in
the response's :class:`~cleveragents.tool.Reasoning` (``provider`` ``"openai_responses"``,
the summaries' text as ``summary``), which the loop keeps on the assistant message and logs
in ``LlmResponded``; when that turn is sent again its output items go back exactly as they
came (reasoning, ``encrypted_content`` included, with the message and ``function_call``
items that followed it, ids and all), whether the caller is the one that received them or a
new one after a restart. A turn without them (another provider's, or items left out of an
oversized event) goes as a plain message and calls.

Streaming reads ``response.output_item.added`` (a call's id and name),
``response.output_text.delta``, ``response.function_call_arguments.delta`` and ends at
``response.completed`` (or ``response.incomplete``), whose ``response`` is the whole answer;
``response.failed`` and ``error`` end the call with the API's error code.

A run with an output schema sends it as ``text.format`` (``json_schema``, with ``strict`` when
the schema meets strict mode's rules: see ``_output.py``); the answer is the output text, and
a ``refusal`` part in its place ends the run with the refusal's text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cleveragents.providers._assembly import Assembler, StreamFailure
from cleveragents.providers._caller import HTTPCaller
from cleveragents.providers._http import describe_error
from cleveragents.providers._output import responses_text_format
from cleveragents.providers.openai import OPENAI_BASE_URL
from cleveragents.tool import (
    LLMRefusal,
    LLMRequest,
    LLMResponse,
    Message,
    Reasoning,
    Role,
    ToolCall,
    ToolFormat,
    Usage,
    parse_call,
)
from cleveragents.tool.jsontext import Encoder, loads
from cleveragents.tool.messages import MAX_TOKEN_COUNT

__all__ = ["PROVIDER", "OpenAIResponsesCaller"]

#: ``Reasoning.provider`` of the items this API returns (and the only ones it takes back).
PROVIDER = "openai_responses"
_encode = Encoder()
_compact = Encoder(separators=(",", ":"))
#: Parameters the API accepts only beside ``tools``.
_TOOL_PARAMS = ("tool_choice", "parallel_tool_calls")


class OpenAIResponsesCaller(HTTPCaller):
    """An ``LLMCaller`` for the OpenAI Responses API (see the module docstring).

    With ``params`` ``store = false`` (nothing kept at OpenAI), reasoning comes back
    encrypted (``include: reasoning.encrypted_content``) so that it can be passed back.
    """

    provider = "openai"
    tool_format = ToolFormat.OPENAI
    default_base_url = OPENAI_BASE_URL

    def endpoint(self, base_url: str) -> str:
        return f"{base_url}/responses"

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {"authorization": f"Bearer {api_key}"} if api_key else {}

    def provider_tools(self, tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        flat: list[dict[str, Any]] = []
        for tool in super().provider_tools(tools):
            function = tool["function"]
            flat.append(
                {
                    "type": "function",
                    "name": function.get("name", ""),
                    "description": function.get("description", ""),
                    "parameters": function.get("parameters", {"type": "object"}),
                    "strict": self.strict_tools,
                }
            )
        return flat

    def body(self, request: LLMRequest, tools: list[dict[str, Any]]) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, **self.params}
        body["input"] = [item for m in request.messages for item in self._items(m)]
        if tools:
            body["tools"] = tools
        else:
            for key in _TOOL_PARAMS:
                body.pop(key, None)
        if body.get("store") is False:
            include = list(body.get("include") or [])
            if "reasoning.encrypted_content" not in include:
                body["include"] = [*include, "reasoning.encrypted_content"]
        if (output := request.output) is not None:
            strict = self.strict_for(output)
            text = body.get("text")
            body["text"] = {**(text if isinstance(text, dict) else {}),
                            "format": responses_text_format(output, strict)}  # fmt: skip
        return body

    def assembler(self, request: LLMRequest) -> Assembler:
        return ResponsesStream(request.deltas, request.iteration, self.max_answer_chars)

    def parse_body(self, data: dict[str, Any]) -> LLMResponse:
        return parse_response(data)

    def _items(self, m: Message) -> list[Any]:
        if m.role is Role.TOOL:
            return [
                {"type": "function_call_output", "call_id": m.tool_call_id, "output": m.content}
            ]
        if m.role is not Role.ASSISTANT:
            return [{"role": m.role.value, "content": m.content}]
        if m.reasoning is not None and m.reasoning.provider == PROVIDER and m.reasoning.items:
            kept = loads(m.reasoning.items)
            if isinstance(kept, list):
                return kept
        items: list[Any] = [{"role": "assistant", "content": m.content}] if m.content else []
        items += [
            {"type": "function_call", "call_id": c.id, "name": c.name,
             "arguments": _encode(dict(c.arguments))}
            for c in m.tool_calls
        ]  # fmt: skip
        return items


def parse_response(data: Mapping[str, Any]) -> LLMResponse:
    """A Responses API ``response`` object as an ``LLMResponse``.

    Raises ``ValueError`` for one that cannot be used: failed, cut off by the token limit in
    the middle of its calls, or with nothing in it. A refusal is an answer with ``refusal``.
    """
    status = data.get("status")
    if status == "failed":
        raise ValueError(f"the response failed: {describe_error(data.get('error') or {})}")
    text: list[str] = []
    refusal: list[str] = []
    calls: list[ToolCall] = []
    for item in data.get("output") or ():
        if not isinstance(item, Mapping):
            continue
        if item.get("type") == "message":
            for part in item.get("content") or ():
                if isinstance(part, Mapping) and part.get("type") == "output_text":
                    text.append(str(part.get("text") or ""))
                elif isinstance(part, Mapping) and part.get("type") == "refusal":
                    refusal.append(str(part.get("refusal") or ""))
        elif item.get("type") == "function_call":
            calls.append(
                parse_call(str(item.get("call_id", "")), str(item.get("name", "")),
                           item.get("arguments"))
            )  # fmt: skip
    usage = data.get("usage")
    counts = _usage(usage) if isinstance(usage, Mapping) else None
    if refusal and not calls:
        said = "".join(refusal) or "the model refused"
        return LLMRefusal("".join(text), (), counts, _reasoning(data.get("output")), said)
    reason = (data.get("incomplete_details") or {}).get("reason")
    if status == "incomplete" and (calls or not text):
        raise ValueError(f"the response is incomplete ({reason or 'no reason given'})")
    return LLMResponse("".join(text), calls, counts, _reasoning(data.get("output")))


def _reasoning(output: Any) -> Reasoning | None:
    """The answer's output items as its ``Reasoning`` when some are reasoning items."""
    if not isinstance(output, list):
        return None
    thoughts = [i for i in output if isinstance(i, Mapping) and i.get("type") == "reasoning"]
    if not thoughts:
        return None
    summaries = [
        str(part.get("text") or "")
        for item in thoughts
        for part in item.get("summary") or ()
        if isinstance(part, Mapping) and part.get("type") == "summary_text"
    ]
    return Reasoning(PROVIDER, "\n\n".join(summaries), _compact(output))


def _usage(usage: Mapping[str, Any]) -> Usage:
    def count(key: str) -> int:
        value: Any = usage.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            return 0
        return min(int(value), MAX_TOKEN_COUNT)  # an absurd count exhausts any budget

    return Usage(count("input_tokens"), count("output_tokens"), count("total_tokens"))


class ResponsesStream(Assembler):
    """Assembles a streamed response from the Responses API's events."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._positions: dict[Any, int] = {}
        self._response: dict[str, Any] = {}

    def handle(self, event: str, data: dict[str, Any]) -> bool:
        kind = str(data.get("type", event))
        if kind == "error":
            raise StreamFailure(data.get("error") if isinstance(data.get("error"), dict) else data)
        if kind == "response.failed":
            response = data.get("response") or {}
            raise StreamFailure(response.get("error") or {"message": "the response failed"})
        if kind == "response.output_item.added":
            item = data.get("item") or {}
            if item.get("type") == "function_call":
                position = self.start_call(item.get("call_id"), item.get("name"))
                self._positions[data.get("output_index")] = position
                self.add_arguments(position, item.get("arguments"))
        elif kind == "response.output_text.delta":
            self.add_text(data.get("delta"))
        elif kind == "response.function_call_arguments.delta":
            found = self._positions.get(data.get("output_index"))
            if found is not None:
                self.add_arguments(found, data.get("delta"))
        elif kind in ("response.completed", "response.incomplete"):
            self._response = dict(data.get("response") or {})
            return True
        return False

    def body(self) -> dict[str, Any]:
        return self._response

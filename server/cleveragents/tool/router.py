"""``ToolCallRouter``: translation between provider tool-call formats and ours.

Two formats, both directions: OpenAI Chat Completions (``tools`` with ``function`` entries,
``tool_calls`` whose arguments are JSON text, ``tool`` role messages) and Anthropic Messages
(``tools`` with ``input_schema``, ``tool_use`` and ``tool_result`` content blocks). Arguments
that do not parse become a call with ``arguments_error`` set, which the runner records as a
failure the model gets to see, rather than an exception.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cleveragents.tool.jsontext import Encoder, is_object
from cleveragents.tool.jsontext import loads as json_loads
from cleveragents.tool.messages import (
    MAX_TOKEN_COUNT,
    LLMRefusal,
    LLMResponse,
    Message,
    Role,
    ToolCall,
    Usage,
)
from cleveragents.tool.spec import ToolSpec

__all__ = ["ToolCallRouter", "ToolFormat", "parse_call", "route_call"]


_encode = Encoder()


class ToolFormat(enum.StrEnum):
    """The provider formats the router speaks."""

    OPENAI = "openai"
    ANTHROPIC = "anthropic"


class ToolCallRouter:
    """Translate tools, tool calls and tool results to and from one provider's format."""

    __slots__ = ("format",)

    def __init__(self, format: ToolFormat | str = ToolFormat.OPENAI) -> None:
        try:
            self.format = ToolFormat(format)
        except ValueError:
            known = ", ".join(f.value for f in ToolFormat)
            raise ValueError(f"unknown tool format {format!r}; expected one of: {known}") from None

    def __repr__(self) -> str:
        return f"ToolCallRouter({self.format.value!r})"

    # -- ours -> provider ------------------------------------------------------------------

    def tool_schemas(self, specs: Iterable[ToolSpec]) -> list[dict[str, Any]]:
        """The provider's ``tools`` array for these specs."""
        if self.format is ToolFormat.OPENAI:
            return [
                {
                    "type": "function",
                    "function": {
                        "name": s.name,
                        "description": s.description,
                        "parameters": dict(s.input_schema),
                    },
                }
                for s in specs
            ]
        return [
            {"name": s.name, "description": s.description, "input_schema": dict(s.input_schema)}
            for s in specs
        ]

    def format_tool_calls(self, calls: Sequence[ToolCall]) -> list[dict[str, Any]]:
        """Tool calls as the provider writes them: ``tool_calls`` entries or ``tool_use`` blocks."""
        if self.format is ToolFormat.OPENAI:
            return [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": _encode(dict(c.arguments))},
                }
                for c in calls
            ]
        return [
            {"type": "tool_use", "id": c.id, "name": c.name, "input": dict(c.arguments)}
            for c in calls
        ]

    def format_messages(self, messages: Iterable[Message]) -> dict[str, Any]:
        """The conversation as request-body fields: ``messages`` (and ``system`` for Anthropic)."""
        if self.format is ToolFormat.OPENAI:
            return {"messages": [self._openai_message(m) for m in messages]}
        system: list[str] = []
        out: list[dict[str, Any]] = []
        for m in messages:
            if m.role is Role.SYSTEM:
                system.append(m.content)
                continue
            block = self._anthropic_blocks(m)
            role = "assistant" if m.role is Role.ASSISTANT else "user"
            # Anthropic wants alternating roles: consecutive tool results share one user turn.
            if out and out[-1]["role"] == role and m.role is Role.TOOL:
                out[-1]["content"].extend(block)
            else:
                out.append({"role": role, "content": block})
        body: dict[str, Any] = {"messages": out}
        if system:
            body["system"] = "\n\n".join(system)
        return body

    # -- provider -> ours ------------------------------------------------------------------

    def parse_tool_calls(self, payload: Mapping[str, Any] | Sequence[Any]) -> list[ToolCall]:
        """Tool calls from an assistant message (or, for Anthropic, its content blocks)."""
        if self.format is ToolFormat.OPENAI:
            entries = payload.get("tool_calls") if isinstance(payload, Mapping) else payload
            return [self._openai_call(e) for e in entries or ()]
        blocks = payload.get("content") if isinstance(payload, Mapping) else payload
        if not isinstance(blocks, Sequence) or isinstance(blocks, str):
            return []
        return [
            parse_call(str(b.get("id", "")), str(b.get("name", "")), b.get("input"))
            for b in blocks
            if isinstance(b, Mapping) and b.get("type") == "tool_use"
        ]

    def parse_response(self, body: Mapping[str, Any]) -> LLMResponse:
        """A whole provider response (chat completion or message) as an ``LLMResponse``.

        Raises ``ValueError`` for a response that cannot be used: no choices, tool calls cut
        off by the token limit, or no content and no tool calls together with a stop reason
        other than a natural end (``length``, ``content_filter``, ``max_tokens``…). A refusal
        (OpenAI's ``refusal``, Anthropic's ``refusal`` stop reason) is an answer whose
        ``refusal`` holds its text.
        Arguments that do not parse are not an error here: see :func:`parse_call`.
        """
        if not isinstance(body, Mapping):
            raise ValueError("the provider's response is not a JSON object")
        if self.format is ToolFormat.OPENAI:
            return _parse_openai(self, body)
        return _parse_anthropic(self, body)

    def route(self, call: ToolCall) -> ToolCall:
        """Normalise a call's arguments to a dict; unparseable ones set ``arguments_error``."""
        return route_call(call)

    # -- helpers ---------------------------------------------------------------------------

    def _openai_call(self, entry: Mapping[str, Any]) -> ToolCall:
        function = entry.get("function") or {}
        return parse_call(
            str(entry.get("id", "")), str(function.get("name", "")), function.get("arguments")
        )

    def _openai_message(self, m: Message) -> dict[str, Any]:
        if m.role is Role.TOOL:
            return {"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content}
        msg: dict[str, Any] = {"role": m.role.value, "content": m.content}
        if m.tool_calls:
            msg["tool_calls"] = self.format_tool_calls(m.tool_calls)
            if not m.content:
                msg["content"] = None
        return msg

    def _anthropic_blocks(self, m: Message) -> list[dict[str, Any]]:
        if m.role is Role.TOOL:
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": m.tool_call_id,
                "content": m.content,
            }
            if m.is_error:
                block["is_error"] = True
            return [block]
        blocks: list[dict[str, Any]] = [{"type": "text", "text": m.content}] if m.content else []
        blocks.extend(self.format_tool_calls(m.tool_calls))
        return blocks


#: Stop reasons of a complete answer; others explain why an empty answer is empty.
_NATURAL_STOPS = frozenset(
    {None, "stop", "tool_calls", "function_call", "end_turn", "tool_use", "stop_sequence"}
)
#: Stop reasons meaning the output hit the token limit.
_TRUNCATED = frozenset({"length", "max_tokens"})


def _parse_openai(router: ToolCallRouter, body: Mapping[str, Any]) -> LLMResponse:
    choices = body.get("choices") or []
    if not choices or not isinstance(choices, Sequence):
        raise ValueError("the provider's response has no choices")
    choice = choices[0]
    message = choice.get("message") if isinstance(choice, Mapping) else None
    if not isinstance(message, Mapping):
        raise ValueError("the provider's first choice has no message object")
    content = _text(message.get("content"))
    calls = router.parse_tool_calls(message)
    usage = body.get("usage")
    counts = (
        Usage(
            _count(usage, "prompt_tokens"),
            _count(usage, "completion_tokens"),
            _count(usage, "total_tokens"),  # counted when it exceeds the two (thinking tokens)
        )
        if isinstance(usage, Mapping) and usage
        else None
    )
    refusal = message.get("refusal")
    if refusal and not calls:
        return LLMRefusal(content, (), counts, refusal=str(refusal))
    _check_stop(content, calls, choice.get("finish_reason"), "finish_reason")
    return LLMResponse(content=content, tool_calls=calls, usage=counts)


def _parse_anthropic(router: ToolCallRouter, body: Mapping[str, Any]) -> LLMResponse:
    blocks = body.get("content") or []
    if not isinstance(blocks, Sequence) or isinstance(blocks, str):
        raise ValueError("the provider's response content is not a list of blocks")
    text = "".join(
        str(b.get("text") or "")
        for b in blocks
        if isinstance(b, Mapping) and b.get("type") == "text"
    )
    calls = router.parse_tool_calls(blocks)
    stop = body.get("stop_reason")
    usage = body.get("usage")
    # Cached prompt tokens are counted apart from input_tokens; they are input all the same.
    counts = (
        Usage(
            _count(usage, "input_tokens")
            + _count(usage, "cache_creation_input_tokens")
            + _count(usage, "cache_read_input_tokens"),
            _count(usage, "output_tokens"),
        )
        if isinstance(usage, Mapping) and usage
        else None
    )
    if stop == "refusal":  # the text so far, if any, says why
        return LLMRefusal(
            text, (), counts, refusal=text or "the model refused (stop_reason 'refusal')"
        )
    _check_stop(text, calls, stop, "stop_reason")
    return LLMResponse(content=text, tool_calls=calls, usage=counts)


def _check_stop(content: str, calls: Sequence[ToolCall], stop: Any, field: str) -> None:
    if stop in _TRUNCATED and calls:
        raise ValueError(
            f"the output hit the token limit ({field} {stop!r}) in the middle of its tool "
            "calls; raise max_tokens"
        )
    if not content and not calls and stop not in _NATURAL_STOPS:
        raise ValueError(f"the response has no content and no tool calls ({field} {stop!r})")


def _text(content: Any) -> str:
    """Message content as text: a string, nothing, or a list of text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "".join(
            str(p.get("text") or "")
            for p in content
            if isinstance(p, Mapping) and p.get("type") == "text"
        )
    raise ValueError(f"the message content is {_json_type(content)}, not text")


def _count(usage: Any, key: str) -> int:
    value = usage.get(key) if isinstance(usage, Mapping) else None
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        return 0
    return min(value, MAX_TOKEN_COUNT)  # an absurd count still exhausts any token budget


def route_call(call: ToolCall) -> ToolCall:
    """Normalise a call whose arguments arrived as JSON text (or not at all)."""
    if call.arguments_error is not None or is_object(call.arguments):
        return call
    return parse_call(call.id, call.name, call.arguments)


def parse_call(call_id: str, name: str, raw_arguments: Any) -> ToolCall:
    """A ``ToolCall`` from a provider's arguments: a dict, JSON text, or nothing.

    Arguments that do not parse, or parse to something other than an object, give a call
    with ``arguments_error`` set, which the runner records as a failure.
    """
    arguments = raw_arguments
    if isinstance(arguments, Mapping):
        return ToolCall(call_id, name, arguments)
    if isinstance(arguments, str | bytes):
        try:
            arguments = json_loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            problem = f"arguments are not valid JSON ({exc.msg} at position {exc.pos})"
            return ToolCall(call_id, name, {}, problem)
        except RecursionError:
            return ToolCall(call_id, name, {}, "arguments are nested too deeply")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, Mapping):
        problem = f"arguments must be a JSON object, not {_json_type(arguments)}"
        return ToolCall(call_id, name, {}, problem)
    return ToolCall(call_id, name, arguments)


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return type(value).__name__

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

from cleveragents.tool.messages import LLMResponse, Message, Role, ToolCall, Usage
from cleveragents.tool.spec import ToolSpec

__all__ = ["ToolCallRouter", "ToolFormat", "parse_call", "route_call"]


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
                    "function": {"name": c.name, "arguments": json.dumps(dict(c.arguments))},
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
        """A whole provider response (chat completion or message) as an ``LLMResponse``."""
        if self.format is ToolFormat.OPENAI:
            choices = body.get("choices") or []
            if not choices:
                raise ValueError("the provider's response has no choices")
            message = choices[0].get("message") or {}
            usage = body.get("usage") or {}
            return LLMResponse(
                content=message.get("content") or "",
                tool_calls=self.parse_tool_calls(message),
                usage=Usage(
                    int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
                )
                if usage
                else None,
            )
        blocks = body.get("content") or []
        usage = body.get("usage") or {}
        text = "".join(
            b.get("text", "") for b in blocks if isinstance(b, Mapping) and b.get("type") == "text"
        )
        return LLMResponse(
            content=text,
            tool_calls=self.parse_tool_calls(blocks),
            usage=Usage(int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0))
            if usage
            else None,
        )

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


def route_call(call: ToolCall) -> ToolCall:
    """Normalise a call whose arguments arrived as JSON text (or not at all)."""
    if call.arguments_error is not None or isinstance(call.arguments, Mapping):
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
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            problem = f"arguments are not valid JSON ({exc.msg} at position {exc.pos})"
            return ToolCall(call_id, name, {}, problem)
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

"""The ``LLMCaller`` protocol, and ``ScriptedLLMCaller``, its deterministic stand-in."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from cleveragents.tool.errors import ScriptExhaustedError
from cleveragents.tool.jsontext import is_object
from cleveragents.tool.messages import (
    MAX_TOKEN_COUNT,
    LLMRefusal,
    LLMRequest,
    LLMResponse,
    Message,
    ToolCall,
    Usage,
    deltas_read,
)
from cleveragents.tool.streaming import split_response

__all__ = ["LLMCaller", "RecordedRequest", "Responder", "ScriptedLLMCaller", "response_from_dict"]


@runtime_checkable
class LLMCaller(Protocol):
    """One LLM invocation: conversation and tool schemas in, text and tool calls out.

    ``call`` may be ``async def`` (preferred) or a plain function; plain ones run in a worker
    thread so that a blocking HTTP client cannot stall the event loop.
    """

    def call(self, request: LLMRequest) -> LLMResponse | Awaitable[LLMResponse]: ...


#: Answers one request: a function a ``ScriptedLLMCaller`` can play instead of a list.
Responder = Callable[[LLMRequest], "LLMResponse | Mapping[str, Any]"]


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """A snapshot of one request a recording ``ScriptedLLMCaller`` answered.

    The runtime's ``LLMRequest.messages`` is the live conversation; this is a copy of it as it
    was at the call.
    """

    messages: list[Message]
    tools: list[dict[str, Any]]
    iteration: int


class ScriptedLLMCaller:
    """Plays the model from a script, for demos, tests and dry runs.

    ``responses`` are returned in order (``LLMResponse``s or dicts shaped like them), or
    ``responses`` is a function that answers each request. A list raises
    :class:`ScriptExhaustedError` when asked for more responses than it holds. ``calls``
    counts the requests answered. With ``record=True`` the caller also keeps a
    :class:`RecordedRequest` of each request in ``requests`` (off by default: copying the
    conversation costs time that grows with its length).

    With ``stream=True`` each answer is also streamed to the request's ``deltas`` sink, split
    as a provider would (text word by word, tool-call arguments in pieces), ``delta_delay_s``
    apart (0: all at once), so that a person watching sees the text appear. All at once, an
    answer is split only when its deltas are read (:func:`deltas_read`): a run no stream reads
    deltas of pays nothing for them.
    """

    __slots__ = (
        "_delay_s", "_record", "_responder", "_responses", "_stream", "calls", "requests",
    )  # fmt: skip

    def __init__(
        self,
        responses: Iterable[LLMResponse | Mapping[str, Any]] | Responder,
        *,
        record: bool = False,
        stream: bool = False,
        delta_delay_s: float = 0.0,
    ) -> None:
        if not delta_delay_s >= 0:
            raise ValueError(f"delta_delay_s must be 0 or more, got {delta_delay_s}")
        self._stream = stream
        self._delay_s = delta_delay_s
        self._responder: Responder | None = None
        self._responses: list[LLMResponse] = []
        if callable(responses):
            self._responder = responses
        else:
            self._responses = [
                r if isinstance(r, LLMResponse) else response_from_dict(r, turn_number=i + 1)
                for i, r in enumerate(responses)
            ]
        self._record = record
        self.calls = 0
        self.requests: list[RecordedRequest] = []

    def skip(self, turns: int) -> None:
        """Go on from the turn after the next ``turns``: a run resumed from its log has had
        those answers already."""
        self.calls += turns

    def __len__(self) -> int:
        """How many responses the script holds (0 for a responder function)."""
        return len(self._responses)

    async def call(self, request: LLMRequest) -> LLMResponse:
        """The next scripted response (streamed to ``request.deltas`` first when streaming)."""
        response = self._next(request)
        sink = request.deltas
        if self._stream and sink is not None and (self._delay_s or deltas_read(sink)):
            for number, delta in enumerate(split_response(response)):
                if number and self._delay_s:
                    await asyncio.sleep(self._delay_s)
                sink(delta)
        return response

    def _next(self, request: LLMRequest) -> LLMResponse:
        if self._record:
            self.requests.append(
                RecordedRequest(
                    list(request.messages), [dict(t) for t in request.tools], request.iteration
                )
            )
        if self._responder is not None:
            self.calls += 1
            answer = self._responder(request)
            if isinstance(answer, LLMResponse):
                return answer
            return response_from_dict(answer, turn_number=self.calls)
        if self.calls >= len(self._responses):
            raise ScriptExhaustedError(
                f"the script has {len(self._responses)} response(s) and iteration "
                f"{request.iteration} asked for one more"
            )
        response = self._responses[self.calls]
        self.calls += 1
        return response


def response_from_dict(turn: Mapping[str, Any], *, turn_number: int = 1) -> LLMResponse:
    """Build an ``LLMResponse`` from a scripted turn's JSON shape.

    The shape is ``{"content": str, "tool_calls": [{"id", "name", "arguments"}], "usage":
    {"input_tokens", "output_tokens"}}``, every key optional; a call without an ``id`` gets
    ``call_<turn_number>_<index>`` so ids stay unique across a script. A structured final
    answer may be given as ``"output"``, any JSON value, which becomes the content as compact
    JSON text (instead of ``content``); ``"refusal"`` (a string) makes the model decline.
    Raises ``ValueError`` on a wrong shape, naming the offending key.
    """
    if not is_object(turn):
        raise ValueError(f"a scripted turn must be a JSON object, got {type(turn).__name__}")
    unknown = set(turn) - {"content", "tool_calls", "usage", "output", "refusal"}
    if unknown:
        raise ValueError(f"unknown key(s) in scripted turn: {', '.join(sorted(unknown))}")
    content = turn.get("content", "")
    if not isinstance(content, str):
        raise ValueError("'content' of a scripted turn must be a string")
    if "output" in turn:
        if "content" in turn:
            raise ValueError("a scripted turn gives either 'content' or 'output', not both")
        content = _COMPACT(turn["output"])
    refusal = turn.get("refusal")
    if refusal is not None and not isinstance(refusal, str):
        raise ValueError("'refusal' of a scripted turn must be a string")
    raw_calls = turn.get("tool_calls", [])
    if not isinstance(raw_calls, list):
        raise ValueError("'tool_calls' of a scripted turn must be an array")
    calls = []
    for index, raw in enumerate(raw_calls):
        if not is_object(raw) or not isinstance(raw.get("name"), str):
            raise ValueError(f"tool_calls[{index}] needs a string 'name'")
        arguments = raw.get("arguments", {})
        if not is_object(arguments):
            raise ValueError(f"tool_calls[{index}].arguments must be a JSON object")
        call_id = raw.get("id") or f"call_{turn_number}_{index + 1}"
        if not isinstance(call_id, str):
            raise ValueError(f"tool_calls[{index}].id must be a string")
        calls.append(ToolCall(call_id, raw["name"], dict(arguments)))
    usage = None
    if (raw_usage := turn.get("usage")) is not None:
        if not isinstance(raw_usage, Mapping):
            raise ValueError("'usage' of a scripted turn must be an object")
        tokens = [raw_usage.get("input_tokens", 0), raw_usage.get("output_tokens", 0)]
        if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in tokens):
            raise ValueError("usage token counts must be non-negative integers")
        if max(tokens) > MAX_TOKEN_COUNT:
            raise ValueError(f"usage token counts must be at most {MAX_TOKEN_COUNT} (int64)")
        usage = Usage(*tokens)
    if refusal is not None:
        return LLMRefusal(content, (), usage, refusal=refusal)
    return LLMResponse(content=content, tool_calls=calls, usage=usage)


#: A scripted ``output`` as the compact JSON text a model would write.
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode

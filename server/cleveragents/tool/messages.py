"""The conversation's values: messages, tool calls, token usage, LLM requests and responses."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cleveragents.tool.frozen import quick_init
from cleveragents.tool.output import OutputSchema

__all__ = [
    "MAX_TOKEN_COUNT",
    "DeltaSink",
    "LLMRefusal",
    "LLMRequest",
    "LLMResponse",
    "Message",
    "Reasoning",
    "ResponseDelta",
    "Role",
    "StructuredRequest",
    "ToolCall",
    "Usage",
    "deltas_read",
]

#: The largest token count a usage may hold: what the API's int64 fields carry.
MAX_TOKEN_COUNT = 2**63 - 1


class Role(enum.StrEnum):
    """Who wrote a message."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


@quick_init
@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call requested by the model.

    ``arguments_error`` is set (and ``arguments`` empty) when the provider sent arguments that
    could not be parsed; the runner turns such a call into a failed record instead of running it.
    """

    id: str
    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    arguments_error: str | None = None


@quick_init
@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts reported by an LLM provider; sums stop at ``MAX_TOKEN_COUNT``.

    ``reported_total_tokens`` is the provider's own total when it exceeds input plus output
    (Gemini's OpenAI-compatible API counts thinking tokens only there), else 0; token budgets
    count it through :attr:`total_tokens`.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    reported_total_tokens: int = 0

    def __post_init__(self) -> None:
        if self.reported_total_tokens and self.reported_total_tokens <= (
            self.input_tokens + self.output_tokens
        ):
            object.__setattr__(self, "reported_total_tokens", 0)  # nothing beyond the parts

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            min(self.input_tokens + other.input_tokens, MAX_TOKEN_COUNT),
            min(self.output_tokens + other.output_tokens, MAX_TOKEN_COUNT),
            min(self.total_tokens + other.total_tokens, MAX_TOKEN_COUNT),
        )

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens, or the provider's larger total when it reported one."""
        return max(self.input_tokens + self.output_tokens, self.reported_total_tokens)


@quick_init
@dataclass(frozen=True, slots=True)
class Reasoning:
    """What a reasoning model returned besides its answer, kept to be passed back.

    Some APIs (OpenAI's Responses API) want a turn's reasoning sent back with it on the next
    turn, encrypted when nothing is stored at the provider. The core never reads ``items``:
    it is the provider's own record of the answer as JSON text, which only a caller of the
    same ``provider`` API (``"openai_responses"``) sends back, verbatim. ``summary`` is the
    readable summary the provider gave, if any, for people watching the run.
    """

    provider: str
    summary: str = ""
    items: str = ""


@quick_init
@dataclass(frozen=True, slots=True)
class Message:
    """One turn of the conversation sent to the LLM.

    Assistant messages carry the ``tool_calls`` they requested, and the ``reasoning`` behind
    them when the provider returned some; tool messages carry the ``tool_call_id`` they
    answer, the result as JSON text in ``content`` and ``is_error`` when the call failed.
    """

    role: Role
    content: str = ""
    tool_calls: Sequence[ToolCall] = ()
    tool_call_id: str = ""
    is_error: bool = False
    reasoning: Reasoning | None = None


@quick_init
@dataclass(frozen=True, slots=True)
class LLMRequest:
    """What one LLM invocation receives.

    ``messages`` is the run's live conversation, shared rather than copied so that each
    iteration costs the same however long the history is: a caller that keeps it past the call
    must copy it. ``tools`` are the tool schemas in the provider's format.

    ``deltas``, when set, is where a caller that can stream puts each piece of the answer as
    it arrives (see :class:`ResponseDelta`); a caller that cannot stream ignores it, and its
    answer reaches consumers whole, as before. The sink never blocks and never raises.

    ``output`` is the run's output schema, set on the :class:`StructuredRequest` of a run
    that has one (``None`` here).
    """

    messages: Sequence[Message]
    tools: Sequence[Mapping[str, Any]]
    iteration: int
    deltas: DeltaSink | None = None

    @property
    def output(self) -> OutputSchema | None:
        """The run's output schema: ``None`` for a run without one."""
        return None


@quick_init
@dataclass(frozen=True, slots=True)
class StructuredRequest(LLMRequest):
    """The request of a run with an output schema: a final answer (one without tool calls)
    must be its content as JSON text matching ``output``. A caller asks its model for that
    with the provider's own mechanism where it has one; the loop validates the answer either
    way. (A subclass rather than a field, so that a run without a schema pays nothing.)"""

    output: OutputSchema | None = None


@quick_init
@dataclass(frozen=True, slots=True)
class ResponseDelta:
    """One piece of an LLM answer while it streams, before the whole ``LLMResponse``.

    A text delta has ``text`` (appended to the answer's content) and ``tool_call_index``
    ``None``. A tool-call delta has the call's 0-based position among the answer's tool calls
    in ``tool_call_index``; the first delta of each call carries its ``tool_call_id`` and
    ``tool_name``, and ``arguments`` are fragments of its arguments' JSON text, appended in
    order. A delta may carry ``usage`` (the counts so far; the last one wins). Concatenated in
    order, the deltas of one call give exactly the response's content and tool calls.
    """

    text: str = ""
    tool_call_index: int | None = None
    tool_call_id: str = ""
    tool_name: str = ""
    arguments: str = ""
    usage: Usage | None = None


#: Receives an answer's deltas in order, as they arrive (``LLMRequest.deltas``).
DeltaSink = Callable[[ResponseDelta], None]


def deltas_read(sink: DeltaSink) -> bool:
    """Whether what ``sink`` receives reaches anyone now. A sink says it does not with a false
    ``read`` attribute: the loop's own does while the run's consumer reads no deltas (see
    ``arun_tool_loop``'s ``deltas_read``); any other sink is read. A caller that makes its
    deltas out of the whole answer, all at once (the scripted one), makes none while unread:
    no one could join in the middle of the answer to miss them."""
    return getattr(sink, "read", True) is not False


@quick_init
@dataclass(frozen=True, slots=True)
class LLMResponse:
    """What one LLM invocation returns: text, tool calls (none means a final answer), usage,
    and the provider's ``reasoning`` items when it returned some (see :class:`Reasoning`).
    A model that declined to answer returns an :class:`LLMRefusal`."""

    content: str = ""
    tool_calls: Sequence[ToolCall] = ()
    usage: Usage | None = None
    reasoning: Reasoning | None = None

    @property
    def refusal(self) -> str | None:
        """Why the model declined to answer: ``None`` for an answer (see :class:`LLMRefusal`)."""
        return None

    def turn(self, calls: Sequence[ToolCall]) -> Message:
        """The assistant message that puts this answer, asking for ``calls`` (the answer's own,
        as routed), into the conversation, its reasoning with it."""
        return Message(Role.ASSISTANT, self.content, calls, reasoning=self.reasoning)


@quick_init
@dataclass(frozen=True, slots=True)
class LLMRefusal(LLMResponse):
    """The model declined to answer (OpenAI's ``refusal``, Anthropic's ``refusal`` stop
    reason, a client-hosted LLM's ``LlmResult.refusal``): the run ends with
    ``StopReason.REFUSAL`` and ``refusal`` as its content. (A subclass rather than a field, so
    that the answers of every other turn cost nothing more.)"""

    refusal: str = "the model refused"

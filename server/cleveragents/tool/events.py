"""Run events: what ``stream_tool_loop`` yields and the sidecar turns into protobuf, one to one.

Every run starts with ``RunStarted`` and ends with exactly one of ``RunCompleted``,
``RunFailed`` or ``RunCancelled``. Every tool call has one ``ToolCallStarted`` and one
``ToolCallCompleted``, whatever happens to it, and between them any number of
``ToolCallProgress`` when its tool reports progress.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from cleveragents.tool.frozen import quick_init
from cleveragents.tool.messages import LLMResponse, Reasoning, ToolCall, Usage
from cleveragents.tool.records import ToolCallRecord, ToolCallRunResult
from cleveragents.tool.spec import ToolSpec

__all__ = [
    "ApprovalDecided",
    "ApprovalRequested",
    "Checkpoint",
    "EventSink",
    "IterationStarted",
    "LLMDelta",
    "LLMRefused",
    "LLMResponded",
    "RunCancelled",
    "RunCompleted",
    "RunEvent",
    "RunFailed",
    "RunResumed",
    "RunStarted",
    "TerminalEvent",
    "ToolCallCompleted",
    "ToolCallProgress",
    "ToolCallStarted",
]


@quick_init
@dataclass(frozen=True, slots=True)
class RunStarted:
    """The run began: its id, prompt and the names of the tools offered to the model."""

    run_id: str
    prompt: str
    tool_names: tuple[str, ...]
    max_iterations: int


@quick_init
@dataclass(frozen=True, slots=True)
class RunResumed:
    """The run goes on after its sidecar stopped mid-run, rebuilt from its log.

    ``after_sequence`` is the last logged event before this one; ``iteration`` the last LLM
    response the log holds (0: none yet); ``reason`` why the run resumed. Of the tool calls
    in flight at the stop, ``rerun_call_ids`` run again (idempotent tools, or calls that had
    not begun executing) and ``interrupted_call_ids`` end with a failed record instead.
    """

    after_sequence: int
    iteration: int
    reason: str
    rerun_call_ids: tuple[str, ...] = ()
    interrupted_call_ids: tuple[str, ...] = ()


@quick_init
@dataclass(frozen=True, slots=True)
class IterationStarted:
    """The loop is about to make its ``iteration``-th LLM call."""

    iteration: int


@quick_init
@dataclass(frozen=True, slots=True)
class LLMDelta:
    """A piece of the ``iteration``-th LLM answer while it streams (see ``ResponseDelta``).

    ``index`` counts the call's deltas from 0, so a consumer sees none lost or reordered;
    ``count`` is how many deltas this one holds (more than 1 where a sidecar joined those
    that waited for a slow stream). Deltas come between ``IterationStarted`` and
    ``LLMResponded``, which still carries the whole answer: a consumer that skips them misses
    nothing.
    """

    iteration: int
    index: int
    text: str = ""
    tool_call_index: int | None = None
    tool_call_id: str = ""
    tool_name: str = ""
    arguments: str = ""
    usage: Usage | None = None
    count: int = 1


@quick_init
@dataclass(frozen=True, slots=True)
class LLMResponded:
    """The LLM answered: its text, the tool calls it asked for, the usage it reported and
    the provider's ``reasoning`` items, if any (kept in the log, so that a resumed run can
    pass them back as the live one would have). A refusal is an :class:`LLMRefused`."""

    iteration: int
    content: str
    tool_calls: Sequence[ToolCall]
    usage: Usage | None
    reasoning: Reasoning | None = None

    @property
    def refusal(self) -> str | None:
        """Why the model declined to answer: ``None`` for an answer (see :class:`LLMRefused`)."""
        return None

    @classmethod
    def of(cls, iteration: int, response: LLMResponse) -> LLMResponded:
        """The event of ``response``, the answer to LLM call number ``iteration``."""
        if type(response) is LLMResponse or response.refusal is None:
            return cls(iteration, response.content, response.tool_calls, response.usage,
                       response.reasoning)  # fmt: skip
        return LLMRefused(iteration, response.content, response.tool_calls, response.usage,
                          response.reasoning, response.refusal)  # fmt: skip


@quick_init
@dataclass(frozen=True, slots=True)
class LLMRefused(LLMResponded):
    """The LLM declined to answer: ``refusal`` says why (the run ends with
    ``StopReason.REFUSAL``)."""

    refusal: str = "the model refused"


@quick_init
@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    """A tool call passed resolution and validation (or failed them) and is about to run."""

    call_id: str
    tool_name: str
    inputs: Mapping[str, Any]
    iteration: int


@quick_init
@dataclass(frozen=True, slots=True)
class ToolCallProgress:
    """A call in flight said how far it has got (``total``: ``None`` when it does not know);
    a tool reports it through ``current_call().progress``."""

    call_id: str
    tool_name: str
    progress: float
    total: float | None
    message: str
    iteration: int


@quick_init
@dataclass(frozen=True, slots=True)
class ToolCallCompleted:
    """A tool call ended; ``record`` says how."""

    record: ToolCallRecord


@quick_init
@dataclass(frozen=True, slots=True)
class ApprovalRequested:
    """A call waits for a decision because the run's automation profile asks for one;
    ``how_to_answer`` tells a person how to decide it (empty when the approver says nothing)."""

    call_id: str
    tool_name: str
    inputs: Mapping[str, Any]
    iteration: int
    reason: str
    how_to_answer: str = ""


@quick_init
@dataclass(frozen=True, slots=True)
class ApprovalDecided:
    """The decision on an ``ApprovalRequested`` call; ``by`` is how it was decided (or
    ``timeout``), ``identity`` the caller who decided (empty when nobody did)."""

    call_id: str
    approved: bool
    reason: str
    by: str
    iteration: int
    identity: str = ""


@quick_init
@dataclass(frozen=True, slots=True)
class RunCompleted:
    """The run ended normally: a final answer or the iteration limit."""

    result: ToolCallRunResult


@quick_init
@dataclass(frozen=True, slots=True)
class RunFailed:
    """The run could not go on (its LLM caller raised); ``result`` holds what was done."""

    message: str
    result: ToolCallRunResult
    error: BaseException | None = None


@quick_init
@dataclass(frozen=True, slots=True)
class RunCancelled:
    """The run was cancelled, or its deadline passed (``result.stop_reason`` says which).

    Calls in flight were closed with ``cancelled`` records.
    """

    reason: str
    result: ToolCallRunResult


RunEvent: TypeAlias = (
    RunStarted
    | RunResumed
    | IterationStarted
    | LLMDelta
    | LLMResponded
    | ToolCallStarted
    | ToolCallProgress
    | ToolCallCompleted
    | ApprovalRequested
    | ApprovalDecided
    | RunCompleted
    | RunFailed
    | RunCancelled
)
TerminalEvent: TypeAlias = RunCompleted | RunFailed | RunCancelled

#: Receives each event synchronously, in order, as the loop produces it.
EventSink = Callable[[RunEvent], None]
#: Awaited with a call's tool before the call runs, once its ``ToolCallStarted`` (and any
#: approval) went to the run's ``EventSink``: returns once the sink's durable log holds the
#: events so far. A log that refuses them (a shared store where another sidecar owns the run
#: now) cancels the run instead, so the call never runs: a call runs only once its start is on
#: record.
Checkpoint = Callable[[ToolSpec], Awaitable[None]]

"""Resuming a run from its logged events: the conversation, counters and calls in flight.

A run's log holds what its loop needs to go on after a restart: the prompt, every LLM
response (with the provider's reasoning items, passed back on the next turn), every tool
record. ``replay`` folds those events into a fresh ``LoopState`` (the
same messages the loop had built) and says where the loop takes over: the batch of calls the
last response asked for, if some have no record yet, and whether the run had already ended.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cleveragents.tool.budget import RunBudget
from cleveragents.tool.events import (
    ApprovalDecided,
    ApprovalRequested,
    LLMResponded,
    RunEvent,
    ToolCallCompleted,
    ToolCallStarted,
)
from cleveragents.tool.loop.batch import feedback
from cleveragents.tool.loop.final import FinalAnswers, refused
from cleveragents.tool.loop.loop_state import LoopState
from cleveragents.tool.messages import LLMRefusal, LLMResponse, ToolCall
from cleveragents.tool.records import StopReason, ToolCallRecord, ToolCallRunResult

if TYPE_CHECKING:
    from cleveragents.tool.execution.registry import ToolRegistry

__all__ = ["INTERRUPTED", "PendingBatch", "Replayed", "Resumption", "replay"]

#: The error of a call that was executing when its sidecar stopped and may not run twice.
INTERRUPTED = (
    "interrupted by a sidecar restart; the tool is not idempotent, so it was not run again"
)


@dataclass(frozen=True, slots=True)
class Resumption:
    """What a run needs to go on from its log: its logged ``events`` (``RunStarted`` first,
    no terminal event), the sequence of the last one, the seconds since the run first started
    (its deadline and wall-clock budget count from then) and why it resumes."""

    events: Sequence[RunEvent]
    after_sequence: int
    elapsed_s: float = 0.0
    reason: str = "the sidecar restarted"


@dataclass(slots=True)
class PendingBatch:
    """The calls of the last logged response, as the loop had them, and how far they got;
    ``stop`` is the limit that ends the loop after them (``None``: it goes on).

    ``records`` holds the calls that ended; ``started`` the ids whose ``ToolCallStarted`` is
    logged; ``asked`` those that waited for an approval never given (or a denial not yet
    recorded): those never executed, so they are asked again and run as new ones.
    """

    calls: list[ToolCall]
    iteration: int
    allowed: int
    refusal: str
    stop: StopReason | None
    records: dict[str, ToolCallRecord] = field(default_factory=dict)
    started: set[str] = field(default_factory=set)
    asked: set[str] = field(default_factory=set)
    approved: set[str] = field(default_factory=set)

    def in_flight(self) -> list[str]:
        """The ids of calls that may have been executing: started, not ended, not waiting
        for an approval, and within the budget (a call over it is refused, never run)."""
        return [
            c.id
            for c in self.calls[: self.allowed]
            if c.id in self.started and c.id not in self.records and c.id not in self.asked
        ]

    def interrupted(self, registry: ToolRegistry) -> list[str]:
        """The calls in flight at the stop whose tools are not declared idempotent: they do
        not run again, and end with a failed record (``INTERRUPTED``) the model sees."""
        names = {call.id: call.name for call in self.calls}
        out = []
        for call_id in self.in_flight():
            entry = registry.get(names[call_id])
            if entry is None or not entry.spec.idempotent:
                out.append(call_id)
        return out


@dataclass(slots=True)
class Replayed:
    """Where the loop takes over: ``batch`` to finish first (``None``: the last response's
    calls all ended), ``stop`` when a limit had already stopped the loop, and ``final`` when
    the log holds the run's last LLM response (the run only has to end; ``settled`` is its
    result when a refusal or the output schema decided it)."""

    batch: PendingBatch | None = None
    stop: StopReason | None = None
    final: str | None = None
    settled: ToolCallRunResult | None = None


def replay(
    events: Sequence[RunEvent],
    state: LoopState,
    *,
    route: Callable[[ToolCall], ToolCall],
    budget: RunBudget,
    max_iterations: int,
    answers: FinalAnswers | None = None,
) -> Replayed:
    """Fold ``events`` into ``state`` (which already holds the opening messages);
    ``answers`` judges answers without tool calls as the live run did (its output schema)."""
    out = Replayed()
    for event in events:
        if isinstance(event, LLMResponded):
            _finish(state, out)
            _responded(event, state, out, route, budget, max_iterations, answers)
        elif out.batch is None:
            continue
        elif isinstance(event, ToolCallStarted):
            out.batch.started.add(event.call_id)
        elif isinstance(event, ToolCallCompleted):
            out.batch.records[event.record.call_id] = event.record
        elif isinstance(event, ApprovalRequested):
            out.batch.asked.add(event.call_id)
        elif isinstance(event, ApprovalDecided) and event.approved:
            out.batch.asked.discard(event.call_id)
            out.batch.approved.add(event.call_id)
    _finish(state, out)
    return out


def _responded(
    event: LLMResponded,
    state: LoopState,
    out: Replayed,
    route: Callable[[ToolCall], ToolCall],
    budget: RunBudget,
    max_iterations: int,
    answers: FinalAnswers | None,
) -> None:
    state.iterations = event.iteration
    response = LLMResponse(event.content, list(event.tool_calls), event.usage, event.reasoning)
    if event.refusal is not None:
        response = LLMRefusal(event.content, (), event.usage, event.reasoning, event.refusal)
    state.add_response(response)
    if out.stop is not None or not event.tool_calls:  # a summary, or the final answer
        if out.stop is None and answers is not None:
            out.settled = answers.settle(state, response)
            if out.settled is None:  # sent back to the model: the loop goes on
                return
        elif out.stop is None and response.refusal is not None:
            out.settled = refused(state, response)
        elif out.stop is not None and answers is not None:  # a summary that may validate
            output_json = answers.summary(event.content)
            out.settled = state.result(out.stop, content=event.content, output_json=output_json)
        out.final = event.content
        return
    calls = [route(call) for call in event.tool_calls]
    state.messages.append(response.turn(calls))  # its reasoning too, as the live loop had it
    over = budget.check(state.usage.total_tokens, state.tool_calls, len(calls))
    allowed = len(calls) if over is None else over.allowed
    # A budget stop always refuses calls and ends the loop; so does the iteration limit.
    stop = None if over is None else over.stop_reason
    if stop is None and event.iteration >= max_iterations:
        stop = StopReason.MAX_ITERATIONS
    refusal = "" if over is None else over.refusal
    out.batch = PendingBatch(calls, event.iteration, allowed, refusal, stop)


def _finish(state: LoopState, out: Replayed) -> None:
    """Feed a batch whose calls all ended back to the model, as the loop did."""
    batch = out.batch
    if batch is None or any(c.id not in batch.records for c in batch.calls):
        return
    records = [batch.records[c.id] for c in batch.calls]
    state.add_records(records)
    state.messages.extend(feedback(record) for record in records)
    state.tool_calls += min(batch.allowed, len(records))
    out.batch = None
    out.stop = batch.stop

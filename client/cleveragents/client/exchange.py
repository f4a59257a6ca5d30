"""What both Python clients send and how they read what comes back, over ``cleveragents.wire``."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypedDict

from cleveragents.client.output import OutputSpec, OutputType, output_type_of
from cleveragents.client.types import StreamedEvent
from cleveragents.tool import (
    LLMResponded,
    LLMResponse,
    RunBudget,
    RunCancelled,
    RunCompleted,
    RunEvent,
    RunFailed,
    ToolActorContext,
    ToolCall,
    ToolCallCompleted,
    ToolCallRecord,
    ToolCallRunResult,
    ToolRegistry,
)
from cleveragents.toolruntime.v1 import events_pb2, service_pb2, types_pb2
from cleveragents.wire import (
    LlmChoice,
    RunRequest,
    event_from_pb,
    record_from_pb,
    result_from_pb,
    run_spec_to_pb,
)

__all__ = [
    "EventDecoder",
    "RunOptions",
    "Script",
    "Tools",
    "as_registry",
    "auth_metadata",
    "event_with_history",
    "follow_ack",
    "follow_start",
    "history_records",
    "next_page_after",
    "omits_history",
    "with_history",
]

_TERMINALS = ("run_completed", "run_failed", "run_cancelled")

Script = Sequence[LLMResponse | Mapping[str, Any]]
Tools = ToolRegistry | Iterable[Callable[..., Any]]


class RunOptions(TypedDict, total=False):
    """What a run may say besides its prompt, for every client method that starts one.

    ``context``: the run's ``ToolActorContext``; ``max_iterations`` (0: the sidecar's
    default); ``profile`` and ``model``: the LLM profile and a model override; ``script``: LLM
    turns for a scripted dry run; ``tool_names``: a subset of the sidecar's tools (empty: all);
    ``no_server_tools``: none of them (a session's own tools only); ``run_id``: your own id;
    ``budget`` and ``max_wall_clock_s``: limits beyond the iteration count;
    ``max_output_retries``: with an ``output_type`` (each method's own argument), how many
    invalid answers the model may correct (unset: the sidecar's default of 2).
    """

    context: ToolActorContext | None
    max_iterations: int
    profile: str
    model: str
    script: Script | None
    tool_names: Sequence[str]
    no_server_tools: bool
    run_id: str
    budget: RunBudget | None
    max_wall_clock_s: float | None
    max_output_retries: int | None


def run_request(
    prompt: str,
    *,
    context: ToolActorContext | None = None,
    max_iterations: int = 0,
    profile: str = "",
    model: str = "",
    script: Script | None = None,
    tool_names: Sequence[str] = (),
    no_server_tools: bool = False,
    run_id: str = "",
    detach: bool = False,
    budget: RunBudget | None = None,
    max_wall_clock_s: float | None = None,
    output_type: OutputSpec | OutputType[Any] | None = None,
    max_output_retries: int | None = None,
) -> RunRequest:
    """The request these arguments describe."""
    output = output_type_of(output_type)
    return RunRequest(
        prompt=prompt,
        context=context,
        max_iterations=max_iterations,
        llm=LlmChoice(
            profile, model, json.dumps([_turn(t) for t in script]) if script is not None else ""
        ),
        tool_names=tuple(tool_names),
        no_server_tools=no_server_tools,
        run_id=run_id,
        detach=detach,
        budget=budget,
        max_wall_clock_s=max_wall_clock_s,
        output=None if output is None else output.schema,
        max_output_retries=max_output_retries,
    )


def run_spec(prompt: str, **options: Any) -> types_pb2.RunSpec:
    """The ``RunSpec`` for a prompt and ``run_request``'s options."""
    return run_spec_to_pb(run_request(prompt, **options))


def _turn(turn: LLMResponse | Mapping[str, Any]) -> Mapping[str, Any]:
    if not isinstance(turn, LLMResponse):
        return turn
    out: dict[str, Any] = {"content": turn.content}
    if turn.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "name": c.name, "arguments": dict(c.arguments)} for c in turn.tool_calls
        ]
    if turn.refusal is not None:
        out["refusal"] = turn.refusal
    if turn.usage is not None:
        out["usage"] = {
            "input_tokens": turn.usage.input_tokens,
            "output_tokens": turn.usage.output_tokens,
        }
    return out


def as_registry(tools: Tools) -> ToolRegistry:
    """A registry from a registry, or from plain functions (registered with ``@tool``)."""
    if isinstance(tools, ToolRegistry):
        return tools
    registry = ToolRegistry()
    for fn in tools:
        registry.tool(fn)
    return registry


class EventDecoder:
    """Turns the ``RunEvent``s of one stream into ``StreamedEvent``s.

    A run's terminal event repeats in its result every record that its ``tool_call_completed``
    events carried. Those seen on this stream are reused instead of decoded again, as an
    in-process run shares them: a long run's last event then costs what one event costs. A
    result too large for one message comes without them (``history_omitted``): the records
    this stream carried fill it in when they are all of them; ``missing_history`` says when
    they are not (a watch that joined late), and the client reads them with GetRunHistory.
    """

    __slots__ = ("_asked", "_completed", "_output", "_seen")

    def __init__(self, output: OutputType[Any] | None = None) -> None:
        #: The run's output type: terminal results become ``TypedResult``s of it.
        self._output = output
        self._seen: dict[bytes, ToolCallRecord] = {}
        self._completed: list[ToolCallRecord] = []
        self._asked = CallOrder()

    def __call__(self, event: events_pb2.RunEvent) -> StreamedEvent:
        at = event.time
        core = event_from_pb(event, self._record)
        # What the event is, from the core value (its payload's name is asked of protobuf
        # only for a terminal event): one lookup fewer for each event.
        if isinstance(core, ToolCallCompleted):
            self._completed.append(core.record)
        elif isinstance(core, LLMResponded):  # a refusal too
            self._asked.note(core.iteration, core.tool_calls)
        elif isinstance(core, RunCompleted | RunFailed | RunCancelled):
            result = core.result
            payload = getattr(event, event.WhichOneof("payload") or "")
            if payload.result.history_omitted and not self.missing_history(event):
                result = with_history(result, self._asked.sorted(self._completed))
            if self._output is not None:
                result = self._output.result(result)
            if result is not core.result:
                core = dataclasses.replace(core, result=result)
        return StreamedEvent(event.run_id, event.sequence, at.seconds + at.nanos / 1e9, core)

    def missing_history(self, event: events_pb2.RunEvent) -> bool:
        """Whether ``event`` ends its run with a result whose records this stream lacks."""
        kind = event.WhichOneof("payload")
        if kind not in _TERMINALS:
            return False
        result = getattr(event, kind).result
        return bool(result.history_omitted) and len(self._completed) != result.tool_call_count

    def _record(self, pb: types_pb2.ToolCallRecord) -> ToolCallRecord:
        # The sidecar encodes a record the same way wherever it appears: equal bytes, equal
        # record.
        key = pb.SerializeToString()
        record = self._seen.get(key)
        if record is None:
            record = self._seen[key] = record_from_pb(pb)
        return record


def follow_start(
    run_id: str, after_sequence: int, stream_deltas: bool = False
) -> service_pb2.FollowRunRequest:
    """The first message of a ``FollowRun`` stream (the sidecar's window)."""
    start = service_pb2.FollowRunStart(
        run_id=run_id, after_sequence=after_sequence, stream_deltas=stream_deltas
    )
    return service_pb2.FollowRunRequest(start=start)


def follow_ack(
    response: service_pb2.FollowRunResponse, handled: int
) -> service_pb2.FollowRunRequest | None:
    """The ack of every event up to ``handled`` if ``FollowRun``'s ``response`` asks for one."""
    if not response.ack_requested:
        return None
    return service_pb2.FollowRunRequest(ack=service_pb2.FollowRunAck(sequence=handled))


def omits_history(result: types_pb2.ToolCallRunResult) -> bool:
    """Whether a result came without its records, being too large for one message."""
    return bool(result.history_omitted)


_LAST = 1 << 30


class CallOrder:
    """The order in which the model asked for each iteration's calls (``llm_responded``).

    ``tool_call_completed`` events come as calls finish, which for parallel calls is not the
    order of a result's history (the order the model asked); this puts them back in it.
    """

    __slots__ = ("_index",)

    def __init__(self) -> None:
        self._index: dict[tuple[int, str], int] = {}

    def note(self, iteration: int, calls: Iterable[ToolCall | types_pb2.ToolCall]) -> None:
        """Remember the order of the ``calls`` an ``llm_responded`` of ``iteration`` asks for
        (decoded or still protobuf)."""
        index = self._index
        for position, call in enumerate(calls):
            index.setdefault((iteration, call.id), position)

    def sorted(self, records: list[ToolCallRecord]) -> list[ToolCallRecord]:
        """``records`` by iteration, then as the model asked (calls of unknown order after
        those of their iteration, as they came)."""
        index = self._index
        return sorted(
            records, key=lambda r: (r.iteration, index.get((r.iteration, r.call_id), _LAST))
        )


def history_records(events: Iterable[events_pb2.RunEvent]) -> list[ToolCallRecord]:
    """The records a run's ``tool_call_completed`` events carry, in the result's order."""
    order = CallOrder()
    records = []
    for event in events:
        kind = event.WhichOneof("payload")
        if kind == "llm_responded":
            responded = event.llm_responded
            order.note(responded.iteration, responded.tool_calls)
        elif kind == "tool_call_completed":
            records.append(record_from_pb(event.tool_call_completed.record))
    return order.sorted(records)


def next_page_after(page: service_pb2.GetRunHistoryResponse, after: int) -> int | None:
    """Where the next GetRunHistory page starts, or ``None`` when ``page`` was the last."""
    if not page.events:
        return None
    last = page.events[-1].sequence
    if page.finished and last >= page.last_sequence:
        return None
    return last


def with_history(
    result: types_pb2.ToolCallRunResult | ToolCallRunResult, records: Sequence[ToolCallRecord]
) -> ToolCallRunResult:
    """A result with ``records`` as its history."""
    if isinstance(result, types_pb2.ToolCallRunResult):
        result = result_from_pb(result)
    return dataclasses.replace(result, tool_call_history=tuple(records))


def event_with_history(event: RunEvent, records: Sequence[ToolCallRecord]) -> RunEvent:
    """A terminal event whose result has ``records`` as its history (another: as it is)."""
    if isinstance(event, RunCompleted | RunFailed | RunCancelled):
        return dataclasses.replace(event, result=with_history(event.result, records))
    return event


def describe(exc: BaseException) -> str:
    """``Type: message`` for an exception."""
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def auth_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    """The metadata that carries the sidecar's shared token, if any."""
    return (("authorization", f"Bearer {token}"),) if token else ()

"""What a client asks for, as frozen core-typed values: a run's request and a session's opening.

A ``RunSpec`` becomes a :class:`RunRequest` once, at the edge (``run_request_from_pb``); the
sidecar never passes the protobuf message around. The clients build a ``RunRequest`` and
send it with ``run_spec_to_pb``. ``started_spec`` writes the ``RunSpec`` that a run's
``run_started`` event carries: the request as accepted, with the tools the model is offered.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cleveragents.tool import OutputSchema, RunBudget, RunStarted, ToolActorContext, ToolSpec
from cleveragents.toolruntime.v1 import session_pb2, types_pb2
from cleveragents.wire.values import (
    budget_from_pb,
    budget_to_pb,
    context_from_pb,
    context_to_pb,
    output_schema_from_pb,
    output_schema_to_pb,
    spec_from_pb,
    spec_to_pb,
)

__all__ = [
    "LlmChoice",
    "RunRequest",
    "SessionOpening",
    "run_request_from_pb",
    "run_spec_to_pb",
    "session_opening_from_pb",
    "session_start_to_pb",
    "started_spec",
]


@dataclass(frozen=True, slots=True)
class LlmChoice:
    """Which LLM a run asks for: a profile name (empty: the default), a model override, and
    for scripted profiles the turns of a dry run as JSON array text."""

    profile: str = ""
    model: str = ""
    script: str = ""


@dataclass(frozen=True, slots=True)
class RunRequest:
    """One run as a client asks for it.

    ``max_iterations`` 0 means the sidecar's default; ``tool_names`` empty means every
    server-side tool, unless ``no_server_tools`` asks for none of them; ``run_id`` empty lets
    the sidecar pick one; ``context`` ``None`` means an empty one. ``output`` asks for the final
    answer as JSON matching a schema, with at most ``max_output_retries`` corrections
    (``None``: the default). The sidecar never changes a
    request: it copies the context it runs with.
    """

    prompt: str
    context: ToolActorContext | None = None
    max_iterations: int = 0
    llm: LlmChoice = field(default_factory=LlmChoice)
    tool_names: tuple[str, ...] = ()
    run_id: str = ""
    detach: bool = False
    no_server_tools: bool = False
    budget: RunBudget | None = None
    max_wall_clock_s: float | None = None
    output: OutputSchema | None = None
    max_output_retries: int | None = None


@dataclass(frozen=True, slots=True)
class SessionOpening:
    """A ``Session``'s first message: the run, the tools the client hosts and how it talks."""

    request: RunRequest
    tools: tuple[ToolSpec, ...] = ()
    client_llm: bool = False
    handles_approvals: bool = False
    batch_events: bool = False
    incremental_messages: bool = False


def run_request_from_pb(spec: types_pb2.RunSpec) -> RunRequest:
    """The request a ``RunSpec`` stands for; ``ValueError`` names a malformed field."""
    budget, wall_clock_s = budget_from_pb(spec.budget)
    output = None
    if spec.HasField("output_schema"):
        output = output_schema_from_pb(spec.output_schema, "spec.output_schema")
    retries = spec.max_output_retries if spec.HasField("max_output_retries") else None
    if retries is not None and retries < 0:
        raise ValueError("spec.max_output_retries must be 0 or more (unset: the default)")
    return RunRequest(
        prompt=spec.prompt,
        context=context_from_pb(spec.context) if spec.HasField("context") else None,
        max_iterations=spec.max_iterations,
        llm=LlmChoice(spec.llm.profile, spec.llm.model, spec.llm.script),
        tool_names=tuple(spec.tool_names),
        run_id=spec.run_id,
        detach=spec.detach,
        no_server_tools=spec.no_server_tools,
        budget=budget if spec.HasField("budget") else None,
        max_wall_clock_s=wall_clock_s,
        output=output,
        max_output_retries=retries,
    )


def run_spec_to_pb(request: RunRequest) -> types_pb2.RunSpec:
    """The ``RunSpec`` that asks for ``request``."""
    spec = types_pb2.RunSpec()
    _fill_spec(spec, request)
    return spec


def started_spec(pb: types_pb2.RunSpec, accepted: RunRequest, started: RunStarted) -> None:
    """Fill ``pb`` (a ``run_started`` event's empty spec) from the request as the sidecar
    accepted it and the runtime's own ``RunStarted``: its id, its iteration limit and the tools
    the model is really offered."""
    _fill_spec(pb, accepted)
    pb.run_id = started.run_id
    pb.max_iterations = started.max_iterations
    pb.tool_names[:] = started.tool_names


def _fill_spec(spec: types_pb2.RunSpec, request: RunRequest) -> None:
    spec.prompt = request.prompt
    spec.max_iterations = request.max_iterations
    spec.tool_names.extend(request.tool_names)
    spec.run_id = request.run_id
    spec.detach = request.detach
    spec.no_server_tools = request.no_server_tools
    llm = request.llm
    spec.llm.profile, spec.llm.model, spec.llm.script = llm.profile, llm.model, llm.script
    if request.context is not None:
        spec.context.CopyFrom(context_to_pb(request.context))
    if request.budget is not None or request.max_wall_clock_s is not None:
        budget_to_pb(spec.budget, request.budget or RunBudget(), request.max_wall_clock_s)
    if request.output is not None:
        output_schema_to_pb(request.output, spec.output_schema)
    if request.max_output_retries is not None:
        spec.max_output_retries = request.max_output_retries


def session_opening_from_pb(start: session_pb2.SessionStart) -> SessionOpening:
    """A ``SessionStart`` as a :class:`SessionOpening`; ``ValueError`` names a bad field."""
    request = run_request_from_pb(start.spec)
    tools: list[ToolSpec] = []
    seen: set[str] = set()
    for pb in start.tools:
        try:
            spec = spec_from_pb(pb)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"start.tools: {exc}") from None
        if spec.name in seen:
            raise ValueError(f"start.tools: tool {spec.name!r} is declared twice")
        seen.add(spec.name)
        tools.append(spec)
    return SessionOpening(
        request,
        tuple(tools),
        client_llm=start.client_llm,
        handles_approvals=start.handles_approvals,
        batch_events=start.batch_events,
        incremental_messages=start.incremental_messages,
    )


def session_start_to_pb(opening: SessionOpening) -> session_pb2.SessionRequest:
    """The first message of a session."""
    return session_pb2.SessionRequest(
        start=session_pb2.SessionStart(
            spec=run_spec_to_pb(opening.request),
            tools=[spec_to_pb(s) for s in opening.tools],
            client_llm=opening.client_llm,
            handles_approvals=opening.handles_approvals,
            batch_events=opening.batch_events,
            incremental_messages=opening.incremental_messages,
        )
    )

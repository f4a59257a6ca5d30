"""What a console page is sent, as JSON values: a run's events, its header, the status strip.

Every value is data: the page writes each string into the document as text (``textContent``),
never as markup, so a tool output or a model answer holding ``<script>`` shows as those
characters. What the log holds is what a gRPC client with the same identity reads
(``GetRunHistory``): secrets were redacted from tool records before they became events, and
nothing of the sidecar's settings (provider keys, tokens) is in a view. A scripted LLM's turns
are left out of the header: they are the test double's, not the run's.
"""

from __future__ import annotations

from typing import Any, assert_never

from cleveragents.sidecar.config import SidecarConfig
from cleveragents.sidecar.gateway import Following, SidecarStatus
from cleveragents.sidecar.runs import Run
from cleveragents.tool import (
    ApprovalDecided,
    ApprovalRequested,
    IterationStarted,
    LLMDelta,
    LLMResponded,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunResumed,
    RunStarted,
    ToolCallCompleted,
    ToolCallProgress,
    ToolCallRecord,
    ToolCallRunResult,
    ToolCallStarted,
    Usage,
)
from cleveragents.wire import LoggedEvent

__all__ = ["event_view", "model_of", "record_view", "run_header", "status_view", "usage_view"]

Json = dict[str, Any]


def event_view(logged: LoggedEvent) -> Json:
    """One logged event (or live delta, sequence 0) as the page reads it: ``kind``, ``seq``,
    ``time`` and the event's own fields."""
    view: Json = {"seq": logged.sequence, "time": logged.time}
    event = logged.event
    match event:
        case LLMDelta():
            view |= {
                "kind": "delta", "iteration": event.iteration, "index": event.index,
                "text": event.text, "tool_call_index": event.tool_call_index,
                "tool_call_id": event.tool_call_id, "tool_name": event.tool_name,
                "arguments": event.arguments,
            }  # fmt: skip
        case ToolCallCompleted():
            view |= {"kind": "tool_call_completed", "record": record_view(event.record)}
        case ToolCallStarted():
            view |= {
                "kind": "tool_call_started", "call_id": event.call_id,
                "tool_name": event.tool_name, "inputs": dict(event.inputs),
                "iteration": event.iteration,
            }  # fmt: skip
        case ToolCallProgress():
            view |= {
                "kind": "tool_call_progress", "call_id": event.call_id,
                "progress": event.progress, "total": event.total, "message": event.message,
            }  # fmt: skip
        case IterationStarted():
            view |= {"kind": "iteration_started", "iteration": event.iteration}
        case LLMResponded():
            view |= {
                "kind": "llm_responded", "iteration": event.iteration, "content": event.content,
                "tool_calls": [
                    {"id": c.id, "name": c.name, "arguments": dict(c.arguments)}
                    for c in event.tool_calls
                ],
                "usage": usage_view(event.usage), "refusal": event.refusal,
                "reasoning": event.reasoning.summary if event.reasoning is not None else "",
            }  # fmt: skip
        case ApprovalRequested():
            view |= {
                "kind": "approval_requested", "call_id": event.call_id,
                "tool_name": event.tool_name, "inputs": dict(event.inputs),
                "iteration": event.iteration, "reason": event.reason,
                "how_to_answer": event.how_to_answer,
            }  # fmt: skip
        case ApprovalDecided():
            view |= {
                "kind": "approval_decided", "call_id": event.call_id,
                "approved": event.approved, "reason": event.reason, "by": event.by,
                "identity": event.identity, "iteration": event.iteration,
            }  # fmt: skip
        case RunStarted():
            view |= {
                "kind": "run_started", "prompt": event.prompt,
                "tool_names": list(event.tool_names), "max_iterations": event.max_iterations,
            }  # fmt: skip
        case RunResumed():
            view |= {
                "kind": "run_resumed", "after_sequence": event.after_sequence,
                "iteration": event.iteration, "reason": event.reason,
                "rerun_call_ids": list(event.rerun_call_ids),
                "interrupted_call_ids": list(event.interrupted_call_ids),
            }  # fmt: skip
        case RunCompleted():
            view |= {"kind": "run_completed", "result": _result_view(event.result)}
        case RunFailed():
            view |= {
                "kind": "run_failed", "message": event.message, "code": logged.failure_code,
                "result": _result_view(event.result),
            }  # fmt: skip
        case RunCancelled():
            view |= {
                "kind": "run_cancelled", "reason": event.reason,
                "result": _result_view(event.result),
            }  # fmt: skip
        case _:  # pragma: no cover - mypy checks that every event type is handled
            assert_never(event)
    return view


def record_view(record: ToolCallRecord) -> Json:
    """A tool call's record: its inputs and output as JSON values, how it went and how long."""
    return {
        "call_id": record.call_id,
        "tool_name": record.tool_name,
        "inputs": dict(record.inputs),
        "output": dict(record.output),
        "duration_ms": record.duration_ms,
        "success": record.success,
        "error": record.error,
        "error_kind": None if record.error_kind is None else str(record.error_kind),
        "iteration": record.iteration,
        "started_at": record.started_at,
    }


def usage_view(usage: Usage | None) -> Json | None:
    """Token counts (``None``: the provider reported none)."""
    if usage is None:
        return None
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
    }


def _result_view(result: ToolCallRunResult) -> Json:
    """How the run ended (its records came as their own events: only their count here)."""
    return {
        "content": result.content,
        "iterations": result.iterations,
        "stop_reason": str(result.stop_reason),
        "terminated_by_limit": result.terminated_by_limit,
        "tool_calls": len(result.tool_call_history),
        "usage": usage_view(result.usage),
        "output_json": result.output_json,
        "output_error": result.output_error,
    }


def model_of(run: Run, config: SidecarConfig) -> tuple[str, str]:
    """The LLM profile ``run`` asked for (its default's name when it named none) and the
    model: the run's own choice, else the profile's."""
    llm = run.request.llm
    profile = llm.profile or config.default_profile
    known = config.all_profiles().get(profile)
    return profile, llm.model or (known.model if known is not None else "")


def run_header(following: Following, config: SidecarConfig) -> Json:
    """What a run page shows above the timeline: who owns the run, where it runs, what it
    asked for (its limits and budgets), its state now, and what the viewer may do to it."""
    run = following.run
    request = run.request
    profile, model = model_of(run, config)
    budget = request.budget
    context = request.context
    return {
        "run_id": run.run_id,
        "owner": run.owner,
        "sidecar": following.sidecar,
        "state": str(run.state),
        "stop_reason": None if run.stop_reason is None else str(run.stop_reason),
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "last_sequence": run.last_sequence,
        "prompt": request.prompt,
        "profile": profile,
        "model": model,
        "automation_profile": (
            (context.automation_profile if context is not None else "")
            or config.default_automation_profile
        ),
        "detach": request.detach,
        "limits": {
            "max_iterations": request.max_iterations or None,
            "max_tool_calls": budget.max_tool_calls if budget else None,
            "max_total_tokens": budget.max_total_tokens if budget else None,
            "max_concurrent_tool_calls": budget.max_concurrent_tool_calls if budget else None,
            "max_wall_clock_s": request.max_wall_clock_s
            or (budget.max_wall_clock_s if budget else None),
        },
        "failure": None if run.failure is None else run.failure[1],
        "may_decide": following.may_decide,
        "may_cancel": following.may_cancel,
    }


def status_view(status: SidecarStatus) -> Json:
    """The status strip: health, live runs, MCP servers, the store."""
    health = "serving" if status.serving else "draining" if status.draining else "not serving"
    return {
        "health": health,
        "live_runs": status.live_runs,
        "store": status.store,
        "store_failure": status.store_failure,
        "mcp_servers": [
            {"name": s.name, "up": s.up, "failures": s.failures} for s in status.mcp_servers
        ],
        "sidecar_id": status.sidecar_id,
    }

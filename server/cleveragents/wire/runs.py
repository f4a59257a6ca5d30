"""What ``GetRun`` and ``ListRuns`` report about a run, as frozen values and as protobuf."""

from __future__ import annotations

from dataclasses import dataclass

from cleveragents.tool import StopReason, ToolCallRunResult
from cleveragents.toolruntime.v1 import service_pb2
from cleveragents.wire.timestamps import seconds_of, set_time
from cleveragents.wire.values import (
    RunState,
    result_from_pb,
    run_state_from_pb,
    run_state_to_pb,
    stop_reason_from_pb,
    stop_reason_to_pb,
)

__all__ = ["RunInfo", "RunSummary", "run_info_from_pb", "summary_from_pb", "summary_to_pb"]


@dataclass(frozen=True, slots=True)
class RunInfo:
    """What ``GetRun`` reports: ``state`` is ``running``, ``completed``, ``failed`` or
    ``cancelled``; ``result`` is set once the run has ended."""

    run_id: str
    state: str
    last_sequence: int
    result: ToolCallRunResult | None


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One run as ``ListRuns`` reports it; times are Unix seconds."""

    run_id: str
    state: str
    stop_reason: StopReason | None
    last_sequence: int
    started_at: float
    finished_at: float | None
    iterations: int
    tool_calls: int
    prompt: str


def run_info_from_pb(response: service_pb2.GetRunResponse) -> RunInfo:
    """A ``GetRunResponse`` as ``RunInfo``."""
    result = result_from_pb(response.result) if response.HasField("result") else None
    return RunInfo(
        response.run_id, run_state_from_pb(response.state), response.last_sequence, result
    )


def summary_to_pb(summary: RunSummary) -> service_pb2.RunSummary:
    """A summary as protobuf (its ``state`` one of the ``RunState`` values)."""
    pb = service_pb2.RunSummary(
        run_id=summary.run_id,
        state=run_state_to_pb(RunState(summary.state)),
        last_sequence=summary.last_sequence,
        iterations=summary.iterations,
        tool_calls=summary.tool_calls,
        prompt=summary.prompt,
    )
    set_time(pb.started_at, summary.started_at)
    if summary.stop_reason is not None:
        pb.stop_reason = stop_reason_to_pb(summary.stop_reason)
    if summary.finished_at is not None:
        set_time(pb.finished_at, summary.finished_at)
    return pb


def summary_from_pb(pb: service_pb2.RunSummary) -> RunSummary:
    """A ``RunSummary`` message as the dataclass."""
    return RunSummary(
        run_id=pb.run_id,
        state=run_state_from_pb(pb.state),
        stop_reason=stop_reason_from_pb(pb.stop_reason),
        last_sequence=pb.last_sequence,
        started_at=seconds_of(pb.started_at),
        finished_at=seconds_of(pb.finished_at) if pb.HasField("finished_at") else None,
        iterations=pb.iterations,
        tool_calls=pb.tool_calls,
        prompt=pb.prompt,
    )

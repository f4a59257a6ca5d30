"""The runs list's rows, and the counts they show that a ``Run`` does not keep.

A run counts its iterations and tool calls as it goes; the list also shows its failed calls,
its tokens and the approvals it waits for. Those are read from its log, and only while someone
looks: ``RunDigests`` decodes each listed run's frames once, as far as they were released, and
a later listing decodes only the frames added since. A run nobody lists costs nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from cleveragents.sidecar.config import SidecarConfig
from cleveragents.sidecar.console.views import model_of
from cleveragents.sidecar.fleet.directory import RunHandle
from cleveragents.sidecar.runs import Run, RunPhase
from cleveragents.tool import (
    ApprovalDecided,
    ApprovalRequested,
    LLMResponded,
    RunEvent,
    ToolCallCompleted,
)
from cleveragents.wire import decode_frame

__all__ = ["PROMPT_SHOWN", "RunDigests"]

#: How much of a run's prompt its row shows.
PROMPT_SHOWN = 120


@dataclass(slots=True)
class _Digest:
    """What a run's log said up to frame ``decoded``."""

    started_at: float
    decoded: int = 0
    failed: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    waiting: set[str] = field(default_factory=set)

    def read(self, event: RunEvent) -> None:
        if isinstance(event, ToolCallCompleted):
            self.failed += not event.record.success
        elif isinstance(event, LLMResponded) and event.usage is not None:
            usage = event.usage
            self.input_tokens += usage.input_tokens
            self.output_tokens += usage.output_tokens
            self.total_tokens += usage.total_tokens
        elif isinstance(event, ApprovalRequested):
            self.waiting.add(event.call_id)
        elif isinstance(event, ApprovalDecided):
            self.waiting.discard(event.call_id)


class RunDigests:
    """Each listed run's digest, kept while the run is listed."""

    def __init__(self) -> None:
        self._digests: dict[str, _Digest] = {}

    def row(self, handle: RunHandle, config: SidecarConfig) -> dict[str, Any]:
        """The list's row of the run ``handle`` names."""
        run = handle.run
        digest = self._digest(run)
        profile, model = model_of(run, config)
        return {
            "run_id": run.run_id,
            "owner": run.owner,
            "sidecar": handle.sidecar,
            "state": str(run.state),
            "waiting_for_client": run.phase is RunPhase.PARKED,
            "stop_reason": None if run.stop_reason is None else str(run.stop_reason),
            "profile": profile,
            "model": model,
            "started_at": run.started_at,
            "finished_at": run.finished_at,
            "iterations": run.iterations,
            "tool_calls": run.tool_calls,
            "failed_calls": digest.failed,
            "tokens": {
                "input_tokens": digest.input_tokens,
                "output_tokens": digest.output_tokens,
                "total_tokens": digest.total_tokens,
            },
            "approvals_waiting": 0 if run.ended else len(digest.waiting),
            "prompt": run.request.prompt[:PROMPT_SHOWN],
        }

    def keep_only(self, run_ids: Iterable[str]) -> None:
        """Forget the digests of the runs no longer listed."""
        listed = set(run_ids)
        for run_id in [r for r in self._digests if r not in listed]:
            del self._digests[run_id]

    def _digest(self, run: Run) -> _Digest:
        digest = self._digests.get(run.run_id)
        if digest is None or digest.started_at != run.started_at:  # a new run of that id
            digest = self._digests[run.run_id] = _Digest(run.started_at)
        frames, released = run.log.frames, run.log.released
        for item in frames[digest.decoded : released]:
            digest.read(decode_frame(item, history=False).event)
        digest.decoded = max(digest.decoded, released)
        return digest

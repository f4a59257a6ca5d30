"""What resuming a run needs beyond its log, and the core ``Resumption`` its log gives.

A durable store keeps, with each run's first frame, a small JSON ``ResumeInfo``: who hosts the
run (the sidecar, or a Session's client), the governance policy it runs under and the time its
starting call gave it. At start-up the run manager asks a ``Resumer`` (the service, which can
assemble runs) to rebuild each live run; the loop then goes on from the log.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Protocol

from cleveragents.tool import (
    LLMResponded,
    Resumption,
    RunEvent,
    ToolActorContext,
    ToolCallingRuntime,
)
from cleveragents.wire import RunRequest, decode_frame

if TYPE_CHECKING:
    from cleveragents.sidecar.approvals import ApprovalBroker
    from cleveragents.sidecar.runs.run import Run

__all__ = [
    "ADOPTION_REASON",
    "RESTART_REASON",
    "Launchable",
    "ResumeInfo",
    "Resumer",
    "handover_reason",
    "responses_logged",
    "resumption_of",
]

#: Why a run resumes at start-up (``RunResumed.reason``).
RESTART_REASON = "the sidecar restarted"
#: Why a run another sidecar (on a shared store) ran is resumed here.
ADOPTION_REASON = "its sidecar stopped renewing its lease and this sidecar adopted it"


def handover_reason(sidecar: str) -> str:
    """Why a parked Session run taken over from ``sidecar`` (a hand-over) resumes here."""
    return f"sidecar {sidecar!r} handed it over when its client re-attached to this sidecar"


@dataclass(frozen=True, slots=True)
class ResumeInfo:
    """How a run was started: ``hosted`` is ``server`` (the sidecar runs its tools and LLM)
    or ``session`` (a client does); ``policy`` names its governance policy ("" the global
    one); ``timeout_s`` is the time its starting call's deadline left it (``None``: none);
    ``detach`` whether it outlives that call."""

    hosted: str
    policy: str = ""
    timeout_s: float | None = None
    detach: bool = False

    def to_json(self) -> str:
        """The JSON text a store keeps."""
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> ResumeInfo | None:
        """The info ``text`` holds; ``None`` for none (a run stored before resuming existed)
        or for text this version cannot read."""
        if not text:
            return None
        try:
            raw = json.loads(text)
            timeout = raw.get("timeout_s")
            return cls(
                str(raw["hosted"]),
                str(raw.get("policy", "")),
                None if timeout is None else float(timeout),
                bool(raw.get("detach", False)),
            )
        except (ValueError, TypeError, KeyError, AttributeError):
            return None


class Launchable(Protocol):
    """A run ready to start, as the manager starts it (``assembly.AssembledRun`` is one): the
    request as accepted, the runtime and context its loop runs with, the time its starting
    call left it (``None``: no deadline), and its approvals broker."""

    @property
    def request(self) -> RunRequest: ...

    @property
    def runtime(self) -> ToolCallingRuntime: ...

    @property
    def context(self) -> ToolActorContext: ...

    @property
    def timeout_s(self) -> float | None: ...

    @property
    def approvals(self) -> ApprovalBroker: ...


class Resumer(Protocol):
    """Rebuilds a live run found in the store (the gateway implements it)."""

    def reassemble(self, run: Run, info: ResumeInfo, resumption: Resumption) -> Launchable:
        """The assembled run that goes on with ``run``; ``SidecarError`` says why it cannot."""
        ...


def resumption_of(frames: Sequence[bytes], reason: str = RESTART_REASON) -> Resumption:
    """The core ``Resumption`` a live run's stored frames give: its events, the sequence of
    the last one, and the seconds since its first event (when the run started)."""
    logged = [decode_frame(item) for item in frames]
    events: list[RunEvent] = [entry.event for entry in logged]
    elapsed = max(0.0, time.time() - logged[0].time)
    return Resumption(events, len(frames), elapsed, reason)


def responses_logged(resumption: Resumption) -> int:
    """How many LLM responses the run's log holds (a scripted LLM goes on after them)."""
    return sum(isinstance(event, LLMResponded) for event in resumption.events)

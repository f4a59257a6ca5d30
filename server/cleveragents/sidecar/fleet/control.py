"""``Control``: what one sidecar asks of, or tells, the sidecar that runs (or ran) a run, as it
travels on that sidecar's control stream: cancel the run, decide one of its calls, or (a
notice, answered by nobody) the run was taken over: check the store, and stop the copy here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["CANCEL", "DECIDE", "TAKEN", "Control"]

#: The requests: cancel the run, decide one of its calls waiting for approval; and the notice
#: that another sidecar took the run (the receiver believes the store, not the notice).
CANCEL, DECIDE, TAKEN = "cancel", "decide", "taken"
_OPS = (CANCEL, DECIDE, TAKEN)


@dataclass(frozen=True, slots=True)
class Control:
    """A request for the sidecar that runs ``run_id``: ``cancel`` it (``reason``), or
    ``decide`` its call ``call_id`` as ``identity`` (whose decision the owner records and
    checks against the run's policy); or the notice that ``sender`` ``taken`` it. ``sender``
    is the sidecar that sent it."""

    op: str
    run_id: str
    reason: str = ""
    call_id: str = ""
    approved: bool = False
    identity: str = ""
    sender: str = ""

    def fields(self, sender: str) -> dict[Any, Any]:
        """The stream entry that carries this request from ``sender``."""
        return {
            "op": self.op,
            "run": self.run_id,
            "reason": self.reason,
            "call": self.call_id,
            "approved": "1" if self.approved else "",
            "identity": self.identity,
            "from": sender,
        }

    @classmethod
    def of(cls, fields: dict[bytes, bytes]) -> Control:
        """The request a stream entry carries; ``ValueError`` saying why for an entry that is
        none (anything that can write to Redis can write to a control stream)."""

        def text(name: bytes) -> str:
            try:
                return fields.get(name, b"").decode()
            except UnicodeDecodeError:
                raise ValueError(f"its {name.decode(errors='replace')!r} is not UTF-8") from None

        control = cls(
            text(b"op"), text(b"run"), text(b"reason"), text(b"call"),
            bool(fields.get(b"approved")), text(b"identity"), text(b"from"),
        )  # fmt: skip
        if control.op not in _OPS:
            raise ValueError(f"{control.op!r} is not a request (one of {', '.join(_OPS)})")
        if not control.run_id:
            raise ValueError("it names no run")
        return control

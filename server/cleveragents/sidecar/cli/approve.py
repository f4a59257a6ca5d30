"""``cleveragents-sidecar approve|deny RUN_ID CALL_ID``: decide a call that waits for approval.

It is the ``DecideApproval`` RPC from a terminal: the decision is recorded as made by ``rpc``.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TextIO

from cleveragents.sidecar.cli.text import inline, problem

if TYPE_CHECKING:  # the client is imported only by the commands that talk to a sidecar
    from cleveragents.client import SidecarClient

__all__ = ["decide"]


def decide(
    client: SidecarClient, run_id: str, call_id: str, approved: bool, reason: str, out: TextIO
) -> int:
    """Approve or deny ``call_id`` of ``run_id``; the exit status: 0 decided, 1 no such run or
    no such waiting call, 2 the sidecar could not be asked."""
    from cleveragents.client import SidecarRpcError

    try:
        client.decide_approval(run_id, call_id, approved=approved, reason=reason)
    except SidecarRpcError as exc:
        print(f"cleveragents-sidecar: {problem(exc)}", file=sys.stderr)
        return 1 if exc.code.name in ("NOT_FOUND", "FAILED_PRECONDITION") else 2
    verdict = "approved" if approved else "denied"
    out.write(f"{verdict} call {inline(call_id)} of run {inline(run_id)}\n")
    return 0

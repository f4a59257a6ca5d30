"""``cleveragents-sidecar cancel RUN_ID``: cancel a run from a terminal (``CancelRun``)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TextIO

from cleveragents.sidecar.cli.text import inline, problem

if TYPE_CHECKING:  # the client is imported only by the commands that talk to a sidecar
    from cleveragents.client import SidecarClient

__all__ = ["cancel"]

_ENDED = ("completed", "failed", "cancelled")


def cancel(client: SidecarClient, run_id: str, reason: str, out: TextIO) -> int:
    """Cancel ``run_id``; the exit status: 0 this call cancelled it, 1 no such run or it had
    already ended (its state is printed), 2 the sidecar could not be asked or refused.

    ``CancelRun`` answers a run that had ended with its state, ``cancelled`` included: the run
    is looked at first, so that cancelling a cancelled run is not reported as done now.
    """
    from cleveragents.client import SidecarRpcError

    try:
        state = client.get_run(run_id).state
    except SidecarRpcError:
        state = ""  # CancelRun says why, with the status it answers
    if state not in _ENDED:
        try:
            state = client.cancel_run(run_id, reason=reason)
        except SidecarRpcError as exc:
            print(f"cleveragents-sidecar: {problem(exc)}", file=sys.stderr)
            return 1 if exc.code.name == "NOT_FOUND" else 2
        if state == "cancelled":
            out.write(f"run {inline(run_id)}: cancelled\n")
            return 0
    out.write(f"run {inline(run_id)} had already ended: {state}\n")
    return 1

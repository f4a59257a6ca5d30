"""Approval requests of one run, waiting for a decision from its session or the RPC."""

from __future__ import annotations

import asyncio

from cleveragents.sidecar.errors import SidecarError
from cleveragents.tool import ApprovalDecision, ApprovalRequest

__all__ = ["ApprovalBroker"]


class ApprovalBroker:
    """The run's ``Approver``: each request waits until :meth:`decide` answers it.

    The runtime bounds the wait (``approval_timeout_s``) and applies the default then.
    """

    def __init__(self) -> None:
        self._pending: dict[str, asyncio.Future[ApprovalDecision]] = {}

    @property
    def waiting(self) -> list[str]:
        """The call ids that wait for a decision."""
        return list(self._pending)

    async def __call__(self, request: ApprovalRequest) -> ApprovalDecision:
        future: asyncio.Future[ApprovalDecision] = asyncio.get_running_loop().create_future()
        self._pending[request.call_id] = future
        try:
            return await future
        finally:
            if self._pending.get(request.call_id) is future:
                del self._pending[request.call_id]

    def decide(self, call_id: str, approved: bool, reason: str, by: str) -> None:
        """Answer a waiting call; ``FAILED_PRECONDITION`` when none waits under that id."""
        future = self._pending.pop(call_id, None)
        if future is None or future.done():
            raise SidecarError.out_of_order(
                f"no tool call {call_id!r} is waiting for approval in this run"
            )
        future.set_result(ApprovalDecision(approved, reason, by))

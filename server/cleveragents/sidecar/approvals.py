"""Approval requests of one run, waiting for a decision from its session or the RPC.

A call waits only when someone can answer it: a ``Session`` that declared
``handles_approvals``, the ``StreamToolLoop`` caller that started the run, or a ``WatchRun``
watcher, any of them following the run when the call asks. Nobody else sees the request (a
unary ``RunToolLoop`` nobody watches), so then the default applies at once, or after
``approval_timeout_unattended_s`` when that is set, so that an operator can still answer with
``DecideApproval`` or ``cleveragents-sidecar approve``. Every request is logged at warning
level with the run and call ids and how to answer it.

Under a policy with ``self_approval = false`` the identity that started the run may not
decide its approvals: its own streams do not count as someone who can answer, and its
decisions are refused with ``PERMISSION_DENIED``. Each decision records who made it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import structlog

from cleveragents.sidecar.errors import SidecarError
from cleveragents.tool import ApprovalDecision, ApprovalRequest

__all__ = ["ApprovalBroker", "own_run_refusal"]

_log = structlog.get_logger("cleveragents.sidecar.approvals")


def _nobody() -> bool:
    return False


class ApprovalBroker:
    """The run's ``Approver``: each request waits until :meth:`decide` answers it.

    The runtime bounds the wait (``timeout_s``) and applies the default then; ``bind`` tells
    the broker its run and how to know whether anyone can answer (until then: nobody).
    """

    def __init__(
        self,
        *,
        timeout_s: float = 300.0,
        approve_on_timeout: bool = False,
        unattended_timeout_s: float = 0.0,
        self_approval: bool = True,
        policy: str = "policy",
    ) -> None:
        self._pending: dict[str, asyncio.Future[ApprovalDecision]] = {}
        self.self_approval = self_approval
        self._policy = policy  # the table that says so, for the refusal's message
        self.owner = ""
        self.timeout_s = timeout_s
        self.approve_on_timeout = approve_on_timeout
        self.unattended_timeout_s = unattended_timeout_s
        self.run_id = ""
        self._attended: Callable[[], bool] = _nobody
        self._logger: Any = _log

    def bind(self, run_id: str, attended: Callable[[], bool], owner: str = "") -> None:
        """Serve run ``run_id`` of ``owner``; ``attended()`` says whether anyone can answer
        right now."""
        self.run_id = run_id
        self.owner = owner
        self._attended = attended
        self._logger = _log.bind(run_id=run_id)

    def refusal(self, identity: str) -> str | None:
        """Why ``identity`` may not decide this run's approvals, whatever its roles; ``None``
        when it may (if its roles let it)."""
        if identity != self.owner:
            return None
        return own_run_refusal(self.self_approval, self._policy, identity, self.run_id)

    @property
    def waiting(self) -> list[str]:
        """The call ids that wait for a decision."""
        return list(self._pending)

    def how_to_answer(self, request: ApprovalRequest) -> str:
        """What the ``approval_requested`` event tells a person to do about ``request``."""
        default = "approved" if self.approve_on_timeout else "denied"
        commands = (
            f"answer with `cleveragents-sidecar approve {self.run_id} {request.call_id}` (or "
            f"`deny`), the DecideApproval RPC (run_id {self.run_id!r}, call_id "
            f"{request.call_id!r}) or a Session approval_decision"
        )
        if self._attended():
            return f"{commands}; undecided after {self.timeout_s:g}s it is {default}"
        if self.unattended_timeout_s > 0:
            return (
                f"nobody follows this run (no Session with handles_approvals, no "
                f"StreamToolLoop caller, no WatchRun watcher): {commands}; undecided after "
                f"{min(self.timeout_s, self.unattended_timeout_s):g}s it is {default}"
            )
        return (
            f"nobody can answer: no Session with handles_approvals, StreamToolLoop caller or "
            f"WatchRun watcher follows this run, so it is {default} at once; start the run "
            "with StreamToolLoop or a Session that handles approvals, or set "
            "approval_timeout_unattended_s to wait for DecideApproval or "
            "`cleveragents-sidecar approve`"
        )

    async def __call__(self, request: ApprovalRequest) -> ApprovalDecision:
        attended = self._attended()
        if not attended and self.unattended_timeout_s <= 0:
            self._logger.warning(
                "tool call needs approval nobody can give; the default applies at once",
                call_id=request.call_id,
                tool=request.tool_name,
                approved=self.approve_on_timeout,
                how_to_answer=self.how_to_answer(request),
            )
            return ApprovalDecision(
                self.approve_on_timeout,
                "nobody can answer: no Session with handles_approvals, StreamToolLoop caller "
                "or WatchRun watcher follows the run",
                "policy",
            )
        self._logger.warning(
            "tool call waits for approval",
            call_id=request.call_id,
            tool=request.tool_name,
            how_to_answer=self.how_to_answer(request),
        )
        future: asyncio.Future[ApprovalDecision] = asyncio.get_running_loop().create_future()
        self._pending[request.call_id] = future
        try:
            if attended:
                return await future
            try:
                async with asyncio.timeout(self.unattended_timeout_s):
                    return await future
            except TimeoutError:
                return ApprovalDecision(
                    self.approve_on_timeout,
                    f"no decision within {self.unattended_timeout_s:g}s, and nobody follows "
                    "the run (approval_timeout_unattended_s)",
                    "timeout",
                )
        finally:
            if self._pending.get(request.call_id) is future:
                del self._pending[request.call_id]

    def decide(
        self, call_id: str, approved: bool, reason: str, by: str, identity: str = ""
    ) -> None:
        """Answer a waiting call as ``identity``; ``PERMISSION_DENIED`` when the policy keeps
        it from deciding, ``FAILED_PRECONDITION`` when no call waits under that id."""
        if (refused := self.refusal(identity)) is not None:
            raise SidecarError.denied(refused)
        future = self._pending.pop(call_id, None)
        if future is None or future.done():
            raise SidecarError.out_of_order(
                f"no tool call {call_id!r} is waiting for approval in this run"
            )
        future.set_result(ApprovalDecision(approved, reason, by, identity))
        self._logger.info(
            "approval decided", call_id=call_id, approved=approved, by=by, identity=identity
        )


def own_run_refusal(self_approval: bool, policy: str, identity: str, run_id: str) -> str | None:
    """Why ``identity``, which started ``run_id``, may not decide its approvals under
    ``policy`` (named for the message); ``None`` when ``self_approval`` lets it."""
    if self_approval:
        return None
    return (
        f"identity {identity!r} started run {run_id!r} and may not decide its own "
        f"approvals ({policy}.self_approval = false): an identity with the "
        "approver or admin role must decide them"
    )

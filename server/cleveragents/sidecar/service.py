"""``ToolRuntimeService``: every RPC of the API, on top of the run manager.

Streaming RPCs write responses assembled from the run log's pre-encoded frames (see
``streams.py``), so their handlers are registered with an identity response serialiser in
``server.py``. They call ``context.write``, as ``Session`` does, rather than yield: two
async-generator hops fewer per message (about 8 % of a bare streamed message's cost).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

import grpc
import structlog

from cleveragents.sidecar import convert
from cleveragents.sidecar.approvals import ApprovalBroker
from cleveragents.sidecar.config import SidecarConfig
from cleveragents.sidecar.errors import SidecarError
from cleveragents.sidecar.profiles import resolve_llm
from cleveragents.sidecar.runs import FAILED, Run, RunManager
from cleveragents.sidecar.session import ClientLLMCaller, SessionChannel
from cleveragents.sidecar.streams import (
    Listener,
    Subscriber,
    batch,
    batch_limit,
    session_messages,
    unframe,
)
from cleveragents.tool import (
    DEFAULT_MAX_ITERATIONS,
    AutomationProfile,
    ToolCallingRuntime,
    ToolLimits,
    ToolRegistry,
    ToolRunner,
    ToolSpec,
    UnknownToolError,
)
from cleveragents.toolruntime.v1 import service_pb2, session_pb2, types_pb2

__all__ = ["ToolRuntimeService"]

log = structlog.get_logger("cleveragents.sidecar.service")
_CANCEL_WAIT_S = 5.0
_DEADLINE_SLACK_S = 0.1
#: gRPC refuses metadata above 8 KiB by default; keep the result trailer well below it.
_MAX_TRAILER = 6 * 1024


class ToolRuntimeService:
    """The servicer. Server-side tools come from ``registry``; runs live in ``manager``."""

    def __init__(self, config: SidecarConfig, registry: ToolRegistry, manager: RunManager) -> None:
        self.config = config
        self.registry = registry
        self.manager = manager
        self.limits = ToolLimits(config.tool_limits) if config.tool_limits else None
        self.batch_limit = batch_limit(config.max_message_bytes)

    # -- unary -----------------------------------------------------------------------------

    async def RunToolLoop(
        self, request: service_pb2.RunToolLoopRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> service_pb2.RunToolLoopResponse:
        try:
            run = self._start(request.spec, context)
        except SidecarError as exc:
            await context.abort(exc.code, exc.message)
        try:
            await run.wait()
        except asyncio.CancelledError:
            self._abandoned(run, context, "the client cancelled its RunToolLoop call")
            raise
        if run.state == FAILED and run.failure is not None and run.result is not None:
            # The partial result rides along in a binary trailer for clients that want it,
            # when it fits gRPC's metadata limits; GetRun always has it.
            partial = run.result.SerializeToString()
            trailer = (
                (("cleveragents-result-bin", partial),) if len(partial) <= _MAX_TRAILER else ()
            )
            message = f"{run.failure[1]} (run {run.run_id}; GetRun has its partial result)"
            await context.abort(run.failure[0], message, trailing_metadata=trailer)
        return service_pb2.RunToolLoopResponse(result=run.result)

    async def GetRun(
        self, request: service_pb2.GetRunRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> service_pb2.GetRunResponse:
        run = await self._require(request.run_id, context)
        response = service_pb2.GetRunResponse(
            run_id=run.run_id, state=run.state, last_sequence=run.last_sequence
        )
        if run.result is not None:
            response.result.CopyFrom(run.result)
        return response

    async def CancelRun(
        self, request: service_pb2.CancelRunRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> service_pb2.CancelRunResponse:
        run = await self._require(request.run_id, context)
        if not run.finished:
            self.manager.cancel(run, request.reason or "cancelled by CancelRun")
            with contextlib.suppress(TimeoutError):  # a tool that ignores cancellation
                await asyncio.wait_for(run.wait(), _CANCEL_WAIT_S)
        return service_pb2.CancelRunResponse(state=run.state)

    async def ListTools(
        self, request: service_pb2.ListToolsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> service_pb2.ListToolsResponse:
        return service_pb2.ListToolsResponse(
            tools=[convert.spec_to_pb(s) for s in self.registry.specs()]
        )

    async def DecideApproval(
        self,
        request: service_pb2.DecideApprovalRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> service_pb2.DecideApprovalResponse:
        run = await self._require(request.run_id, context)
        try:
            if run.approvals is None:
                raise SidecarError.out_of_order(f"run {run.run_id!r} has no approvals")
            run.approvals.decide(request.call_id, request.approved, request.reason, "rpc")
        except SidecarError as exc:
            await context.abort(exc.code, exc.message)
        return service_pb2.DecideApprovalResponse()

    async def ListRuns(
        self, request: service_pb2.ListRunsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> service_pb2.ListRunsResponse:
        if request.limit < 0:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "limit must not be negative")
        runs = self.manager.live_runs() + self.manager.retained_runs()
        summaries = sorted((_summary(run) for run in runs), key=_newest_first)
        return service_pb2.ListRunsResponse(runs=summaries[: request.limit or 100])

    # -- streaming -------------------------------------------------------------------------

    async def StreamToolLoop(
        self,
        request: service_pb2.StreamToolLoopRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> None:
        stream = Subscriber()
        try:
            run = self._start(request.spec, context, listener=stream)
        except SidecarError as exc:
            await context.abort(exc.code, exc.message)
        limit = self.batch_limit if request.batch_events else 0
        finished = False
        try:
            while items := await stream.get_many(limit):
                await context.write(batch(items))
            finished = True
        finally:
            run.unsubscribe(stream)
            if not finished:
                self._abandoned(run, context, "the client cancelled its StreamToolLoop call")

    async def WatchRun(
        self, request: service_pb2.WatchRunRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        run = await self._require(request.run_id, context)
        after = request.after_sequence
        if after > run.last_sequence and run.finished:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"after_sequence {after} is past the run's last event ({run.last_sequence})",
            )
        # Past the live end, the follower simply waits for the run to get there.
        sub = self.manager.follow(run, after)
        limit = self.batch_limit if request.batch_events else 0
        try:
            while items := await sub.get_many(limit):
                await context.write(batch(items))
        finally:
            run.unsubscribe(sub)
        if sub.dropped:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"this watcher fell more than {self.manager.watcher_queue_size} events behind "
                f"and was dropped; reconnect with after_sequence={sub.cursor}",
            )

    async def Session(
        self, request_iterator: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        first = await context.read()
        if first is grpc.aio.EOF:
            return
        if not isinstance(first, session_pb2.SessionRequest):  # did not parse
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(first.message))
        kind = first.WhichOneof("kind")
        if kind != "start":
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"the first SessionRequest must be 'start', got {kind or 'an empty message'!r}",
            )
        start = first.start
        channel = SessionChannel(
            self.config.default_tool_timeout_s, incremental_messages=start.incremental_messages
        )
        try:
            client_specs = _client_specs(start.tools)
            run = self._start(
                start.spec,
                context,
                listener=channel.outbox,
                client_specs=client_specs,
                channel=channel,
                client_llm=start.client_llm,
            )
        except SidecarError as exc:
            await context.abort(exc.code, exc.message)
        hosts = bool(client_specs) or start.client_llm
        reader = asyncio.create_task(self._read_session(context, channel, run, hosts))
        channel.attach(run)
        limit = self.batch_limit if start.batch_events else 0
        finished = False
        try:
            while items := await channel.outbox.get_many(limit):
                for message in session_messages(items):
                    await context.write(message)
            finished = True
        finally:
            reader.cancel()
            if not finished:
                self._abandoned(run, context, "the client went away", force=hosts)
        if channel.violation is not None:
            await context.abort(channel.violation.code, channel.violation.message)

    async def _read_session(
        self,
        context: grpc.aio.ServicerContext[Any, Any],
        channel: SessionChannel,
        run: Run,
        hosts: bool,
    ) -> None:
        while True:
            message = await context.read()
            if message is grpc.aio.EOF:
                remaining = context.time_remaining()
                at_deadline = remaining is not None and remaining <= _DEADLINE_SLACK_S
                if hosts and not run.ended and not at_deadline:
                    self.manager.cancel(run, "the client closed its side of the session")
                return
            try:
                if not isinstance(message, session_pb2.SessionRequest):  # did not parse
                    raise SidecarError.invalid(str(message.message))
                kind = message.WhichOneof("kind")
                if kind == "tool_result":
                    channel.resolve_tool(message.tool_result)
                elif kind == "llm_result":
                    channel.resolve_llm(message.llm_result)
                elif kind == "cancel":
                    self.manager.cancel(run, message.cancel.reason or "cancelled by the client")
                elif kind == "approval_decision":
                    decision = message.approval_decision
                    if run.approvals is None:  # pragma: no cover - every run has a broker
                        raise SidecarError.out_of_order("this run has no approvals")
                    run.approvals.decide(
                        decision.call_id, decision.approved, decision.reason, "session"
                    )
                elif kind == "start":
                    raise SidecarError.out_of_order("the session has already started")
                else:
                    raise SidecarError.invalid("empty SessionRequest: set one of its fields")
            except SidecarError as exc:
                run.log.warning("session protocol error", error=exc.message)
                channel.violation = exc
                self.manager.cancel(run, f"session protocol error: {exc.message}")
                return

    # -- helpers ---------------------------------------------------------------------------

    def _start(
        self,
        spec: types_pb2.RunSpec,
        context: grpc.aio.ServicerContext[Any, Any],
        *,
        listener: Listener | None = None,
        client_specs: Sequence[ToolSpec] = (),
        channel: SessionChannel | None = None,
        client_llm: bool = False,
    ) -> Run:
        if not spec.prompt.strip():
            raise SidecarError.invalid("spec.prompt must not be empty")
        if spec.max_iterations < 0:
            raise SidecarError.invalid("spec.max_iterations must be 0 (the default) or more")
        cap = self.config.max_iterations_cap
        if spec.max_iterations > cap:
            raise SidecarError.invalid(
                f"spec.max_iterations {spec.max_iterations} exceeds this sidecar's cap of {cap}"
            )
        max_iterations = spec.max_iterations or min(DEFAULT_MAX_ITERATIONS, cap)
        try:
            run_context = convert.context_from_pb(spec.context)
        except ValueError as exc:
            raise SidecarError.invalid(str(exc)) from None
        registry = self._registry_for(spec.tool_names, client_specs)
        profile, llm, router = resolve_llm(spec.llm, self.config, client_llm=client_llm)
        if channel is not None:
            try:
                channel.register_tools(registry, client_specs)
            except ValueError as exc:
                raise SidecarError.invalid(f"start.tools: {exc}") from None
            if llm is None:
                llm = ClientLLMCaller(channel)
        if llm is None:  # pragma: no cover - resolve_llm only returns None for client LLMs
            raise SidecarError.invalid("this RPC cannot use a client-hosted LLM")
        automation = self._automation_profile(run_context.automation_profile)
        try:
            budget, wall_clock_s = convert.budget_from_pb(spec.budget)
        except ValueError as exc:
            raise SidecarError.invalid(str(exc)) from None
        approvals = ApprovalBroker()
        runner = ToolRunner(
            registry, default_timeout_s=self.config.default_tool_timeout_s, limits=self.limits
        )
        runtime = ToolCallingRuntime(
            registry,
            runner,
            llm,
            max_iterations,
            router,
            profile=automation,
            approver=approvals,
            approval_timeout_s=self.config.approval_timeout_s,
            approve_on_timeout=self.config.approve_on_timeout,
            budget=budget,
        )
        spec.max_iterations = max_iterations
        spec.llm.profile = profile.name
        spec.context.automation_profile = automation.name
        spec.tool_names[:] = registry.names()
        metadata = {
            str(key): value
            for key, value in (context.invocation_metadata() or ())
            if isinstance(value, str)
        }
        deadline = context.time_remaining()
        if wall_clock_s is not None:
            deadline = wall_clock_s if deadline is None else min(deadline, wall_clock_s)
        run = self.manager.start(
            spec, runtime, run_context, timeout_s=deadline, listener=listener, metadata=metadata
        )
        run.approvals = approvals
        return run

    def _automation_profile(self, name: str) -> AutomationProfile:
        profiles = self.config.all_automation_profiles()
        chosen = name or self.config.default_automation_profile
        if chosen not in profiles:
            known = ", ".join(sorted(profiles))
            raise SidecarError.not_found(
                f"unknown automation profile {chosen!r} in context.automation_profile; "
                f"configured: {known}"
            )
        return profiles[chosen]

    def _registry_for(
        self, tool_names: Sequence[str], client_specs: Sequence[ToolSpec]
    ) -> ToolRegistry:
        client_names = {s.name for s in client_specs}
        server_names = [n for n in (tool_names or self.registry.names()) if n not in client_names]
        try:
            return self.registry.subset(server_names)
        except UnknownToolError as exc:
            raise SidecarError.not_found(f"spec.tool_names: {exc}") from None

    def _abandoned(
        self,
        run: Run,
        context: grpc.aio.ServicerContext[Any, Any],
        reason: str,
        *,
        force: bool = False,
    ) -> None:
        """The stream that started ``run`` ended early: cancel the run unless it may go on."""
        if run.ended or (run.detach and not force):
            return
        remaining = context.time_remaining()
        if remaining is not None and remaining <= _DEADLINE_SLACK_S:
            # The client gave up at (or, by its own clock, just before) the deadline: the
            # run's own timer, set to the same instant, ends it as DEADLINE.
            return
        self.manager.cancel(run, reason)

    async def _require(self, run_id: str, context: grpc.aio.ServicerContext[Any, Any]) -> Run:
        try:
            return self.manager.require(run_id)
        except SidecarError as exc:
            await context.abort(exc.code, exc.message)


def _client_specs(tools: Sequence[types_pb2.ToolSpec]) -> list[ToolSpec]:
    specs: list[ToolSpec] = []
    seen: set[str] = set()
    for pb in tools:
        try:
            spec = convert.spec_from_pb(pb)
        except (ValueError, TypeError) as exc:
            raise SidecarError.invalid(f"start.tools: {exc}") from None
        if spec.name in seen:
            raise SidecarError.invalid(f"start.tools: tool {spec.name!r} is declared twice")
        seen.add(spec.name)
        specs.append(spec)
    return specs


def _summary(run: Run) -> service_pb2.RunSummary:
    first = unframe(run.frames[0])
    summary = service_pb2.RunSummary(
        run_id=run.run_id,
        state=run.state,
        last_sequence=run.last_sequence,
        started_at=first.time,
        iterations=run.iterations,
        tool_calls=run.tool_calls,
        prompt=run.spec.prompt[:200],
    )
    if run.result is not None:
        summary.stop_reason = run.result.stop_reason
        summary.iterations = run.result.iterations
        summary.tool_calls = len(run.result.tool_call_history)
    if run.finished_at is not None:
        summary.finished_at.CopyFrom(convert.timestamp(run.finished_at))
    return summary


def _newest_first(summary: service_pb2.RunSummary) -> tuple[int, int]:
    return (-summary.started_at.seconds, -summary.started_at.nanos)

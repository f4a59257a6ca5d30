"""``ToolRuntimeService``: every RPC of the API but ``Session`` (``session.py``) and
``FollowRun`` (``follow.py``).

Requests become core-typed values at once (``cleveragents.wire``); the assembler turns them
into runs and the run manager keeps those. Streaming RPCs write responses assembled from the
run log's pre-encoded frames, so their handlers are registered with an identity response
serialiser (``handlers.py``). They call ``context.write`` rather than yield: two
async-generator hops fewer per message (about 8 % of a bare streamed message's cost).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from cleveragents.sidecar.assembly import AssembledRun, RunAssembler
from cleveragents.sidecar.config import SidecarConfig
from cleveragents.sidecar.errors import SidecarError
from cleveragents.sidecar.hosted import ClientHost
from cleveragents.sidecar.identity import Access
from cleveragents.sidecar.runs import FrameQueue, FrameSink, LogCursor, Run, RunManager
from cleveragents.sidecar.runs.resume import ResumeInfo
from cleveragents.sidecar.transport import follow, session, shared_calls
from cleveragents.sidecar.transport.bounds import check_started_fits
from cleveragents.sidecar.transport.caller import current_caller
from cleveragents.sidecar.transport.calls import (
    DEADLINE_SLACK_S,
    Context,
    abort,
    bounded,
    end_if_lost,
)
from cleveragents.sidecar.transport.dropped import end_if_dropped
from cleveragents.sidecar.transport.run_specs import read_request
from cleveragents.tool import Resumption, ToolRegistry, ToolSpec
from cleveragents.toolruntime.v1 import service_pb2
from cleveragents.wire import (
    RunRequest,
    RunState,
    SessionOpening,
    batch,
    batch_limit,
    event_limit,
    history_page,
    result_message,
    result_trailer,
    run_state_to_pb,
    spec_to_pb,
    take_frames,
)

__all__ = ["ToolRuntimeService"]

_CANCEL_WAIT_S = 5.0
#: A spec this much under the frame limit cannot make ``run_started`` too large, whatever the
#: sidecar adds (run id, iteration limit, thousands of tool names): nearer, it is measured.
_SPEC_SLACK = 512 * 1024
#: Threads opening Sessions (work bounded by the schema limits; two: a large one queues none).
_OPENING_WORKERS = 2
#: A watcher's messages stay this small (unless one event is larger): gRPC holds about two.
WATCH_BATCH_BYTES = 64 * 1024


class ToolRuntimeService:
    """The servicer. Server-side tools come from ``registry``; runs live in ``manager``."""

    def __init__(self, config: SidecarConfig, registry: ToolRegistry, manager: RunManager) -> None:
        self.config = config
        self.registry = registry
        self.manager = manager
        self.assembler = RunAssembler(config, registry)
        self.batch_limit = batch_limit(config.max_message_bytes)
        #: The largest event, or page of a run's history, one message may carry.
        self.frame_limit = event_limit(config.max_message_bytes)
        #: The largest message a watcher is sent (unless one event is larger).
        self.watch_batch_bytes = min(self.batch_limit, WATCH_BATCH_BYTES)
        #: What each identity's FollowRun watchers have in flight together, bounded.
        self.follow_windows = follow.IdentityWindows(config.watch_window_bytes_per_identity)
        #: Starts the lazy MCP servers whose tools these names (all: none) may select, and
        #: waits for them; set by the sidecar when it has MCP servers.
        self.tools_wanted: Callable[[Sequence[str]], Awaitable[None]] | None = None
        #: Where tools come from, by name, for ``ListTools`` (``mcp:<server>``); the rest: "".
        self.tool_origins: Mapping[str, str] = {}
        #: Where Session openings parse and measure their client's schemas (see ``opening``).
        self.openings = concurrent.futures.ThreadPoolExecutor(
            _OPENING_WORKERS, thread_name_prefix="session-opening"
        )

    def close(self) -> None:
        """Let the opening threads go; an opening still running ends on its own (bounded)."""
        self.openings.shutdown(wait=False, cancel_futures=True)

    # -- unary -----------------------------------------------------------------------------

    async def RunToolLoop(
        self, request: service_pb2.RunToolLoopRequest, context: Context
    ) -> service_pb2.RunToolLoopResponse:
        try:
            await self.want_tools(  # UNAVAILABLE: a server is down
                request.spec.tool_names, no_server_tools=request.spec.no_server_tools
            )
            await self.claim_id(request.spec.run_id)
            accepted = await read_request(request.spec, self.config, self.openings)
            run = self.start_run(accepted, context, spec_bytes=request.spec.ByteSize())
        except SidecarError as exc:
            await abort(context, exc)
        try:
            await run.wait()
        except asyncio.CancelledError:
            self.abandoned(run, context, "the client cancelled its RunToolLoop call")
            raise
        await end_if_lost(run, context)
        result = result_message(run.log.frames[-1])
        if run.state is RunState.FAILED and run.failure is not None and result is not None:
            # The partial result rides along in a binary trailer for clients that want it,
            # when it fits gRPC's metadata limits; GetRun always has it.
            message = f"{bounded(run.failure[1])} (run {run.run_id}; GetRun has its partial result)"
            await context.abort(run.failure[0], message, trailing_metadata=result_trailer(result))
        return service_pb2.RunToolLoopResponse(result=result)

    async def GetRun(
        self, request: service_pb2.GetRunRequest, context: Context
    ) -> service_pb2.GetRunResponse:
        run = await self._require(request.run_id, context)
        response = service_pb2.GetRunResponse(
            run_id=run.run_id, state=run_state_to_pb(run.state), last_sequence=run.last_sequence
        )
        if run.finished and (result := result_message(run.log.frames[-1])) is not None:
            response.result.CopyFrom(result)
        return response

    async def GetRunHistory(
        self, request: service_pb2.GetRunHistoryRequest, context: Context
    ) -> bytes:
        run = await self._require(request.run_id, context)
        after, released = request.after_sequence, run.log.released
        if request.max_bytes < 0:
            await abort(context, SidecarError.invalid("max_bytes must not be negative"))
        if after > released and run.finished:
            await abort(
                context,
                SidecarError.invalid(
                    f"after_sequence {after} is past the run's last event ({released})"
                ),
            )
        limit = min(request.max_bytes, self.frame_limit) if request.max_bytes else self.batch_limit
        page = take_frames(run.log.frames, min(after, released), released, limit)
        return history_page(page, released, finished=run.finished)

    async def CancelRun(
        self, request: service_pb2.CancelRunRequest, context: Context
    ) -> service_pb2.CancelRunResponse:
        located = await self._locate(request.run_id, context, Access.CONTROL)
        try:  # a copy stale here (taken over while this sidecar stalled) is not cancelled
            run, sidecar = await shared_calls.current(self, *located)
        except SidecarError as exc:
            await abort(context, exc)
        reason = request.reason or "cancelled by CancelRun"
        if not run.finished and self.manager.shared is not None and sidecar:
            from cleveragents.sidecar.runs.shared import Control  # a fleet's only

            await self.manager.shared.control(sidecar, Control("cancel", run.run_id, reason))
        if not run.finished:
            self.manager.cancel(run, reason)
            with contextlib.suppress(TimeoutError):  # a tool that ignores cancellation
                await asyncio.wait_for(run.wait(), _CANCEL_WAIT_S)
        return service_pb2.CancelRunResponse(state=run_state_to_pb(run.state))

    async def ListTools(
        self, request: service_pb2.ListToolsRequest, context: Context
    ) -> service_pb2.ListToolsResponse:
        await self.want_tools(())
        origins = self.tool_origins
        return service_pb2.ListToolsResponse(
            tools=[spec_to_pb(s, origins.get(s.name, "")) for s in self.registry.specs()]
        )

    async def DecideApproval(
        self, request: service_pb2.DecideApprovalRequest, context: Context
    ) -> service_pb2.DecideApprovalResponse:
        run, sidecar = await self._locate(request.run_id, context, Access.DECIDE)
        try:
            await shared_calls.decide(self, run, sidecar, request)
        except SidecarError as exc:
            await abort(context, exc)
        return service_pb2.DecideApprovalResponse()

    async def ListRuns(
        self, request: service_pb2.ListRunsRequest, context: Context
    ) -> service_pb2.ListRunsResponse:
        try:
            return await shared_calls.list_runs(self, request)
        except SidecarError as exc:
            await abort(context, exc)

    # -- streaming -------------------------------------------------------------------------

    async def StreamToolLoop(
        self, request: service_pb2.StreamToolLoopRequest, context: Context
    ) -> None:
        stream = FrameQueue()
        try:
            await self.want_tools(  # UNAVAILABLE: a server is down
                request.spec.tool_names, no_server_tools=request.spec.no_server_tools
            )
            await self.claim_id(request.spec.run_id)
            run = self.start_run(
                await read_request(request.spec, self.config, self.openings),
                context,
                sink=stream,
                spec_bytes=request.spec.ByteSize(),
            )
        except SidecarError as exc:
            await abort(context, exc)
        if request.stream_deltas:
            run.log.stream_deltas(stream)
        limit = self.batch_limit if request.batch_events else 0
        finished = False
        try:
            while items := await stream.get_many(limit):
                await context.write(batch(items))
            finished = True
        finally:
            run.log.unsubscribe(stream)
            if not finished:
                self.abandoned(run, context, "the client cancelled its StreamToolLoop call")
        await end_if_lost(run, context)

    async def WatchRun(self, request: service_pb2.WatchRunRequest, context: Context) -> None:
        if not self.config.allow_unacknowledged_watch:
            await abort(
                context,
                SidecarError.out_of_order(
                    "this sidecar serves FollowRun, not WatchRun (allow_unacknowledged_watch "
                    "is false): follow the run with acknowledgements"
                ),
            )
        run, cursor = await self.follow(request.run_id, request.after_sequence, context)
        if request.stream_deltas:
            run.log.stream_deltas(cursor)
        limit = self.watch_batch_bytes if request.batch_events else 0
        try:
            while items := await cursor.get_many(limit):
                await context.write(batch(items))
        finally:
            self.manager.watchers.unfollow(run, cursor)
        await end_if_dropped(
            run, cursor, context, self.manager.watcher_queue_size, self.config.watcher_stall_s
        )

    async def FollowRun(self, request_iterator: Any, context: Context) -> None:
        await follow.serve(self, context)

    async def Session(self, request_iterator: Any, context: Context) -> None:
        await session.serve(self, context)

    # -- shared with the Session handler -----------------------------------------------------

    async def want_tools(self, tool_names: Sequence[str], *, no_server_tools: bool = False) -> None:
        """Start the lazy MCP servers a run offered ``tool_names`` (empty: all) may use; a run
        with ``no_server_tools`` uses none."""
        if self.tools_wanted is not None and not no_server_tools:
            await self.tools_wanted(tool_names)

    async def claim_id(self, run_id: str) -> None:
        """With a shared store, refuse another sidecar's run id as a local one (see
        ``SharedRuns.claim``); a finished run of the caller's own is replaced."""
        if self.manager.shared and run_id and self.manager.get(run_id) is None:
            await self.manager.shared.claim(run_id, current_caller().name, self.manager.store)

    def start_run(
        self,
        request: RunRequest,
        context: Context,
        *,
        sink: FrameSink | None = None,
        host: ClientHost | None = None,
        client_tools: Sequence[ToolSpec] = (),
        client_llm: bool = False,
        answers_approvals: bool = True,
        spec_bytes: int = 0,
    ) -> Run:
        """Assemble and start the run ``request`` asks for; ``SidecarError`` if it cannot.

        ``answers_approvals``: whether the stream behind ``sink`` can answer approvals (a
        Session that did not set ``handles_approvals`` cannot). ``spec_bytes`` is the size of
        the ``RunSpec`` it came in: one that may be too large for its ``run_started`` event to
        fit in a message is measured exactly, and refused.

        The run belongs to the calling identity, runs under the governance policy named for
        it (``""``: the global ``[policy]``) and counts against its run quotas.
        """
        caller = current_caller()
        governance = self.config.policy_named(caller.policy)  # checked to exist at start
        assembled = self.assembler.assemble(
            request,
            call_deadline_s=context.time_remaining(),
            host=host,
            client_tools=client_tools,
            client_llm=client_llm,
            policy=governance,
            principal=caller.name,
        )
        if spec_bytes + _SPEC_SLACK > self.frame_limit:
            check_started_fits(assembled, self.frame_limit, self.config.max_message_bytes)
        metadata = {
            str(key): value
            for key, value in (context.invocation_metadata() or ())
            if isinstance(value, str)
        }
        hosted = "session" if host is not None else "server"
        resume = ResumeInfo(hosted, caller.policy, assembled.timeout_s, request.detach)
        return self.manager.start(
            assembled,
            sink=sink,
            metadata=metadata,
            sink_answers_approvals=answers_approvals,
            owner=caller.name,
            policy=governance,
            resume_info=resume.to_json(),
        )

    def reassemble(
        self,
        run: Run,
        info: ResumeInfo,
        resumption: Resumption,
        opening: tuple[SessionOpening, ClientHost] | None = None,
    ) -> AssembledRun:
        """``run`` assembled again from its ``run_started`` spec, to go on from its log after
        a restart (``RunManager.open``; a Session run with the ``opening`` its client
        re-attached with); ``SidecarError`` if it no longer can (its policy, profile or tools
        are gone). A scripted LLM goes on after the answers the log already holds."""
        return self.assembler.reassemble(run.request, run.owner, info, resumption, opening)

    def abandoned(self, run: Run, context: Context, reason: str, *, force: bool = False) -> None:
        """The stream that started ``run`` ended early: cancel the run unless it may go on."""
        if run.ended or (run.detach and not force):
            return
        remaining = context.time_remaining()
        if remaining is not None and remaining <= DEADLINE_SLACK_S:
            # The client gave up at (or, by its own clock, just before) the deadline: the
            # run's own timer, set to the same instant, ends it as DEADLINE.
            return
        self.manager.cancel(run, reason)

    async def follow(self, run_id: str, after: int, context: Context) -> tuple[Run, LogCursor]:
        """A watcher's cursor on run ``run_id`` after sequence ``after``, or the call ends."""
        run = await self._require(run_id, context)
        if after > run.last_sequence and run.finished:
            await abort(
                context,
                SidecarError.invalid(
                    f"after_sequence {after} is past the run's last event ({run.last_sequence})"
                ),
            )
        # Past the live end, the cursor simply waits for the run to get there. A watcher who
        # may not decide the run's approvals does not make them wait for an answer.
        caller = current_caller()
        decides = caller.may(Access.DECIDE, run.owner) and (
            run.approvals is None or run.approvals.refusal(caller.name) is None
        )
        return run, self.manager.watchers.follow(run, after, decides=decides)

    def require(self, run_id: str, access: Access = Access.READ) -> Run:
        """The run ``run_id``, if the calling identity may ``access`` it (it owns it, or has a
        role that grants it); else ``NOT_FOUND``, the same as for an unknown id."""
        caller = current_caller()
        return self.manager.require(run_id, lambda run: caller.may(access, run.owner))

    async def _require(self, run_id: str, context: Context, access: Access = Access.READ) -> Run:
        return (await self._locate(run_id, context, access))[0]

    async def _locate(
        self, run_id: str, context: Context, access: Access = Access.READ
    ) -> tuple[Run, str]:
        """The run, and the id of the other sidecar sharing the store that runs it (empty: a
        run of this sidecar's); see ``shared_calls.locate``."""
        try:
            return await shared_calls.locate(self, run_id, access)
        except SidecarError as exc:
            await abort(context, exc)

"""``Gateway``: the operations a caller asks of the sidecar, in plain values.

Starting a run (the lazy MCP servers its tools need, its id checked against the fleet, its
assembly, its admission), finding one and acting on it wherever it lives (``RunDirectory``:
cancel, decide, watch, list), and what happens to a run whose starting stream ends early. A
caller is the ``Identity`` the transport authenticated; the call's deadline comes as the
seconds left of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from cleveragents.sidecar.approvals import own_run_refusal
from cleveragents.sidecar.assembly import AssembledRun, RunAssembler
from cleveragents.sidecar.config import SidecarConfig
from cleveragents.sidecar.errors import SidecarError
from cleveragents.sidecar.fleet.directory import Decision, RunDirectory, RunHandle
from cleveragents.sidecar.fleet.setup import is_redis_url
from cleveragents.sidecar.gateway.bounds import check_started_fits
from cleveragents.sidecar.gateway.sessions import DEADLINE_SLACK_S, Reattach, SessionRuns
from cleveragents.sidecar.gateway.values import Following, McpState, SidecarStatus
from cleveragents.sidecar.hosted import ClientHost
from cleveragents.sidecar.identity import Access, Identity, roles_granting
from cleveragents.sidecar.runs import FrameSink, Run, RunManager, WatchCursor
from cleveragents.sidecar.runs.recovery import ResumeInfo
from cleveragents.tool import Resumption, ToolRegistry, ToolSpec
from cleveragents.wire import RunRequest, RunState, RunSummary, SessionOpening, event_limit

__all__ = ["NO_LAZY_TOOLS", "Gateway", "LazyTools"]

#: A spec this much under the frame limit cannot make ``run_started`` too large, whatever the
#: sidecar adds (run id, iteration limit, thousands of tool names): nearer, it is measured.
_SPEC_SLACK = 512 * 1024
#: ``ListRuns`` without a limit lists this many.
_LISTED = 100


class LazyTools(Protocol):
    """Server-side tools that come up on demand (MCP servers started lazily)."""

    @property
    def origins(self) -> Mapping[str, str]:
        """Where each tool comes from, by name (``mcp:<server>``); the registry's own: absent."""
        ...

    async def wanted(self, tool_names: Sequence[str]) -> None:
        """Start the servers whose tools ``tool_names`` (empty: all) may select, and wait."""
        ...

    def states(self) -> list[tuple[str, bool, int]]:
        """Each server's name, whether it is connected, and its failures so far."""
        ...


class _NoLazyTools:
    """A sidecar without MCP servers: every tool is in its registry from the start."""

    @property
    def origins(self) -> Mapping[str, str]:
        return {}

    async def wanted(self, tool_names: Sequence[str]) -> None:
        return None

    def states(self) -> list[tuple[str, bool, int]]:
        return []


NO_LAZY_TOOLS: LazyTools = _NoLazyTools()


class Gateway:
    """The sidecar's operations. Server-side tools come from ``registry`` (and ``tools``);
    runs live in ``manager`` and, with a fleet, on other sidecars (``directory``)."""

    def __init__(
        self,
        config: SidecarConfig,
        registry: ToolRegistry,
        manager: RunManager,
        directory: RunDirectory,
        tools: LazyTools = NO_LAZY_TOOLS,
    ) -> None:
        self.config = config
        self.registry = registry
        self.manager = manager
        self.directory = directory
        self.tools = tools
        self.assembler = RunAssembler(config, registry)
        #: The largest event one message may carry.
        self.frame_limit = event_limit(config.limits.max_message_bytes)
        self.sessions = SessionRuns(config, manager, directory, self.assembler, self.abandoned)

    # -- tools ---------------------------------------------------------------------------------

    async def want_tools(self, tool_names: Sequence[str]) -> None:
        """Start the lazy MCP servers a run offered ``tool_names`` (empty: all) may use;
        ``UNAVAILABLE`` if one cannot start."""
        await self.tools.wanted(tool_names)

    async def tool_specs(self) -> list[tuple[ToolSpec, str]]:
        """Every tool this sidecar serves (its lazy servers started), with where it comes
        from (``""``: the sidecar's own)."""
        await self.tools.wanted(())
        origins = self.tools.origins
        return [(spec, origins.get(spec.name, "")) for spec in self.registry.specs()]

    # -- starting a run --------------------------------------------------------------------------

    async def start(
        self,
        caller: Identity,
        request: RunRequest,
        *,
        deadline_s: float | None,
        metadata: Mapping[str, str] | None = None,
        sink: FrameSink | None = None,
        host: ClientHost | None = None,
        client_tools: Sequence[ToolSpec] = (),
        client_llm: bool = False,
        answers_approvals: bool = True,
        spec_bytes: int = 0,
    ) -> Run:
        """Assemble and start the run ``request`` asks for; ``SidecarError`` if it cannot.

        ``deadline_s`` is what is left of the starting call's deadline; ``metadata`` its
        gRPC metadata (for the observers). ``sink`` gets the run's frames from the first;
        ``answers_approvals``: whether the stream behind it can answer approvals (a Session
        that did not set ``handles_approvals`` cannot). A Session's ``host`` serves
        ``client_tools`` and, with ``client_llm``, the LLM. ``spec_bytes`` is the size of the
        ``RunSpec`` it came in: one that may be too large for its ``run_started`` event to fit
        in a message is measured exactly, and refused.

        The run belongs to ``caller``, runs under the governance policy named for it (``""``:
        the global ``[policy]``) and counts against its run quotas.
        """
        if not request.no_server_tools:  # a run that uses none starts no server
            await self.want_tools(request.tool_names)
        await self.directory.reserve(request.run_id, caller.name)
        governance = self.config.policy_named(caller.policy)  # checked to exist at start
        assembled = self.assembler.assemble(
            request,
            call_deadline_s=deadline_s,
            host=host,
            client_tools=client_tools,
            client_llm=client_llm,
            policy=governance,
            principal=caller.name,
        )
        if spec_bytes + _SPEC_SLACK > self.frame_limit:
            check_started_fits(assembled, self.frame_limit, self.config.limits.max_message_bytes)
        hosted = "session" if host is not None else "server"
        resume = ResumeInfo(hosted, caller.policy, assembled.timeout_s, request.detach)
        return self.manager.start(
            assembled,
            sink=sink,
            metadata=metadata or {},
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
        a restart (``RunManager.open``: the gateway is its ``Resumer``); ``SidecarError`` if
        it no longer can (its policy, profile or tools are gone)."""
        return self.assembler.reassemble(run.request, run.owner, info, resumption, opening)

    def abandoned(
        self, run: Run, deadline_s: float | None, reason: str, *, force: bool = False
    ) -> None:
        """The stream that started ``run`` ended early (``deadline_s`` left of its call):
        cancel the run unless it may go on (it is detached, and not ``force``)."""
        if run.ended or (run.detach and not force):
            return
        if deadline_s is not None and deadline_s <= DEADLINE_SLACK_S:
            # The client gave up at (or, by its own clock, just before) the deadline: the
            # run's own timer, set to the same instant, ends it as DEADLINE.
            return
        self.manager.cancel(run, reason)

    def stop(self, run: Run, reason: str) -> None:
        """Cancel ``run``, which the stream attached to it asks to end (or broke)."""
        self.manager.cancel(run, reason)

    # -- a run wherever it lives -------------------------------------------------------------

    async def locate(
        self, caller: Identity, run_id: str, access: Access = Access.READ
    ) -> RunHandle:
        """The run ``run_id`` wherever it lives, if ``caller`` may ``access`` it (it owns it,
        or has a role that grants it); else ``NOT_FOUND``, the same as for an unknown id, so
        that ids do not leak; but ``PERMISSION_DENIED`` for a run the caller may read (it
        knows the run exists) and not cancel or decide."""
        handle = await self.directory.locate(run_id, lambda owner: caller.may(access, owner))
        if handle is not None:
            return handle
        if access is not Access.READ and await self.directory.locate(
            run_id, lambda owner: caller.may(Access.READ, owner)
        ):
            doing = "cancel it" if access is Access.CONTROL else "decide its approvals"
            raise SidecarError.denied(
                f"identity {caller.name!r} may read run {run_id!r} but not {doing}: that needs "
                f"the {' or '.join(roles_granting(access))} role, or owning the run"
            )
        raise SidecarError.not_found(f"no run with id {run_id!r} (unknown, or expired)")

    async def cancel(self, caller: Identity, run_id: str, reason: str) -> RunState:
        """Cancel the run (waiting a moment for its end); its state then."""
        handle = await self.locate(caller, run_id, Access.CONTROL)
        return await handle.cancel(reason or "cancelled by CancelRun")

    async def decide(
        self, caller: Identity, run_id: str, call_id: str, approved: bool, reason: str
    ) -> None:
        """Decide the run's call ``call_id`` as ``caller``: its own run's only if its policy
        lets an identity decide the approvals of its runs (checked before a decision travels
        to another sidecar)."""
        handle = await self.locate(caller, run_id, Access.DECIDE)
        policy = self.config.policy_named(caller.policy)
        if caller.name == handle.run.owner and (
            refused := own_run_refusal(policy.self_approval, policy.where, caller.name, run_id)
        ):
            raise SidecarError.denied(refused)
        await handle.decide(Decision(call_id, approved, reason, caller.name))

    async def runs(self, caller: Identity, limit: int) -> list[RunSummary]:
        """The runs ``caller`` may read, newest first, at most ``limit`` (0: 100): live,
        kept, and in a fleet the other sidecars' recent ones."""
        return [_summary(handle.run) for handle in await self.listed(caller, limit)]

    async def listed(self, caller: Identity, limit: int) -> list[RunHandle]:
        """The runs of ``runs``, as handles (each says where it lives), newest first."""
        if limit < 0:
            raise SidecarError.invalid("limit must not be negative")
        limit = limit or _LISTED
        handles = [
            handle
            for handle in await self.directory.runs(limit)
            if caller.may(Access.READ, handle.run.owner)
        ]
        handles.sort(key=lambda handle: -handle.run.started_at)
        return handles[:limit]

    async def watch(
        self, caller: Identity, run_id: str, after: int, *, deltas: bool = False
    ) -> tuple[Run, WatchCursor]:
        """A watcher's cursor on run ``run_id`` after sequence ``after`` (past the live end,
        the cursor waits for the run to get there); ``deltas``: it reads the run's live LLM
        deltas too. A watcher who may not decide the run's approvals does not make them wait
        for an answer. ``unwatch`` it when done."""
        following = await self.follow(caller, run_id, after, deltas=deltas)
        return following.run, following.cursor

    async def follow(
        self, caller: Identity, run_id: str, after: int, *, deltas: bool = False
    ) -> Following:
        """``watch``, with where the run lives and what ``caller`` may do to it. ``unwatch``
        its cursor when done."""
        handle = await self.locate(caller, run_id)
        run = handle.run
        if after > run.last_sequence and run.finished:
            raise SidecarError.invalid(
                f"after_sequence {after} is past the run's last event ({run.last_sequence})"
            )
        decides = self.may_decide(caller, run)
        cursor = handle.watch(after, decides=decides)
        if deltas:
            run.log.stream_deltas(cursor)
        cancels = caller.may(Access.CONTROL, run.owner)
        return Following(run, cursor, handle.sidecar, decides, cancels)

    def may_decide(self, caller: Identity, run: Run) -> bool:
        """Whether ``caller`` may decide ``run``'s approvals: a role or ownership lets it, and
        the run's own approvals do not refuse it (its policy forbids deciding one's own)."""
        return caller.may(Access.DECIDE, run.owner) and (
            run.approvals is None or run.approvals.refusal(caller.name) is None
        )

    def status(self) -> SidecarStatus:
        """The sidecar at a glance (a console's status strip)."""
        manager, url = self.manager, self.config.store.url
        store = "memory" if not url else "redis" if is_redis_url(url) else "sqlite"
        return SidecarStatus(
            serving=manager.accepting and manager.store_failure is None,
            draining=not manager.accepting,
            live_runs=manager.live_count,
            store=store,
            store_failure=manager.store_failure,
            mcp_servers=tuple(McpState(*state) for state in self.tools.states()),
            sidecar_id=self.directory.fleet.sidecar_id,
        )

    def unwatch(self, run: Run, cursor: WatchCursor) -> None:
        """The watcher of ``cursor`` is gone."""
        self.manager.watchers.unwatch(run, cursor)

    def drop_watcher(self, run: Run, cursor: WatchCursor, reason: str) -> None:
        """Drop the watcher of ``cursor`` (its RPC's own rule: ``reason``), counted and logged."""
        self.unwatch(run, cursor)
        self.manager.watchers.count_dropped(run, reason)

    # -- Session runs ------------------------------------------------------------------------

    def check_self_approval(self, caller: Identity) -> None:
        """``PERMISSION_DENIED`` for a Session of ``caller`` that would answer its own run's
        approvals under a policy that forbids it: before its run starts, rather than leave
        its answers refused."""
        policy = self.config.policy_named(caller.policy)
        if not policy.self_approval:
            raise SidecarError.denied(
                f"start.handles_approvals: {policy.where}.self_approval = false, so this "
                "identity may not decide the approvals of the runs it starts; leave "
                "handles_approvals unset and let an identity with the approver or admin role "
                "decide them (DecideApproval, `cleveragents-sidecar approve`)"
            )

    def session_gone(
        self, run: Run, host: ClientHost, deadline_s: float | None, hosts: bool
    ) -> None:
        """The stream of the Session run ``run`` ended early (``SessionRuns.gone``)."""
        self.sessions.gone(run, host, deadline_s, hosts)

    async def reattach(self, caller: Identity, ask: Reattach) -> tuple[Run, ClientHost | None]:
        """The Session run ``ask`` re-attaches to, for ``caller`` (``SessionRuns.reattach``)."""
        return await self.sessions.reattach(caller, ask)


def _summary(run: Run) -> RunSummary:
    return RunSummary(
        run_id=run.run_id,
        state=run.state,
        stop_reason=run.stop_reason,
        last_sequence=run.last_sequence,
        started_at=run.started_at,
        finished_at=run.finished_at,
        iterations=run.iterations,
        tool_calls=run.tool_calls,
        prompt=run.request.prompt[:200],
    )

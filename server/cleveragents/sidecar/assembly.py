"""Assembly: from a client's ``RunRequest`` to a run ready to start, in one place.

Every check a request must pass before it becomes a run happens here, in this order: the
prompt, the iteration limit against the sidecar's cap, the tools it names (and whether its
client's tools may shadow them), its LLM profile and model, the tools its client hosts, its
sandbox root (``sandbox_roots.py``: resolved, and allowed by the operator), its automation
profile. The governance policy it runs under decides the "may": a request beyond it is
``PERMISSION_DENIED`` naming the rule. The result holds the runtime (registry,
runner, LLM caller, governance), the context it runs in, its deadline, its approvals broker,
and the request as accepted, defaults filled in, which ``run_started`` reports.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from cleveragents.sidecar.approvals import ApprovalBroker
from cleveragents.sidecar.config import Policy, ProfileConfig, SidecarConfig
from cleveragents.sidecar.config.settings import PROVIDER_KINDS
from cleveragents.sidecar.errors import SidecarError
from cleveragents.sidecar.hosted import ClientHost, ClientLLMCaller
from cleveragents.sidecar.llm_profiles import profile_name, resolve_llm
from cleveragents.sidecar.output_schemas import prepare_output
from cleveragents.sidecar.runs.recovery import ResumeInfo, responses_logged
from cleveragents.sidecar.sandbox_roots import SandboxRoots
from cleveragents.sidecar.secrets import RedactingRunner
from cleveragents.tool import (
    DEFAULT_MAX_ITERATIONS,
    DEFAULT_MAX_OUTPUT_RETRIES,
    AutomationProfile,
    LLMCaller,
    Resumption,
    RunBudget,
    ScriptedLLMCaller,
    ToolActorContext,
    ToolCallingRuntime,
    ToolLimits,
    ToolRegistry,
    ToolRunner,
    ToolSpec,
    UnknownToolError,
)
from cleveragents.wire import RunRequest, SessionOpening

__all__ = ["AssembledRun", "RunAssembler"]


@dataclass(frozen=True, slots=True)
class AssembledRun:
    """A run ready to start.

    ``request`` is the request as accepted: its iteration limit, LLM profile and automation
    profile resolved. ``timeout_s`` is the time to the starting call's deadline (``None``:
    none); the run's wall-clock budget is in the runtime's ``RunBudget``, which ends the run as
    a limit rather than a cancellation.
    """

    request: RunRequest
    runtime: ToolCallingRuntime
    context: ToolActorContext
    timeout_s: float | None
    approvals: ApprovalBroker
    profile: ProfileConfig
    automation: AutomationProfile
    #: The tools the Session's client hosts (none for other runs).
    hosted_tools: frozenset[str] = frozenset()


class RunAssembler:
    """Turns requests into runs with the sidecar's configuration and server-side tools."""

    def __init__(self, config: SidecarConfig, registry: ToolRegistry) -> None:
        self.config = config
        self.registry = registry
        self.limits = ToolLimits(config.tool_limits) if config.tool_limits else None
        self.sandbox_roots = SandboxRoots(config)
        #: Values no tool record may carry (the token, provider keys); set when serving starts.
        self.secrets: tuple[str, ...] = ()

    def assemble(
        self,
        request: RunRequest,
        *,
        call_deadline_s: float | None,
        host: ClientHost | None = None,
        client_tools: Sequence[ToolSpec] = (),
        client_llm: bool = False,
        policy: Policy | None = None,
        principal: str = "",
        recorded: bool = False,
    ) -> AssembledRun:
        """The run ``request`` asks for; ``SidecarError`` says why it cannot be.

        ``call_deadline_s`` is the time left before the starting call's deadline. A session's
        ``host`` serves ``client_tools`` and, with ``client_llm``, the LLM. ``policy`` (default:
        the global one) is what the caller may ask for; ``principal`` (who calls) keeps its
        client tools' ``tool_limits`` apart from everyone else's. ``recorded``: ``request`` is
        a ``run_started`` spec read back from the run's log (see ``reassemble``).
        """
        config = self.config
        policy = policy if policy is not None else config.policy
        if not request.prompt.strip():
            raise SidecarError.invalid("spec.prompt must not be empty")
        if request.max_iterations < 0:
            raise SidecarError.invalid("spec.max_iterations must be 0 (the default) or more")
        cap = config.limits.max_iterations_cap
        if request.max_iterations > cap:
            raise SidecarError.invalid(
                f"spec.max_iterations {request.max_iterations} exceeds this sidecar's cap of {cap}"
            )
        max_iterations = request.max_iterations or min(DEFAULT_MAX_ITERATIONS, cap)
        if request.output is not None and not request.output.prepared:
            prepare_output(request.output, config)  # a run resumed from its log's spec
        registry = self._registry_for(request, client_tools, policy, recorded=recorded)
        _check_llm(request, config, policy, client_llm)
        profile, llm, router = resolve_llm(request.llm, config, client_llm=client_llm)
        if host is not None:
            try:
                host.register_tools(registry, client_tools)
            except ValueError as exc:
                raise SidecarError.invalid(f"start.tools: {exc}") from None
            if llm is None:
                llm = ClientLLMCaller(host)
        caller = _require_llm(llm)
        given = request.context if request.context is not None else ToolActorContext()
        root = self.sandbox_roots.resolve(given.sandbox_root)
        if root != given.sandbox_root:
            given = dataclasses.replace(given, sandbox_root=root)
        automation = self._automation_profile(given.automation_profile, policy)
        budget = request.budget or RunBudget()
        if request.max_wall_clock_s is not None:
            budget = dataclasses.replace(budget, max_wall_clock_s=request.max_wall_clock_s)
        approvals = ApprovalBroker(
            timeout_s=config.approvals.timeout_s,
            approve_on_timeout=config.approvals.approve_on_timeout,
            unattended_timeout_s=config.approvals.unattended_timeout_s,
            self_approval=policy.self_approval,
            policy=policy.where,
        )
        limits = self.limits
        if limits is not None and client_tools:
            origin = f"client:{principal}"
            limits = limits.for_origins({spec.name: origin for spec in client_tools})
        # Redaction wraps every call of a run: a sidecar that knows no secret skips it.
        timeout_s = config.limits.default_tool_timeout_s
        runner = (
            RedactingRunner(
                registry, secrets=self.secrets, default_timeout_s=timeout_s, limits=limits
            )
            if self.secrets
            else ToolRunner(registry, default_timeout_s=timeout_s, limits=limits)
        )
        runtime = ToolCallingRuntime(
            registry,
            runner,
            caller,
            max_iterations,
            router,
            profile=automation,
            approver=approvals,
            approval_timeout_s=config.approvals.timeout_s,
            approve_on_timeout=config.approvals.approve_on_timeout,
            approval_help=approvals.how_to_answer,
            budget=budget,
            max_calls_per_response=config.limits.max_calls_per_response,
            output=request.output,
            max_output_retries=(
                DEFAULT_MAX_OUTPUT_RETRIES
                if request.max_output_retries is None
                else request.max_output_retries
            ),
        )
        # The run appends to its context's history: it gets a copy, the request keeps its own.
        context = dataclasses.replace(
            given,
            automation_profile=automation.name,
            tool_call_history=list(given.tool_call_history),
        )
        accepted = dataclasses.replace(
            request,
            max_iterations=max_iterations,
            llm=dataclasses.replace(request.llm, profile=profile.name),
            context=dataclasses.replace(given, automation_profile=automation.name),
        )
        return AssembledRun(
            accepted, runtime, context, call_deadline_s, approvals, profile, automation,
            frozenset(spec.name for spec in client_tools) if host is not None else frozenset(),
        )  # fmt: skip

    def _automation_profile(self, name: str, policy: Policy) -> AutomationProfile:
        profiles = self.config.all_automation_profiles()
        chosen = name or self.config.default_automation_profile
        if chosen not in profiles:
            known = ", ".join(sorted(profiles))
            raise SidecarError.not_found(
                f"unknown automation profile {chosen!r} in context.automation_profile; "
                f"configured: {known}"
            )
        if not policy.allows("automation_profiles", chosen):
            raise _denied(policy, "automation_profiles", f"automation profile {chosen!r}")
        return profiles[chosen]

    def _registry_for(
        self,
        request: RunRequest,
        client_specs: Sequence[ToolSpec],
        policy: Policy,
        *,
        recorded: bool,
    ) -> ToolRegistry:
        """The server tools the run offers: ``tool_names`` (empty: all), or none with
        ``no_server_tools``. A client tool's name conflicts only with a server tool the run
        offers, and then only ``allow_tool_shadowing`` lets the client's take its place.

        ``recorded``: the request is a ``run_started`` spec read back to resume the run,
        whose ``tool_names`` list every tool offered, the client's own among them (a name in
        both was the client's: the run was accepted so)."""
        client_names = {s.name for s in client_specs}
        tool_names = request.tool_names
        if request.no_server_tools:
            if named := [n for n in tool_names if not (recorded and n in client_names)]:
                raise SidecarError.invalid(
                    "spec.no_server_tools asks for none of the sidecar's tools, and "
                    f"spec.tool_names names {len(named)}: set one or the other"
                )
            return self.registry.subset(())
        offered = tool_names or self.registry.names()
        if not (recorded or policy.allow_tool_shadowing) and (
            shadowed := sorted(n for n in client_names.intersection(offered) if n in self.registry)
        ):
            name = shadowed[0]
            leave_out = (
                f"leave {name!r} out of spec.tool_names"
                if tool_names
                else "name the server tools the run wants in spec.tool_names"
            )
            raise SidecarError.denied(
                f"start.tools: client tool {name!r} has the name of a tool this sidecar serves "
                f"and this run offers, and {policy.where}.allow_tool_shadowing is false: "
                f"rename the client tool, {leave_out} (or set spec.no_server_tools), or the "
                "operator allows shadowing"
            )
        server_names = [n for n in offered if n not in client_names]
        try:
            return self.registry.subset(server_names)
        except UnknownToolError as exc:
            raise SidecarError.not_found(f"spec.tool_names: {exc}") from None

    def reassemble(
        self,
        request: RunRequest,
        owner: str,
        info: ResumeInfo,
        resumption: Resumption,
        opening: tuple[SessionOpening, ClientHost] | None = None,
    ) -> AssembledRun:
        """A run of ``owner`` assembled again from its ``run_started`` spec, to go on from its
        log after a restart (a Session run with the ``opening`` its client re-attached with);
        ``SidecarError`` if it no longer can (its policy, profile or tools are gone). A
        scripted LLM goes on after the answers the log already holds."""
        if info.policy and info.policy not in self.config.policies:
            raise SidecarError.not_found(f"its governance policy {info.policy!r} is gone")
        session, host = opening if opening is not None else (None, None)
        assembled = self.assemble(
            request,
            call_deadline_s=info.timeout_s,
            host=host,
            client_tools=session.tools if session is not None else (),
            client_llm=session is not None and session.client_llm,
            policy=self.config.policy_named(info.policy),
            principal=owner,
            recorded=True,
        )
        if isinstance(caller := assembled.runtime.llm_caller, ScriptedLLMCaller):
            caller.skip(responses_logged(resumption))
        return assembled


def _check_llm(
    request: RunRequest, config: SidecarConfig, policy: Policy, client_llm: bool
) -> None:
    """The LLM profile a run uses, and the ``llm.model`` it names, are ones its policy allows
    (a model override counts for provider profiles: the others have no model to pick)."""
    name = profile_name(request.llm, config, client_llm=client_llm)
    profiles = config.all_profiles()
    if name in profiles and not policy.allows("llm_profiles", name):
        raise _denied(policy, "llm_profiles", f"LLM profile {name!r}")
    model = request.llm.model
    profile = profiles.get(name)
    provider = profile is not None and profile.kind in PROVIDER_KINDS
    if model and provider and not policy.allows("llm_models", model):
        raise _denied(policy, "llm_models", f"llm.model {model!r}")


def _denied(policy: Policy, key: str, what: str) -> SidecarError:
    allowed = ", ".join(getattr(policy, key)) or "nothing"
    return SidecarError.denied(
        f"{what} is not allowed by the governance policy: {policy.where}.{key} allows {allowed}"
    )


def _require_llm(llm: LLMCaller | None) -> LLMCaller:
    if llm is None:  # pragma: no cover - resolve_llm only returns None for client LLMs
        raise SidecarError.invalid("this RPC cannot use a client-hosted LLM")
    return llm

"""Governance policies on a real sidecar: what a client may ask for, and its run quotas.

A request beyond a policy's rule is ``PERMISSION_DENIED`` naming the rule; a quota hit is
``RESOURCE_EXHAUSTED`` naming the quota and its limit. Neither leaves a run behind.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import grpc
import pytest

from cleveragents.client import AsyncSidecarClient, SidecarRpcError
from cleveragents.sidecar import (
    ClientConfig,
    ConfigError,
    Policy,
    ProfileConfig,
    Sidecar,
    SidecarConfig,
)
from cleveragents.sidecar.runs.quotas import RunQuotas
from cleveragents.tool import RunCompleted, ToolActorContext, ToolLimit, ToolRegistry, ToolSpec

from .conftest import (
    WAIT_S,
    ServerTools,
    SidecarFactory,
    call,
    collect,
    turn,
    until_tool_started,
)

Identified = Callable[..., Awaitable[Sidecar]]
ECHO_ONCE = [turn("", call("e1", "echo", text="hi")), turn("done")]
GATE_ONCE = [turn("", call("g1", "gate")), turn("done")]


async def refusal(awaitable: Any) -> tuple[grpc.StatusCode, str]:
    """The code and details a client call fails with (fails the test if it succeeds)."""
    try:
        async with asyncio.timeout(WAIT_S):
            await awaitable
    except SidecarRpcError as exc:
        return exc.code, exc.details
    raise AssertionError("the call succeeded")


def completed_result(events: list[Any]) -> Any:
    """The result of a run whose last event is ``run_completed``."""
    last = events[-1].event
    assert isinstance(last, RunCompleted)
    return last.result


def no_runs(sidecar: Sidecar) -> bool:
    """Whether the sidecar holds no run at all, live or finished."""
    return not sidecar.manager.live_runs() and not sidecar.manager.retained_runs()


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class NeverAnswers:
    """A client tool that never answers; ``invoked`` is set once the sidecar has called it."""

    def __init__(self) -> None:
        self.invoked = asyncio.Event()

    async def __call__(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        self.invoked.set()
        await asyncio.Event().wait()
        return {}


@pytest.fixture
async def identified(
    make_sidecar: SidecarFactory, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Awaitable[Sidecar]]:
    """Start sidecars whose clients ``a``, ``b`` and ``c`` are identities of their own, each
    with its token and the policy ``policies_of`` names for it (none: the global one)."""

    async def make(policies_of: Mapping[str, str] | None = None, **settings: Any) -> Sidecar:
        clients = {}
        for name in ("a", "b", "c"):
            monkeypatch.setenv(f"TEST_POLICY_TOKEN_{name.upper()}", f"{name}-policy-token-1")
            policy = (policies_of or {}).get(name, "")
            clients[name] = ClientConfig(
                name, token_env=f"TEST_POLICY_TOKEN_{name.upper()}", policy=policy
            )
        return await make_sidecar(clients=clients, **settings)

    return make


def as_caller(sidecar: Sidecar, name: str) -> AsyncSidecarClient:
    return AsyncSidecarClient(sidecar.address, token=f"{name}-policy-token-1")


# -- automation profiles ---------------------------------------------------------------------


async def test_full_auto_outside_the_allowed_profiles_is_refused_naming_the_rule(
    make_sidecar: SidecarFactory,
) -> None:
    sidecar = await make_sidecar(policy=Policy(automation_profiles=("supervised", "read_only")))
    async with AsyncSidecarClient(sidecar.address) as client:
        code, details = await refusal(
            client.run_tool_loop(
                "go", script=ECHO_ONCE, context=ToolActorContext(automation_profile="full_auto")
            )
        )
        allowed = await client.run_tool_loop(
            "go", script=ECHO_ONCE, context=ToolActorContext(automation_profile="supervised")
        )

    assert code is grpc.StatusCode.PERMISSION_DENIED
    assert details == (
        "automation profile 'full_auto' is not allowed by the governance policy: "
        "policy.automation_profiles allows supervised, read_only"
    )
    assert allowed.content == "done"
    assert len(sidecar.manager.retained_runs()) == 1  # the refused request left no run


# -- shadowing server tools ------------------------------------------------------------------


def echo(text: str) -> str:
    """The client's own echo."""
    return f"client:{text}"


async def test_client_tool_shadowing_a_server_tool_is_refused_by_default(
    make_sidecar: SidecarFactory, server_tools: ServerTools
) -> None:
    sidecar = await make_sidecar()
    async with AsyncSidecarClient(sidecar.address) as client:
        code, details = await refusal(collect(client.session("go", tools=[echo], script=ECHO_ONCE)))

    assert code is grpc.StatusCode.PERMISSION_DENIED
    assert "client tool 'echo' has the name of a tool this sidecar serves" in details
    assert "policy.allow_tool_shadowing is false" in details
    assert server_tools.echo_texts == []
    assert no_runs(sidecar)


async def test_client_tool_shadows_a_server_tool_when_the_policy_allows_it(
    make_sidecar: SidecarFactory, server_tools: ServerTools
) -> None:
    sidecar = await make_sidecar(policy=Policy(allow_tool_shadowing=True))
    async with AsyncSidecarClient(sidecar.address) as client:
        events = await collect(client.session("go", tools=[echo], script=ECHO_ONCE))

    [record] = completed_result(events).tool_call_history
    assert dict(record.output) == {"result": "client:hi"}
    assert server_tools.echo_texts == []
    assert events[0].event.tool_names.count("echo") == 1  # type: ignore[union-attr]


async def test_client_tool_named_like_a_server_tool_the_run_leaves_out_is_accepted(
    make_sidecar: SidecarFactory, server_tools: ServerTools
) -> None:
    # A runtime's own `echo` beside the server's `gate`: the server's echo is never offered.
    sidecar = await make_sidecar()
    async with AsyncSidecarClient(sidecar.address) as client:
        events = await collect(
            client.session("go", tools=[echo], script=ECHO_ONCE, tool_names=["gate"])
        )

    [record] = completed_result(events).tool_call_history
    assert dict(record.output) == {"result": "client:hi"}
    assert server_tools.echo_texts == []
    assert sorted(events[0].event.tool_names) == ["echo", "gate"]  # type: ignore[union-attr]


async def test_a_run_with_no_server_tools_offers_only_the_clients_own(
    make_sidecar: SidecarFactory, server_tools: ServerTools
) -> None:
    sidecar = await make_sidecar()
    async with AsyncSidecarClient(sidecar.address) as client:
        events = await collect(
            client.session("go", tools=[echo], script=ECHO_ONCE, no_server_tools=True)
        )

    [record] = completed_result(events).tool_call_history
    assert dict(record.output) == {"result": "client:hi"}
    assert server_tools.echo_texts == []
    assert events[0].event.tool_names == ("echo",)  # type: ignore[union-attr]


async def test_a_run_with_no_server_tools_and_no_client_tools_offers_none(
    make_sidecar: SidecarFactory, server_tools: ServerTools
) -> None:
    sidecar = await make_sidecar()
    async with AsyncSidecarClient(sidecar.address) as client:
        events = await collect(
            client.stream_tool_loop("go", script=ECHO_ONCE, no_server_tools=True)
        )

    assert events[0].event.tool_names == ()  # type: ignore[union-attr]
    [record] = completed_result(events).tool_call_history
    assert not record.success  # the model asked for a tool it was not offered
    assert server_tools.echo_texts == []


async def test_client_tool_named_like_a_server_tool_the_run_names_is_refused(
    make_sidecar: SidecarFactory, server_tools: ServerTools
) -> None:
    sidecar = await make_sidecar()
    async with AsyncSidecarClient(sidecar.address) as client:
        code, details = await refusal(
            collect(client.session("go", tools=[echo], script=ECHO_ONCE, tool_names=["echo"]))
        )

    assert code is grpc.StatusCode.PERMISSION_DENIED
    assert "client tool 'echo' has the name of a tool this sidecar serves and this run" in details
    assert "leave 'echo' out of spec.tool_names" in details
    assert no_runs(sidecar)


async def test_no_server_tools_together_with_tool_names_is_invalid(
    make_sidecar: SidecarFactory,
) -> None:
    sidecar = await make_sidecar()
    async with AsyncSidecarClient(sidecar.address) as client:
        code, details = await refusal(
            client.run_tool_loop("go", script=ECHO_ONCE, tool_names=["echo"], no_server_tools=True)
        )

    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert details == (
        "spec.no_server_tools asks for none of the sidecar's tools, and spec.tool_names names "
        "1: set one or the other"
    )
    assert no_runs(sidecar)


# -- LLM profiles and models -----------------------------------------------------------------

#: A provider profile the tests never reach: the policy refuses before any request is sent.
UNREACHABLE = ProfileConfig("gpt", "openai", model="gpt-small", base_url="http://127.0.0.1:9/v1")


async def test_llm_profile_outside_the_allow_list_is_refused(
    make_sidecar: SidecarFactory,
) -> None:
    sidecar = await make_sidecar(
        profiles={"gpt": UNREACHABLE}, policy=Policy(llm_profiles=("scripted",))
    )
    async with AsyncSidecarClient(sidecar.address) as client:
        code, details = await refusal(client.run_tool_loop("go", profile="gpt"))

    assert code is grpc.StatusCode.PERMISSION_DENIED
    assert details == (
        "LLM profile 'gpt' is not allowed by the governance policy: "
        "policy.llm_profiles allows scripted"
    )
    assert no_runs(sidecar)


async def test_llm_model_outside_the_allow_list_is_refused(
    make_sidecar: SidecarFactory,
) -> None:
    sidecar = await make_sidecar(
        profiles={"gpt": UNREACHABLE}, policy=Policy(llm_models=("gpt-small*",))
    )
    async with AsyncSidecarClient(sidecar.address) as client:
        code, details = await refusal(
            client.run_tool_loop("go", profile="gpt", model="gpt-expensive")
        )

    assert code is grpc.StatusCode.PERMISSION_DENIED
    assert details == (
        "llm.model 'gpt-expensive' is not allowed by the governance policy: "
        "policy.llm_models allows gpt-small*"
    )
    assert no_runs(sidecar)


# -- run quotas ------------------------------------------------------------------------------


async def test_concurrent_run_quota_refuses_the_next_run_until_one_ends(
    make_sidecar: SidecarFactory, server_tools: ServerTools
) -> None:
    sidecar = await make_sidecar(policy=Policy(max_concurrent_runs=1))
    async with AsyncSidecarClient(sidecar.address) as client:
        first = client.stream_tool_loop("hold", script=GATE_ONCE)
        seen = await until_tool_started(first, "gate")
        code, details = await refusal(client.run_tool_loop("next", script=ECHO_ONCE))
        server_tools.release.set()
        rest = await collect(first)
        after = await client.run_tool_loop("after", script=ECHO_ONCE)

    assert code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert details == (
        "principal 'default' already has 1 live run(s), as many as policy.max_concurrent_runs = 1 "
        "allows: retry once one ends"
    )
    assert completed_result([*seen, *rest]).content == "done"
    assert after.content == "done"
    assert len(sidecar.manager.retained_runs()) == 2
    assert sidecar.manager.stats.refused_runs == 1  # cleveragents_refused_runs_total


async def test_rate_quota_refuses_runs_beyond_it_until_tokens_come_back(
    make_sidecar: SidecarFactory,
) -> None:
    sidecar = await make_sidecar(policy=Policy(runs_per_minute=2))
    clock = FakeClock()
    sidecar.manager.quotas = RunQuotas(clock)
    async with AsyncSidecarClient(sidecar.address) as client:
        for _ in range(2):
            await client.run_tool_loop("go", script=ECHO_ONCE)
        code, details = await refusal(client.run_tool_loop("third", script=ECHO_ONCE))
        clock.now += 30.0  # 2 a minute: one token back every 30 s
        later = await client.run_tool_loop("later", script=ECHO_ONCE)

    assert code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert details == (
        "principal 'default' started more than policy.runs_per_minute = 2 runs in the last minute: "
        "retry in 30.0 s"
    )
    assert later.content == "done"
    assert len(sidecar.manager.retained_runs()) == 3


async def test_quotas_count_each_principal_apart(identified: Identified) -> None:
    sidecar = await identified(policy=Policy(runs_per_minute=1))
    async with as_caller(sidecar, "a") as a, as_caller(sidecar, "b") as b:
        await a.run_tool_loop("go", script=ECHO_ONCE)
        code, details = await refusal(a.run_tool_loop("again", script=ECHO_ONCE))
        other = await b.run_tool_loop("go", script=ECHO_ONCE)

    assert code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert details.startswith("principal 'a' started more than policy.runs_per_minute = 1")
    assert other.content == "done"


# -- named policies --------------------------------------------------------------------------


async def test_a_clients_named_policy_applies_to_its_runs_only(
    identified: Identified, server_tools: ServerTools
) -> None:
    sidecar = await identified(
        {"b": "trusted"}, policies={"trusted": Policy("trusted", allow_tool_shadowing=True)}
    )
    async with as_caller(sidecar, "b") as trusted, as_caller(sidecar, "c") as other:
        events = await collect(trusted.session("go", tools=[echo], script=ECHO_ONCE))
        code, details = await refusal(collect(other.session("go", tools=[echo], script=ECHO_ONCE)))

    [record] = completed_result(events).tool_call_history
    assert dict(record.output) == {"result": "client:hi"}
    assert code is grpc.StatusCode.PERMISSION_DENIED
    assert "policy.allow_tool_shadowing is false" in details


def test_a_client_naming_a_policy_that_does_not_exist_keeps_the_sidecar_from_starting() -> None:
    client = ClientConfig("b", token_env="TEST_POLICY_TOKEN_B", policy="missing")
    with pytest.raises(ConfigError, match=r"clients\.b\.policy names 'missing'"):
        SidecarConfig(clients={"b": client})


# -- tool limits per origin ------------------------------------------------------------------


async def test_client_tool_that_never_answers_does_not_hold_the_server_tools_limit(
    make_sidecar: SidecarFactory, server_tools: ServerTools
) -> None:
    sidecar = await make_sidecar(
        policy=Policy(allow_tool_shadowing=True),
        tool_limits={"echo": ToolLimit(max_concurrent=1)},
    )
    stuck = NeverAnswers()
    hosted = ToolRegistry()
    hosted.register(ToolSpec("echo"), stuck)
    async with (
        AsyncSidecarClient(sidecar.address) as b,
        AsyncSidecarClient(sidecar.address) as a,
        asyncio.TaskGroup() as group,
    ):
        hosting = group.create_task(collect(b.session("go", tools=hosted, script=ECHO_ONCE)))
        async with asyncio.timeout(WAIT_S):
            await stuck.invoked.wait()  # B's echo holds its slot and never gives it back
        result = await a.run_tool_loop("go", script=ECHO_ONCE, timeout=WAIT_S)
        hosting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await hosting

    [record] = result.tool_call_history
    assert record.success
    assert server_tools.echo_texts == ["hi"]

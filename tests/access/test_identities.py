"""Identities and run ownership on a real server: each client sees and acts on its own runs
only, unless a role grants more; the single shared token is one identity that owns all."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from cleveragents.client import AsyncSidecarClient, SidecarRpcError
from cleveragents.sidecar import ClientConfig, Policy, Sidecar, SidecarConfig
from cleveragents.sidecar.assembly import AssembledRun, RunAssembler
from cleveragents.sidecar.identity import Identity
from cleveragents.sidecar.transport.caller import current_caller
from cleveragents.sidecar.transport.rejections import Rejections
from cleveragents.tool import (
    ApprovalRequested,
    RunCompleted,
    RunEvent,
    RunStarted,
    ToolActorContext,
    ToolCallRecord,
)
from cleveragents.toolruntime.v1 import service_pb2, service_pb2_grpc
from cleveragents.wire import RunRequest, RunState
from tests.conftest import SANDBOX_ROOTS_ENV, captured_logs

#: Each identity's token, and the roles it has.
TOKENS = {"alice": "alice-token-0001", "bob": "bob-token-0002", "olga": "olga-token-0003",
          "april": "april-token-0004", "ada": "ada-token-0005"}  # fmt: skip
ROLES = {"olga": ["observer"], "april": ["approver"], "ada": ["admin"]}
SHARED = "the-one-shared-token"
WAIT_S = 20.0
Start = Callable[..., Awaitable[Sidecar]]


def clients() -> dict[str, ClientConfig]:
    return {
        name: ClientConfig(
            name, token_env=f"TEST_TOKEN_{name.upper()}", roles=frozenset(ROLES.get(name, ()))
        )
        for name in TOKENS
    }


@pytest.fixture
async def start(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Start]:
    for name, token in TOKENS.items():
        monkeypatch.setenv(f"TEST_TOKEN_{name.upper()}", token)
    monkeypatch.setenv("TEST_SHARED_TOKEN", SHARED)
    started: list[Sidecar] = []

    async def run(**settings: Any) -> Sidecar:
        options: dict[str, Any] = {
            "listen": "127.0.0.1:0",
            "clients": clients(),
            "sandbox_roots": (os.environ[SANDBOX_ROOTS_ENV],),
            **settings,
        }
        sidecar = Sidecar(SidecarConfig(**options))
        await sidecar.start()
        started.append(sidecar)
        return sidecar

    yield run
    for sidecar in started:
        await sidecar.stop(1.0)


def as_(sidecar: Sidecar, name: str) -> AsyncSidecarClient:
    return AsyncSidecarClient(sidecar.address, token=SHARED if name == "default" else TOKENS[name])


def write_then_done(path: str = "notes.md") -> list[dict[str, Any]]:
    arguments = {"path": path, "content": "alice's notes"}
    return [
        {"tool_calls": [{"id": "w1", "name": "write_file", "arguments": arguments}]},
        {"content": "done"},
    ]


async def finished_run(sidecar: Sidecar, owner: str, run_id: str, prompt: str) -> None:
    async with as_(sidecar, owner) as client:
        await client.run_tool_loop(prompt, script=[{"content": "secret plan"}], run_id=run_id)


@contextlib.asynccontextmanager
async def waiting_run(
    sidecar: Sidecar, owner: str, sandbox: Path, run_id: str = "gated"
) -> AsyncIterator[list[RunEvent]]:
    """``owner``'s run, live, its ``write_file`` waiting for approval; the body must end it
    (decide or cancel). Yields the events its stream has seen."""
    events: list[RunEvent] = []
    asked = asyncio.Event()
    context = ToolActorContext(sandbox_root=str(sandbox))

    async def follow(client: AsyncSidecarClient) -> None:
        with contextlib.suppress(SidecarRpcError):  # a run cancelled by the test
            async for streamed in client.stream_tool_loop(
                "write the notes", script=write_then_done(), context=context, run_id=run_id
            ):
                events.append(streamed.event)
                if isinstance(streamed.event, ApprovalRequested):
                    asked.set()

    async with as_(sidecar, owner) as client, asyncio.timeout(WAIT_S), asyncio.TaskGroup() as group:
        group.create_task(follow(client))
        await asyncio.wait_for(asked.wait(), WAIT_S)
        yield events


def outcome(events: list[RunEvent]) -> ToolCallRecord:
    """The record of the one call of a run that completed."""
    final = events[-1]
    assert isinstance(final, RunCompleted)
    return final.result.tool_call_history[0]


async def refused(call: Awaitable[Any]) -> SidecarRpcError:
    with pytest.raises(SidecarRpcError) as raised:
        await call
    return raised.value


async def test_another_client_gets_not_found_for_every_rpc_on_a_finished_run(
    start: Start,
) -> None:
    sidecar = await start()
    await finished_run(sidecar, "alice", "a1", "alice's secret prompt")
    async with as_(sidecar, "bob") as bob:
        unknown = await refused(bob.get_run("no-such-run"))
        errors = [
            await refused(bob.get_run("a1")),
            await refused(bob.cancel_run("a1")),
            await refused(bob.decide_approval("a1", "w1", approved=True)),
            await refused(anext(bob.watch("a1"))),
            await refused(anext(bob.run_history("a1"))),
        ]
    watch = await _raw_watch(sidecar, TOKENS["bob"], "a1")  # plain WatchRun, which no client uses
    assert unknown.code is grpc.StatusCode.NOT_FOUND
    for error in errors:
        assert error.code is grpc.StatusCode.NOT_FOUND
        assert error.details == unknown.details.replace("no-such-run", "a1")
    assert watch == (grpc.StatusCode.NOT_FOUND, unknown.details.replace("no-such-run", "a1"))


async def _raw_watch(sidecar: Sidecar, token: str, run_id: str) -> tuple[grpc.StatusCode, str]:
    """How a raw ``WatchRun`` of ``run_id`` with ``token`` ends."""
    async with grpc.aio.insecure_channel(sidecar.address) as channel:
        stub = service_pb2_grpc.ToolRuntimeServiceStub(channel)
        call = stub.WatchRun(
            service_pb2.WatchRunRequest(run_id=run_id),
            metadata=(("authorization", f"Bearer {token}"),),
        )
        try:
            async for _ in call:
                pass
        except grpc.aio.AioRpcError as exc:
            return exc.code(), exc.details() or ""
        return await call.code(), await call.details() or ""


async def test_list_runs_shows_a_client_only_its_own_runs_and_prompts(start: Start) -> None:
    sidecar = await start()
    await finished_run(sidecar, "alice", "a1", "alice's secret prompt")
    await finished_run(sidecar, "bob", "b1", "bob's prompt")
    async with as_(sidecar, "bob") as bob, as_(sidecar, "alice") as alice:
        seen_by_bob = [(r.run_id, r.prompt) for r in await bob.list_runs()]
        seen_by_alice = [r.run_id for r in await alice.list_runs()]
    assert seen_by_bob == [("b1", "bob's prompt")]
    assert seen_by_alice == ["a1"]


async def test_another_client_cannot_approve_or_cancel_a_live_gated_write(
    start: Start, tmp_path: Path
) -> None:
    sidecar = await start()
    async with (
        waiting_run(sidecar, "alice", tmp_path) as events,
        as_(sidecar, "bob") as bob,
        as_(sidecar, "alice") as alice,
    ):
        approve = await refused(bob.decide_approval("gated", "w1", approved=True))
        cancel = await refused(bob.cancel_run("gated"))
        reuse = await refused(bob.run_tool_loop("x", script=[{"content": "x"}], run_id="gated"))
        assert (await alice.get_run("gated")).state is RunState.RUNNING
        await alice.decide_approval("gated", "w1", approved=False, reason="mine")
    assert approve.code is cancel.code is grpc.StatusCode.NOT_FOUND
    assert reuse.code is grpc.StatusCode.ALREADY_EXISTS
    assert not (tmp_path / "notes.md").exists()
    assert outcome(events).error == "denied by rpc: mine"


async def test_reusing_another_clients_finished_run_id_is_refused_and_keeps_its_log(
    start: Start,
) -> None:
    sidecar = await start()
    await finished_run(sidecar, "alice", "a1", "alice's secret prompt")
    async with as_(sidecar, "bob") as bob:
        error = await refused(bob.run_tool_loop("bob's", script=[{"content": "x"}], run_id="a1"))
    async with as_(sidecar, "alice") as alice:
        info = await alice.get_run("a1")
        history = [e async for e in alice.run_history("a1")]
        # Its owner may still reuse it, as before.
        again = await alice.run_tool_loop("alice again", script=[{"content": "y"}], run_id="a1")
    assert error.code is grpc.StatusCode.ALREADY_EXISTS
    assert "choose another run_id" in error.details
    assert info.result is not None
    assert info.result.content == "secret plan"
    started = history[0].event
    assert isinstance(started, RunStarted)
    assert started.prompt == "alice's secret prompt"
    assert again.content == "y"


async def test_an_observer_watches_and_lists_every_run_but_cannot_cancel_or_approve(
    start: Start, tmp_path: Path
) -> None:
    sidecar = await start()
    await finished_run(sidecar, "alice", "a1", "alice's secret prompt")
    async with (
        waiting_run(sidecar, "bob", tmp_path) as _,
        as_(sidecar, "olga") as olga,
        as_(sidecar, "bob") as bob,
    ):
        listed = sorted(r.run_id for r in await olga.list_runs())
        got = await olga.get_run("a1")
        watched = [e async for e in olga.watch("a1")]
        history = [e async for e in olga.run_history("a1")]
        approve = await refused(olga.decide_approval("gated", "w1", approved=True))
        cancel = await refused(olga.cancel_run("gated"))
        await bob.decide_approval("gated", "w1", approved=False)
    assert listed == ["a1", "gated"]
    assert got.state is RunState.COMPLETED
    assert len(watched) == len(history) > 0
    # It knows the run exists: NOT_FOUND would say otherwise.
    assert approve.code is cancel.code is grpc.StatusCode.PERMISSION_DENIED
    assert cancel.details == (
        "identity 'olga' may read run 'gated' but not cancel it: that needs the admin role, or "
        "owning the run"
    )
    assert approve.details == (
        "identity 'olga' may read run 'gated' but not decide its approvals: that needs the "
        "approver or admin role, or owning the run"
    )
    assert not (tmp_path / "notes.md").exists()


async def test_an_approver_reads_and_decides_another_clients_run_but_cannot_cancel_it(
    start: Start, tmp_path: Path
) -> None:
    sidecar = await start()
    async with waiting_run(sidecar, "alice", tmp_path) as events, as_(sidecar, "april") as april:
        cancel = await refused(april.cancel_run("gated"))
        listed = [r.run_id for r in await april.list_runs()]
        state = (await april.get_run("gated")).state
        await april.decide_approval("gated", "w1", approved=True, reason="ok")
    assert cancel.code is grpc.StatusCode.PERMISSION_DENIED
    assert "identity 'april' may read run 'gated' but not cancel it" in cancel.details
    assert state is RunState.RUNNING
    assert listed == ["gated"]
    assert (tmp_path / "notes.md").read_text() == "alice's notes"
    assert outcome(events).success


async def test_an_admin_reads_decides_and_cancels_another_clients_runs(
    start: Start, tmp_path: Path
) -> None:
    sidecar = await start()
    await finished_run(sidecar, "bob", "b1", "bob's prompt")
    async with waiting_run(sidecar, "alice", tmp_path) as _, as_(sidecar, "ada") as ada:
        listed = sorted(r.run_id for r in await ada.list_runs())
        got = await ada.get_run("b1")
        watched = [e async for e in ada.watch("b1")]
        history = [e async for e in ada.run_history("b1")]
        # Past the ownership check: the run is found, only that call does not wait.
        decide = await refused(ada.decide_approval("gated", "no-such-call", approved=True))
        state = await ada.cancel_run("gated", reason="admin")
    assert listed == ["b1", "gated"]
    assert got.state is RunState.COMPLETED
    assert len(watched) == len(history) > 0
    assert decide.code is grpc.StatusCode.FAILED_PRECONDITION
    assert state is RunState.CANCELLED
    assert not (tmp_path / "notes.md").exists()


async def test_an_admin_cannot_erase_another_clients_log_by_reusing_its_id(start: Start) -> None:
    sidecar = await start()
    await finished_run(sidecar, "alice", "a1", "alice's secret prompt")
    async with as_(sidecar, "ada") as ada:
        error = await refused(ada.run_tool_loop("x", script=[{"content": "x"}], run_id="a1"))
        kept = await ada.get_run("a1")
    assert error.code is grpc.StatusCode.ALREADY_EXISTS
    assert kept.result is not None
    assert kept.result.content == "secret plan"


async def test_the_shared_token_is_one_identity_that_acts_on_every_run(
    start: Start, tmp_path: Path
) -> None:
    sidecar = await start(auth_token_env="TEST_SHARED_TOKEN")
    await finished_run(sidecar, "alice", "a1", "alice's secret prompt")
    async with waiting_run(sidecar, "bob", tmp_path) as _, as_(sidecar, "default") as operator:
        listed = sorted(r.run_id for r in await operator.list_runs())
        got = await operator.get_run("a1")
        await operator.decide_approval("gated", "w1", approved=True)
    assert listed == ["a1", "gated"]
    assert got.state is RunState.COMPLETED
    assert (tmp_path / "notes.md").exists()


async def test_with_only_the_shared_token_runs_behave_as_before(
    start: Start, tmp_path: Path
) -> None:
    sidecar = await start(auth_token_env="TEST_SHARED_TOKEN", clients={})
    await finished_run(sidecar, "default", "r1", "first")
    async with as_(sidecar, "default") as one, as_(sidecar, "default") as other:
        # Two connections with the one token: the same identity, so one may reuse the other's id.
        again = await other.run_tool_loop("second", script=[{"content": "z"}], run_id="r1")
        listed = [r.run_id for r in await one.list_runs()]
        await one.cancel_run("r1")
    assert again.content == "z"
    assert listed == ["r1"]


async def test_rejected_credentials_are_counted_and_logged_once_per_interval(
    start: Start,
) -> None:
    sidecar = await start(metrics_listen="127.0.0.1:0", auth_reject_log_interval_s=3600.0)
    with captured_logs() as logs:
        for token in ("wrong-1", "wrong-2", None):
            async with AsyncSidecarClient(sidecar.address, token=token) as stranger:
                error = await refused(stranger.list_runs())
                assert error.code is grpc.StatusCode.UNAUTHENTICATED
        async with as_(sidecar, "alice") as alice:
            await alice.list_runs()
    assert sidecar.metrics is not None
    assert sidecar.metrics.registry.get_sample_value("cleveragents_auth_rejected_total") == 3
    lines = [line for line in logs if line["event"] == "credentials rejected"]
    assert len(lines) == 1
    line = lines[0]
    assert (line["log_level"], line["reason"], line["method"]) == (
        "warning", "unknown token", "/cleveragents.toolruntime.v1.ToolRuntimeService/ListRuns"
    )  # fmt: skip
    assert line["peer"].startswith("ipv4:127.0.0.1:")


def test_the_next_line_after_an_interval_says_how_many_went_unlogged() -> None:
    now = [0.0]
    rejections = Rejections(10.0, clock=lambda: now[0])
    with captured_logs() as logs:
        for at in (0.0, 1.0, 2.0, 9.9, 10.0, 10.5):
            now[0] = at
            rejections.reject("ipv4:10.0.0.1:5", "/m", "no token")
    assert [line["not_logged_since_last_line"] for line in logs] == [0, 3]
    assert [line["rejected_total"] for line in logs] == [1, 5]
    assert rejections.count == 6


class RecordingAssembler:
    """The sidecar's own assembler, noting who calls when each run is assembled."""

    def __init__(self, real: RunAssembler) -> None:
        self.real = real
        self.callers: list[Identity] = []

    def assemble(self, request: RunRequest, **options: Any) -> AssembledRun:
        self.callers.append(current_caller())
        return self.real.assemble(request, **options)


async def test_start_run_knows_the_callers_name_and_policy_for_every_way_to_start(
    start: Start,
) -> None:
    policies = {
        name: ClientConfig(name, token_env=f"TEST_TOKEN_{name.upper()}", policy=f"{name}-policy")
        for name in ("alice", "bob")
    }
    sidecar = await start(
        clients=policies, policies={f"{n}-policy": Policy(f"{n}-policy") for n in ("alice", "bob")}
    )
    recording = RecordingAssembler(sidecar.gateway.assembler)
    sidecar.gateway.assembler = recording  # type: ignore[assignment]
    async with as_(sidecar, "alice") as alice, as_(sidecar, "bob") as bob:
        await alice.run_tool_loop("unary", script=[{"content": "a"}])
        [e async for e in bob.stream_tool_loop("stream", script=[{"content": "b"}])]
        [e async for e in alice.session("session", script=[{"content": "c"}])]
    assert [(c.name, c.policy) for c in recording.callers] == [
        ("alice", "alice-policy"), ("bob", "bob-policy"), ("alice", "alice-policy")
    ]  # fmt: skip


async def test_no_identitys_token_shows_in_a_tool_record(start: Start, tmp_path: Path) -> None:
    # From a file: no environment variable holds it, so only the credentials know it.
    (tmp_path / "carol.token").write_text("carol-file-token-0006\n")
    carol = ClientConfig("carol", token_file=str(tmp_path / "carol.token"))
    sidecar = await start(clients={**clients(), "carol": carol})
    script = [turn_echo("carol-file-token-0006 and " + TOKENS["bob"]), {"content": "done"}]
    async with as_(sidecar, "alice") as alice:
        result = await alice.run_tool_loop("leak", script=script)
    [record] = result.tool_call_history
    assert dict(record.output) == {"text": "[redacted] and [redacted]"}


def turn_echo(text: str) -> dict[str, Any]:
    """A script turn calling ``echo`` with ``text``."""
    return {"tool_calls": [{"id": "e1", "name": "echo", "arguments": {"text": text}}]}


async def test_an_observers_watch_does_not_keep_a_runs_approvals_waiting(
    start: Start, tmp_path: Path
) -> None:
    # alice's Session does not answer approvals, so her write_file is asked of whoever follows
    # the run; olga watches, but may not decide: the request is denied at once, as for a run
    # nobody follows, instead of waiting approval_timeout_s for an answer she cannot give.
    sidecar = await start(approval_timeout_s=60.0)
    release = asyncio.Event()

    async def hold() -> str:
        """Wait for the test."""
        await release.wait()
        return "held"

    arguments = {"path": "notes.md", "content": "x"}
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "h1", "name": "hold", "arguments": {}}]},
        {"tool_calls": [{"id": "w1", "name": "write_file", "arguments": arguments}]},
        {"content": "done"},
    ]
    context = ToolActorContext(sandbox_root=str(tmp_path))
    async with as_(sidecar, "alice") as alice, as_(sidecar, "olga") as olga:
        session = alice.session("w", tools=[hold], script=script, context=context, run_id="s1")
        async with asyncio.timeout(WAIT_S):
            async for streamed in session:  # up to the held call: olga then watches
                if getattr(streamed.event, "tool_name", "") == "hold":
                    break
            watched = olga.watch("s1")
            async for streamed in watched:
                if getattr(streamed.event, "tool_name", "") == "hold":
                    break
            release.set()
            rest = [streamed.event async for streamed in session]
            await watched.aclose()
    final = rest[-1]
    assert isinstance(final, RunCompleted)
    [written] = [r for r in final.result.tool_call_history if r.call_id == "w1"]
    assert not written.success
    assert "denied by policy" in (written.error or "")
    assert not (tmp_path / "notes.md").exists()

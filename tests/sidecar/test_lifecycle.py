"""The server's life: health, reflection, unix sockets, graceful shutdown and the CLI."""

from __future__ import annotations

import asyncio
import os
import stat
import time
from pathlib import Path
from typing import Any, cast

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from cleveragents.client import AsyncSidecarClient, SidecarClient, SidecarRpcError
from cleveragents.sidecar import ConfigError, Sidecar, SidecarConfig
from cleveragents.tool import RunCancelled, RunCompleted, StopReason
from cleveragents.toolruntime.v1 import events_pb2, service_pb2_grpc, types_pb2

from .conftest import (
    CLI,
    CLI_WAIT_S,
    WAIT_S,
    ServerTools,
    SidecarFactory,
    assert_well_formed,
    call,
    cli_sidecar,
    collect,
    drain_session,
    echo_script,
    read_until_invocation,
    run_spec,
    session_start,
    terminate,
    turn,
    until_tool_started,
)

SERVICE = "cleveragents.toolruntime.v1.ToolRuntimeService"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


async def check(channel: grpc.aio.Channel, service: str) -> int:
    stub: Any = health_pb2_grpc.HealthStub(channel)  # the stubs' types know no aio methods
    response = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=WAIT_S)
    assert isinstance(response, health_pb2.HealthCheckResponse)
    return response.status


class HealthWatch:
    """A ``Health.Watch`` stream of the whole server, read one status at a time."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        stub: Any = health_pb2_grpc.HealthStub(channel)
        self.call: Any = stub.Watch(health_pb2.HealthCheckRequest(service=""))

    async def next(self) -> int:
        async with asyncio.timeout(WAIT_S):
            response = await self.call.read()
        assert isinstance(response, health_pb2.HealthCheckResponse)
        return response.status


# -- health and reflection ---------------------------------------------------------------------


@pytest.mark.parametrize("service", ["", SERVICE])
async def test_health_reports_serving(channel: grpc.aio.Channel, service: str) -> None:
    assert await check(channel, service) == SERVING


async def test_health_of_an_unknown_service_is_not_found(channel: grpc.aio.Channel) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await check(channel, "no.such.Service")

    assert failure.value.code() == grpc.StatusCode.NOT_FOUND


async def test_health_turns_not_serving_when_stop_begins(
    sidecar: Sidecar, channel: grpc.aio.Channel, client: AsyncSidecarClient,
    server_tools: ServerTools,
) -> None:  # fmt: skip
    stream = client.stream_tool_loop("go", script=[turn("", call("g1", "gate")), turn("ok")])
    await until_tool_started(stream)
    watch = HealthWatch(channel)
    before = await watch.next()
    stopping = asyncio.create_task(sidecar.stop(WAIT_S))
    during = await watch.next()
    for_service = await check(channel, SERVICE)
    watch.call.cancel()
    server_tools.release.set()
    await collect(stream)
    await stopping

    assert (before, during, for_service) == (SERVING, NOT_SERVING, NOT_SERVING)


async def test_reflection_lists_the_services(channel: grpc.aio.Channel) -> None:
    stub: Any = reflection_pb2_grpc.ServerReflectionStub(cast(Any, channel))
    call_ = stub.ServerReflectionInfo()
    await call_.write(reflection_pb2.ServerReflectionRequest(list_services=""))
    async with asyncio.timeout(WAIT_S):
        response = await call_.read()
    await call_.done_writing()

    assert isinstance(response, reflection_pb2.ServerReflectionResponse)
    names = {s.name for s in response.list_services_response.service}
    assert names == {
        SERVICE,
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
    }


async def test_reflection_serves_the_service_descriptor(channel: grpc.aio.Channel) -> None:
    stub: Any = reflection_pb2_grpc.ServerReflectionStub(cast(Any, channel))
    call_ = stub.ServerReflectionInfo()
    await call_.write(reflection_pb2.ServerReflectionRequest(file_containing_symbol=SERVICE))
    async with asyncio.timeout(WAIT_S):
        response = await call_.read()
    await call_.done_writing()

    assert isinstance(response, reflection_pb2.ServerReflectionResponse)
    files = response.file_descriptor_response.file_descriptor_proto
    assert len(files) >= 1
    assert any(b"ToolRuntimeService" in f for f in files)


# -- unix socket ---------------------------------------------------------------------------


class TestUnixSocket:
    """The sidecar on a unix domain socket."""

    async def test_socket_file_is_private(
        self, make_sidecar: SidecarFactory, tmp_path: Path
    ) -> None:
        sidecar = await make_sidecar(listen=f"unix:{tmp_path}/s.sock")

        mode = os.stat(tmp_path / "s.sock").st_mode
        assert stat.S_ISSOCK(mode)
        assert stat.S_IMODE(mode) == 0o600
        assert sidecar.address == f"unix:{tmp_path}/s.sock"

    async def test_runs_over_the_unix_socket(
        self, make_sidecar: SidecarFactory, tmp_path: Path
    ) -> None:
        sidecar = await make_sidecar(listen=f"unix:{tmp_path}/s.sock")
        async with AsyncSidecarClient(sidecar.address) as client:
            result = await client.run_tool_loop("go", script=echo_script(2))

        assert result.content == "done"
        assert [dict(r.output) for r in result.tool_call_history] == [
            {"text": "t1"},
            {"text": "t2"},
        ]

    async def test_streams_over_the_unix_socket(
        self, make_sidecar: SidecarFactory, tmp_path: Path
    ) -> None:
        sidecar = await make_sidecar(listen=f"unix://{tmp_path}/t.sock")
        async with AsyncSidecarClient(sidecar.address) as client:
            events = await collect(client.stream_tool_loop("go", script=echo_script(1)))

        assert_well_formed(events)
        assert stat.S_IMODE(os.stat(tmp_path / "t.sock").st_mode) == 0o600


# -- graceful shutdown -----------------------------------------------------------------------


async def test_shutdown_lets_a_run_in_flight_finish(
    sidecar: Sidecar, client: AsyncSidecarClient, channel: grpc.aio.Channel,
    server_tools: ServerTools,
) -> None:  # fmt: skip
    stream = client.stream_tool_loop("go", script=[turn("", call("g1", "gate")), turn("finished")])
    head = await until_tool_started(stream)
    watch = HealthWatch(channel)
    await watch.next()
    stopping = asyncio.create_task(sidecar.stop(WAIT_S))
    assert await watch.next() == NOT_SERVING  # stop has begun
    watch.call.cancel()
    server_tools.release.set()
    events = head + await collect(stream)
    await stopping

    assert_well_formed(events)
    last = events[-1].event
    assert isinstance(last, RunCompleted)
    assert last.result.content == "finished"


async def test_shutdown_cancels_runs_after_the_grace_period(
    sidecar: Sidecar, client: AsyncSidecarClient, server_tools: ServerTools
) -> None:
    stream = client.stream_tool_loop("go", script=[turn("", call("h1", "hang")), turn("never")])
    head = await until_tool_started(stream)
    stopping = asyncio.create_task(sidecar.stop(0.3))
    events = head + await collect(stream)
    await stopping

    assert_well_formed(events)
    last = events[-1].event
    assert isinstance(last, RunCancelled)
    assert "shutting down" in last.reason
    assert last.result.stop_reason is StopReason.CANCELLED
    assert server_tools.hang_finalised == ["h1"]


async def test_shutdown_cancels_a_session_waiting_on_its_client(
    sidecar: Sidecar, channel: grpc.aio.Channel
) -> None:
    stub = service_pb2_grpc.ToolRuntimeServiceStub(channel)
    session = stub.Session()
    script = [turn("", call("r1", "remote")), turn("never")]
    await session.write(session_start(run_spec(script), types_pb2.ToolSpec(name="remote")))
    events: list[events_pb2.RunEvent] = []
    await read_until_invocation(session, events)
    stopping = asyncio.create_task(sidecar.stop(0.2))
    events += await drain_session(session)
    await stopping

    last = events[-1]
    assert last.HasField("run_cancelled")
    assert "shutting down" in last.run_cancelled.reason
    record = last.run_cancelled.result.tool_call_history[0]
    assert (record.call_id, record.error_kind) == ("r1", types_pb2.ERROR_KIND_CANCELLED)


async def test_new_runs_during_shutdown_are_unavailable(
    sidecar: Sidecar, client: AsyncSidecarClient, channel: grpc.aio.Channel,
    server_tools: ServerTools,
) -> None:  # fmt: skip
    stream = client.stream_tool_loop("go", script=[turn("", call("g1", "gate")), turn("ok")])
    await until_tool_started(stream)
    watch = HealthWatch(channel)
    await watch.next()
    stopping = asyncio.create_task(sidecar.stop(WAIT_S))
    await watch.next()
    watch.call.cancel()
    with pytest.raises(SidecarRpcError) as failure:
        await client.run_tool_loop("late", script=echo_script(1))
    server_tools.release.set()
    await collect(stream)
    await stopping

    assert failure.value.code == grpc.StatusCode.UNAVAILABLE
    assert "shutting down" in failure.value.details


async def test_stop_without_runs_returns_promptly(make_sidecar: SidecarFactory) -> None:
    sidecar = await make_sidecar(shutdown_grace_s=30.0)
    async with asyncio.timeout(WAIT_S):
        await sidecar.stop()

    with pytest.raises(grpc.aio.AioRpcError):
        async with grpc.aio.insecure_channel(sidecar.address) as ch:
            await check(ch, "")


async def test_listening_on_a_bad_address_is_a_config_error(
    server_tools: ServerTools, tmp_path: Path
) -> None:
    listen = f"unix:{tmp_path}/no/such/dir/s.sock"
    sidecar = Sidecar(SidecarConfig(listen=listen), registry=server_tools.registry)

    with pytest.raises(ConfigError, match="cannot listen on"):
        await sidecar.start()


async def test_non_loopback_address_without_auth_is_refused(server_tools: ServerTools) -> None:
    sidecar = Sidecar(SidecarConfig(listen="0.0.0.0:0"), registry=server_tools.registry)

    with pytest.raises(ConfigError, match="without auth or TLS"):
        await sidecar.start()


# -- the command line ---------------------------------------------------------------------------


async def run_cli(*args: str, timeout: float = CLI_WAIT_S) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        CLI, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    async with asyncio.timeout(timeout):
        out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_cli_serves_until_sigterm() -> None:
    async with cli_sidecar("--log-level", "warning") as (process, address):

        def run() -> tuple[str, list[tuple[str, dict[str, object]]]]:
            with SidecarClient(address) as client:
                result = client.run_tool_loop("say hello", timeout=WAIT_S)
            return result.content, [(r.tool_name, dict(r.output)) for r in result.tool_call_history]

        content, history = await asyncio.to_thread(run)
        code = await terminate(process)

    assert address.startswith("127.0.0.1:")
    assert int(address.rsplit(":", 1)[1]) > 0
    assert content.startswith("Done: the echo tool answered")
    assert history == [("echo", {"text": "hello from the sidecar"})]
    assert code == 0


async def test_cli_with_a_missing_config_file_exits_2(tmp_path: Path) -> None:
    code, out, err = await run_cli("serve", "--config", str(tmp_path / "missing.toml"))

    assert code == 2
    assert "cannot read config file" in err
    assert "listening" not in out


async def test_cli_with_an_invalid_config_file_exits_2(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("max_concurrent_runs = [not toml", encoding="utf-8")
    code, _, err = await run_cli("serve", "--config", str(config))

    assert code == 2
    assert "is not valid TOML" in err


async def test_cli_with_an_unknown_setting_exits_2(tmp_path: Path) -> None:
    config = tmp_path / "unknown.toml"
    config.write_text('colour = "blue"\n', encoding="utf-8")
    code, _, err = await run_cli("serve", "--config", str(config))

    assert code == 2
    assert "unknown setting 'colour'" in err


async def test_cli_with_a_bad_environment_setting_exits_2() -> None:
    process = await asyncio.create_subprocess_exec(
        CLI, "serve", "--listen", "127.0.0.1:0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "CLEVERAGENTS_SIDECAR_MAX_CONCURRENT_RUNS": "many"},
    )  # fmt: skip
    async with asyncio.timeout(CLI_WAIT_S):
        _, err = await process.communicate()

    assert process.returncode == 2
    assert "CLEVERAGENTS_SIDECAR_MAX_CONCURRENT_RUNS='many' is not a whole number" in err.decode()


async def test_cli_with_an_out_of_range_flag_exits_2() -> None:
    code, _, err = await run_cli("serve", "--listen", "127.0.0.1:0", "--max-concurrent-runs", "0")

    assert code == 2
    assert "max_concurrent_runs must be at least 1" in err


@pytest.mark.parametrize("listen", ["127.0.0.1:99999", "[::1]:115598"])
async def test_cli_with_a_port_out_of_range_exits_2_naming_it(listen: str) -> None:
    # gRPC would have served 99999 on 34463, its value modulo 65536.
    code, out, err = await run_cli("serve", "--listen", listen)
    port = listen.rsplit(":", 1)[1]

    assert code == 2
    assert err.strip() == (
        f"cleveragents-sidecar: listen {listen!r}: port {port} is out of range: a port is 0 "
        "to 65535 (0 picks a free one)"
    )
    assert "listening" not in out


def test_a_metrics_port_out_of_range_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"metrics_listen '127\.0\.0\.1:70000': port 70000 is"):
        Sidecar(SidecarConfig(metrics_listen="127.0.0.1:70000"))


async def test_cli_with_an_unbindable_address_exits_2(tmp_path: Path) -> None:
    code, _, err = await run_cli("serve", "--listen", f"unix:{tmp_path}/no/such/dir/s.sock")

    assert code == 2
    assert "cannot listen on" in err


STUCK_TOOL = '''
import time

from cleveragents.tool import ToolRegistry

registry = ToolRegistry()


@registry.tool
def stuck() -> None:
    """Block its worker thread for half a minute, whatever happens."""
    time.sleep(30)
'''


async def test_sigterm_exits_soon_after_the_grace_period_though_a_tool_thread_is_stuck(
    tmp_path: Path,
) -> None:
    (tmp_path / "stuck_tools.py").write_text(STUCK_TOOL, encoding="utf-8")
    env = dict(
        os.environ,
        PYTHONPATH=str(tmp_path),
        CLEVERAGENTS_SIDECAR_TOOL_MODULES="stuck_tools",
        CLEVERAGENTS_SIDECAR_FILE_TOOLS="false",
    )
    args = ("--log-level", "warning", "--shutdown-grace-s", "1")
    async with (
        cli_sidecar(*args, env=env) as (process, address),
        AsyncSidecarClient(address) as client,
    ):
        stream = client.stream_tool_loop("go", script=[turn("", call("s1", "stuck"))], detach=True)
        await until_tool_started(stream, "stuck")
        began = time.monotonic()
        code = await terminate(process)
        took = time.monotonic() - began
        assert process.stderr is not None
        err = (await process.stderr.read()).decode()

    assert code == 0
    # The grace period (1 s), then the threads' 2 s: without the exit a stuck thread would hold
    # the process for ever; the bound is generous for a loaded machine.
    assert took < CLI_WAIT_S
    assert "exiting without them" in err

"""``cleveragents-sidecar health``: the one-shot check a container's health check and the
Kubernetes probes run, against real sidecars on real unix sockets."""

from __future__ import annotations

import time
from pathlib import Path

from grpc_health.v1 import health_pb2

from cleveragents.sidecar import Sidecar, SidecarConfig

from .conftest import run_cli, served, without_sidecar_settings


async def test_a_serving_sidecar_on_a_unix_socket_is_healthy(tmp_path: Path) -> None:
    socket = f"unix:{tmp_path}/sidecar.sock"
    env = without_sidecar_settings({"CLEVERAGENTS_SIDECAR_FILE_TOOLS": "false"})
    async with served(["serve", "--listen", socket], env):
        status, out, _ = await run_cli("health", "--target", socket)

    assert (status, out) == (0, f"{socket}: SERVING\n")


async def test_the_target_defaults_to_the_address_serve_listens_on(tmp_path: Path) -> None:
    env = without_sidecar_settings(
        {
            "CLEVERAGENTS_SIDECAR_LISTEN": f"unix:{tmp_path}/sidecar.sock",
            "CLEVERAGENTS_SIDECAR_FILE_TOOLS": "false",
        }
    )
    async with served(["serve"], env):
        status, out, _ = await run_cli("health", env=env)

    assert (status, out) == (0, f"unix:{tmp_path}/sidecar.sock: SERVING\n")


async def test_no_sidecar_is_unhealthy_within_the_timeout_and_says_why(tmp_path: Path) -> None:
    began = time.monotonic()
    status, out, err = await run_cli(
        "health", "--target", f"unix:{tmp_path}/nobody.sock", "--timeout", "1"
    )

    assert (status, out) == (2, "")
    assert f"no health answer from unix:{tmp_path}/nobody.sock within 1 s" in err
    assert "is the sidecar running and listening there?" in err
    assert time.monotonic() - began < 20  # the timeout held (generous: a loaded machine)


async def test_a_not_serving_sidecar_is_not_ready_but_alive(tmp_path: Path) -> None:
    sidecar = Sidecar(SidecarConfig(listen=f"unix:{tmp_path}/sidecar.sock", file_tools=False))
    await sidecar.start()
    try:
        # What the sidecar itself reports while its run store fails (tests/durability).
        for name in ("", "cleveragents.toolruntime.v1.ToolRuntimeService"):
            await sidecar.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        ready = await run_cli("health", "--target", sidecar.address)
        live = await run_cli("health", "--target", sidecar.address, "--live")
    finally:
        await sidecar.stop(1.0)

    assert ready[:2] == (1, f"{sidecar.address}: NOT_SERVING\n")
    assert live[:2] == (0, f"{sidecar.address}: NOT_SERVING\n")


async def test_an_unknown_service_is_not_ready(tmp_path: Path) -> None:
    sidecar = Sidecar(SidecarConfig(listen=f"unix:{tmp_path}/sidecar.sock", file_tools=False))
    await sidecar.start()
    try:
        status, out, _ = await run_cli(
            "health", "--target", sidecar.address, "--service", "no.such.Service"
        )
    finally:
        await sidecar.stop(1.0)

    assert (status, out) == (
        1,
        f"{sidecar.address}: no health status for service 'no.such.Service'\n",
    )


async def test_the_health_check_needs_no_token(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("s3cret-token-for-the-test\n")
    socket = f"unix:{tmp_path}/sidecar.sock"
    env = without_sidecar_settings(
        {
            "CLEVERAGENTS_SIDECAR_AUTH_TOKEN_FILE": str(tmp_path / "token"),
            "CLEVERAGENTS_SIDECAR_FILE_TOOLS": "false",
        }
    )
    async with served(["serve", "--listen", socket], env):
        status, out, _ = await run_cli("health", "--target", socket)

    assert (status, out) == (0, f"{socket}: SERVING\n")

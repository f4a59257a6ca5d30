"""What an unauthenticated peer can make the server hold: its messages are never read."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cleveragents.toolruntime.v1 import service_pb2, service_pb2_grpc, types_pb2

if TYPE_CHECKING:
    from tests.conftest import ServedSidecar, ServeSidecar

PEERS = 48
MESSAGE = 15 * 1024 * 1024
#: The README's bound on what 48 such peers add to the server's peak RSS (measured: 23 MB,
#: and 132 MB on a machine so loaded that refusals lag the bytes arriving; before, when
#: refusals read the message first, 680 MB).
BOUND_MB = 256
TOKEN = "s3cret-token"


@pytest.fixture
def authed_sidecar(serve_sidecar: ServeSidecar) -> ServedSidecar:
    """A sidecar process with token auth on."""
    return serve_sidecar(env={"SIDECAR_TEST_TOKEN": TOKEN}, auth_token_env="SIDECAR_TEST_TOKEN")


def _mb(sidecar: ServedSidecar, field: str) -> float:
    return sidecar.status_kib(field) / 1024


async def _refused(address: str, payload: str, kind: str) -> tuple[grpc.StatusCode, str]:
    """Send one ``payload``-sized request without the token, as a ``kind`` call."""
    options = [("grpc.max_send_message_length", 2 * MESSAGE)]
    spec = types_pb2.RunSpec(prompt=payload)
    async with grpc.aio.insecure_channel(address, options=options) as channel:
        stub: Any = service_pb2_grpc.ToolRuntimeServiceStub(channel)
        try:
            if kind == "health":
                health: Any = health_pb2_grpc.HealthStub(channel)
                await health.Check(health_pb2.HealthCheckRequest(service=payload), timeout=60)
            elif kind == "unary":
                await stub.RunToolLoop(service_pb2.RunToolLoopRequest(spec=spec), timeout=60)
            else:
                call = stub.StreamToolLoop(service_pb2.StreamToolLoopRequest(spec=spec), timeout=60)
                async for _ in call:
                    pass
        except grpc.aio.AioRpcError as exc:
            return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, ""


async def _authenticated_run(address: str) -> str:
    async with grpc.aio.insecure_channel(address) as channel:
        stub: Any = service_pb2_grpc.ToolRuntimeServiceStub(channel)
        spec = types_pb2.RunSpec(prompt="go")
        spec.llm.script = json.dumps([{"content": "still served"}])
        response = await stub.RunToolLoop(
            service_pb2.RunToolLoopRequest(spec=spec),
            metadata=(("authorization", f"Bearer {TOKEN}"),),
            timeout=60,
        )
    return str(response.result.content)


async def test_unauthenticated_15_mib_requests_are_refused_without_being_read(
    authed_sidecar: ServedSidecar,
) -> None:
    address = authed_sidecar.address
    before = _mb(authed_sidecar, "VmRSS")
    payload = "x" * MESSAGE
    kinds = ("unary", "streaming")  # a Session's refusal never waited for its message
    attack = [asyncio.create_task(_refused(address, payload, kinds[i % 2])) for i in range(PEERS)]
    served = await _authenticated_run(address)  # while the attack is in flight
    outcomes = await asyncio.gather(*attack)
    peak = _mb(authed_sidecar, "VmHWM")

    assert served == "still served"
    assert {code for code, _ in outcomes} == {grpc.StatusCode.UNAUTHENTICATED}
    assert all("authorization: Bearer <token>" in details for _, details in outcomes)
    assert peak - before < BOUND_MB, f"RSS went from {before:.0f} MB to a peak of {peak:.0f} MB"


async def test_unauthenticated_health_checks_are_answered_without_reading_them(
    authed_sidecar: ServedSidecar,
) -> None:
    address = authed_sidecar.address
    before = _mb(authed_sidecar, "VmRSS")
    payload = "x" * MESSAGE
    outcomes = await asyncio.gather(*(_refused(address, payload, "health") for _ in range(PEERS)))
    peak = _mb(authed_sidecar, "VmHWM")

    assert set(outcomes) == {(grpc.StatusCode.OK, "")}  # the whole server's status: SERVING
    assert peak - before < BOUND_MB, f"RSS went from {before:.0f} MB to a peak of {peak:.0f} MB"


async def test_an_unauthenticated_health_watch_streams_the_whole_servers_status(
    authed_sidecar: ServedSidecar,
) -> None:
    address = authed_sidecar.address
    async with grpc.aio.insecure_channel(address) as channel:
        stub: Any = health_pb2_grpc.HealthStub(channel)
        watch = stub.Watch(health_pb2.HealthCheckRequest(service="not-read"), timeout=10)
        first = await watch.read()
        watch.cancel()

    assert first.status == health_pb2.HealthCheckResponse.SERVING

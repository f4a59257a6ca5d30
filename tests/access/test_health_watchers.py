"""What a peer without the token reaches: health ``Watch`` streams, bounded apart from those
of clients with it; not reflection."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

if TYPE_CHECKING:
    from tests.conftest import ServedSidecar, ServeSidecar

TOKEN = "watch-test-token-0123"
#: The attack measured before the bound: 5,000 held Watch streams added 71-113 MB to the
#: server's RSS. The peer opens them 250 at a time and holds every one the server keeps.
STREAMS = 5000
WAVE = 250
#: What the attempt may add now (measured: 9-15 MB, 256 streams held), against 100+ before.
BOUND_MB = 40


async def _watch(stub: Any) -> tuple[Any, grpc.StatusCode]:
    """Open a Watch and read its first answer: the call (still open) and how it went."""
    call = stub.Watch(health_pb2.HealthCheckRequest(), timeout=120)
    try:
        await call.read()
    except grpc.aio.AioRpcError as exc:
        return call, exc.code()
    return call, grpc.StatusCode.OK


async def test_a_watch_beyond_max_health_watchers_is_resource_exhausted(
    serve_sidecar: ServeSidecar,
) -> None:
    sidecar = serve_sidecar(max_health_watchers=20)
    async with grpc.aio.insecure_channel(sidecar.address) as channel:
        stub: Any = health_pb2_grpc.HealthStub(channel)
        held = [await _watch(stub) for _ in range(20)]
        extra = stub.Watch(health_pb2.HealthCheckRequest(), timeout=30)
        try:
            await extra.read()
            refused = None
        except grpc.aio.AioRpcError as exc:
            refused = exc
        checked = await stub.Check(health_pb2.HealthCheckRequest(), timeout=30)
        held[0][0].cancel()
        again = await _watch(stub)  # a freed place is taken again
        for call, _ in [*held, again]:
            call.cancel()

    assert {code for _, code in held} == {grpc.StatusCode.OK}
    assert refused is not None
    assert refused.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "max_health_watchers" in (refused.details() or "")
    assert checked.status == health_pb2.HealthCheckResponse.SERVING
    assert again[1] is grpc.StatusCode.OK


async def test_peers_without_the_token_cannot_take_the_places_of_clients_with_it(
    serve_sidecar: ServeSidecar,
) -> None:
    sidecar = serve_sidecar(
        env={"SIDECAR_TEST_TOKEN": TOKEN}, auth_token_env="SIDECAR_TEST_TOKEN",
        max_health_watchers=5,
    )  # fmt: skip
    with_token = (("authorization", f"Bearer {TOKEN}"),)
    async with grpc.aio.insecure_channel(sidecar.address) as channel:
        stub: Any = health_pb2_grpc.HealthStub(channel)
        anonymous = [await _watch(stub) for _ in range(6)]  # the sixth is one too many
        trusted = stub.Watch(health_pb2.HealthCheckRequest(), metadata=with_token, timeout=30)
        answer = await trusted.read()
        for call in [trusted, *(call for call, _ in anonymous)]:
            call.cancel()

    assert [code for _, code in anonymous] == [grpc.StatusCode.OK] * 5 + [
        grpc.StatusCode.RESOURCE_EXHAUSTED
    ]
    assert answer.status == health_pb2.HealthCheckResponse.SERVING


async def test_5000_unauthenticated_watch_streams_hold_little_server_memory(
    serve_sidecar: ServeSidecar,
) -> None:
    sidecar: ServedSidecar = serve_sidecar(
        env={"SIDECAR_TEST_TOKEN": TOKEN}, auth_token_env="SIDECAR_TEST_TOKEN"
    )
    before = sidecar.status_kib("VmRSS") / 1024
    async with grpc.aio.insecure_channel(sidecar.address) as channel:
        stub: Any = health_pb2_grpc.HealthStub(channel)
        opened: list[tuple[Any, grpc.StatusCode]] = []
        for _ in range(STREAMS // WAVE):
            opened += await asyncio.gather(*(_watch(stub) for _ in range(WAVE)))
        held_mb = sidecar.status_kib("VmRSS") / 1024 - before
        for call, _ in opened:
            call.cancel()
    codes = [code for _, code in opened]

    assert codes.count(grpc.StatusCode.OK) == 256  # the default max_health_watchers
    assert set(codes) == {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED}
    assert held_mb < BOUND_MB, f"{STREAMS} Watch streams held {held_mb:.1f} MB"


async def test_server_reflection_without_the_token_is_unauthenticated(
    serve_sidecar: ServeSidecar,
) -> None:
    from grpc_reflection.v1alpha import reflection_pb2_grpc

    sidecar = serve_sidecar(env={"SIDECAR_TEST_TOKEN": TOKEN}, auth_token_env="SIDECAR_TEST_TOKEN")
    async with grpc.aio.insecure_channel(sidecar.address) as channel:
        stub: Any = reflection_pb2_grpc.ServerReflectionStub(channel)  # type: ignore[arg-type]
        # No request is written: the refusal comes without one, and a client that writes after
        # the call has ended gets a local INTERNAL instead of the server's status.
        call = stub.ServerReflectionInfo(timeout=30)
        try:
            async for _ in call:
                pass
            code = grpc.StatusCode.OK
        except grpc.aio.AioRpcError as exc:
            code = exc.code()

    assert code is grpc.StatusCode.UNAUTHENTICATED

"""Only callers with the token (and, with mTLS, a certificate) get in; health stays open."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cleveragents.client import AsyncSidecarClient, SidecarRpcError
from cleveragents.sidecar import ConfigError, Sidecar, SidecarConfig
from cleveragents.sidecar.transport.access import check_listen_policy
from cleveragents.toolruntime.v1 import service_pb2, service_pb2_grpc, session_pb2

from .conftest import Pki

TOKEN = "s3cret-token-for-tests"
Start = Callable[..., Awaitable[Sidecar]]


@pytest.fixture
async def start() -> AsyncIterator[Start]:
    started: list[Sidecar] = []

    async def run(**settings: str) -> Sidecar:
        options: dict[str, Any] = {"listen": "127.0.0.1:0", **settings}
        sidecar = Sidecar(SidecarConfig(**options))
        await sidecar.start()
        started.append(sidecar)
        return sidecar

    yield run
    for sidecar in started:
        await sidecar.stop(1.0)


@pytest.fixture
def token_env(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("SIDECAR_TOKEN_FOR_TESTS", TOKEN)
    return "SIDECAR_TOKEN_FOR_TESTS"


async def test_a_call_without_the_token_is_unauthenticated(start: Start, token_env: str) -> None:
    sidecar = await start(auth_token_env=token_env)
    async with AsyncSidecarClient(sidecar.address) as client:
        with pytest.raises(SidecarRpcError) as raised:
            await client.run_tool_loop("hi")
    assert raised.value.code is grpc.StatusCode.UNAUTHENTICATED
    assert "Bearer" in raised.value.details


async def test_a_wrong_token_is_unauthenticated(start: Start, token_env: str) -> None:
    sidecar = await start(auth_token_env=token_env)
    async with AsyncSidecarClient(sidecar.address, token=TOKEN + "x") as client:
        with pytest.raises(SidecarRpcError) as raised:
            await client.list_tools()
    assert raised.value.code is grpc.StatusCode.UNAUTHENTICATED


async def test_streaming_rpcs_refuse_a_missing_token_too(start: Start, token_env: str) -> None:
    sidecar = await start(auth_token_env=token_env)
    async with grpc.aio.insecure_channel(sidecar.address) as channel:
        stub = service_pb2_grpc.ToolRuntimeServiceStub(channel)
        stream = stub.StreamToolLoop(service_pb2.StreamToolLoopRequest())
        with pytest.raises(grpc.aio.AioRpcError) as streamed:
            async for _ in stream:
                pass
        session = stub.Session()

        async def write_then_read() -> None:
            # The refusal may come before the write: then the write raises it, not the read.
            await session.write(session_pb2.SessionRequest())
            async for _ in session:
                pass

        with pytest.raises(grpc.aio.AioRpcError) as bidi:
            await write_then_read()
    assert streamed.value.code() is grpc.StatusCode.UNAUTHENTICATED
    assert bidi.value.code() is grpc.StatusCode.UNAUTHENTICATED
    assert sidecar.manager.live_count == 0


async def test_the_right_token_gets_in(start: Start, token_env: str) -> None:
    sidecar = await start(auth_token_env=token_env)
    async with AsyncSidecarClient(sidecar.address, token=TOKEN) as client:
        result = await client.run_tool_loop("hi", script=[{"content": "hello"}])
    assert result.content == "hello"


async def test_the_token_can_come_from_a_file(start: Start, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    sidecar = await start(auth_token_file=str(token_file))
    async with AsyncSidecarClient(sidecar.address, token=TOKEN) as client:
        assert [t.name for t in await client.list_tools()][:2] == ["echo", "sleep"]


async def test_health_checking_needs_no_token(start: Start, token_env: str) -> None:
    sidecar = await start(auth_token_env=token_env)
    async with grpc.aio.insecure_channel(sidecar.address) as channel:
        stub: Any = health_pb2_grpc.HealthStub(channel)
        response = await stub.Check(health_pb2.HealthCheckRequest(service=""))
    assert response.status == health_pb2.HealthCheckResponse.SERVING


async def test_an_unset_token_variable_stops_the_start(token_env: str) -> None:
    sidecar = Sidecar(SidecarConfig(listen="127.0.0.1:0", auth_token_env="NO_SUCH_VARIABLE_X"))
    with pytest.raises(ConfigError, match="NO_SUCH_VARIABLE_X"):
        await sidecar.start()


async def test_tls_serves_a_client_that_trusts_the_ca(start: Start, pki: Pki) -> None:
    sidecar = await start(tls_cert_file=str(pki.server_cert), tls_key_file=str(pki.server_key))
    credentials = grpc.ssl_channel_credentials(root_certificates=pki.ca_cert.read_bytes())
    async with AsyncSidecarClient(sidecar.address, credentials=credentials) as client:
        result = await client.run_tool_loop("hi", script=[{"content": "over tls"}])
    assert result.content == "over tls"


async def test_tls_refuses_a_plaintext_client(start: Start, pki: Pki) -> None:
    sidecar = await start(tls_cert_file=str(pki.server_cert), tls_key_file=str(pki.server_key))
    async with AsyncSidecarClient(sidecar.address) as client:
        with pytest.raises(SidecarRpcError) as raised:
            await client.run_tool_loop("hi", timeout=5)
    assert raised.value.code is grpc.StatusCode.UNAVAILABLE


async def test_mutual_tls_admits_a_client_certificate_from_the_ca(start: Start, pki: Pki) -> None:
    sidecar = await start(
        tls_cert_file=str(pki.server_cert),
        tls_key_file=str(pki.server_key),
        tls_client_ca_file=str(pki.ca_cert),
    )
    credentials = grpc.ssl_channel_credentials(
        root_certificates=pki.ca_cert.read_bytes(),
        private_key=pki.client_key.read_bytes(),
        certificate_chain=pki.client_cert.read_bytes(),
    )
    async with AsyncSidecarClient(sidecar.address, credentials=credentials) as client:
        result = await client.run_tool_loop("hi", script=[{"content": "mutual"}])
    assert result.content == "mutual"


@pytest.mark.parametrize("with_certificate", ["none", "stranger"])
async def test_mutual_tls_refuses_clients_without_a_trusted_certificate(
    start: Start, pki: Pki, with_certificate: str
) -> None:
    sidecar = await start(
        tls_cert_file=str(pki.server_cert),
        tls_key_file=str(pki.server_key),
        tls_client_ca_file=str(pki.ca_cert),
    )
    chain: dict[str, bytes] = {}
    if with_certificate == "stranger":
        chain["certificate_chain"] = pki.stranger_cert.read_bytes()
        chain["private_key"] = pki.stranger_key.read_bytes()
    credentials = grpc.ssl_channel_credentials(root_certificates=pki.ca_cert.read_bytes(), **chain)
    async with AsyncSidecarClient(sidecar.address, credentials=credentials) as client:
        with pytest.raises(SidecarRpcError) as raised:
            await client.run_tool_loop("hi", timeout=5)
    assert raised.value.code is grpc.StatusCode.UNAVAILABLE
    assert sidecar.manager.live_count == 0


@pytest.mark.parametrize("listen", ["0.0.0.0:50051", "[::]:50051", "10.1.2.3:50051", "example:1"])
def test_a_non_loopback_address_without_auth_or_tls_is_refused(listen: str) -> None:
    with pytest.raises(ConfigError, match="refusing to listen"):
        check_listen_policy(listen, authenticated=False, encrypted=False)


@pytest.mark.parametrize("listen", ["127.0.0.1:0", "[::1]:0", "localhost:0", "unix:/tmp/s.sock"])
def test_loopback_and_unix_addresses_need_no_protection(listen: str) -> None:
    check_listen_policy(listen, authenticated=False, encrypted=False)


@pytest.mark.parametrize(("authenticated", "encrypted"), [(True, False), (False, True)])
def test_auth_or_tls_makes_any_address_acceptable(authenticated: bool, encrypted: bool) -> None:
    check_listen_policy("0.0.0.0:50051", authenticated=authenticated, encrypted=encrypted)


async def test_the_sidecar_refuses_to_start_on_an_open_address() -> None:
    sidecar = Sidecar(SidecarConfig(listen="0.0.0.0:0"))
    with pytest.raises(ConfigError, match="without auth or TLS"):
        await sidecar.start()


async def test_a_unix_socket_is_created_private(start: Start, tmp_path: Path) -> None:
    path = tmp_path / "sidecar.sock"
    sidecar = await start(listen=f"unix:{path}")
    assert path.stat().st_mode & 0o777 == 0o600
    async with AsyncSidecarClient(sidecar.address) as client:
        assert (await client.run_tool_loop("hi", script=[{"content": "unix"}])).content == "unix"


async def test_a_second_sidecar_refuses_a_unix_socket_a_live_one_listens_on(
    start: Start, tmp_path: Path
) -> None:
    path = tmp_path / "sidecar.sock"
    first = await start(listen=f"unix:{path}")
    second = Sidecar(SidecarConfig(listen=f"unix:{path}"))
    with pytest.raises(ConfigError, match="a server is already listening on it"):
        await second.start()
    async with AsyncSidecarClient(first.address) as client:  # the first one still serves
        assert (await client.run_tool_loop("hi", script=[{"content": "still"}])).content == "still"


async def test_a_stale_unix_socket_file_is_replaced(start: Start, tmp_path: Path) -> None:
    path = tmp_path / "sidecar.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()  # the file stays, nobody answers on it
    sidecar = await start(listen=f"unix:{path}")
    async with AsyncSidecarClient(sidecar.address) as client:
        assert (await client.run_tool_loop("hi", script=[{"content": "new"}])).content == "new"

"""Mutual TLS: a verified client certificate's subject stands for the identity that lists it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from cleveragents.client import AsyncSidecarClient, SidecarRpcError
from cleveragents.sidecar import ClientConfig, Sidecar, SidecarConfig
from cleveragents.tool import RunCompleted

from .conftest import Pki

BOB_TOKEN = "bob-token-for-mtls-tests"
Start = Callable[..., Awaitable[Sidecar]]


@pytest.fixture
async def sidecar(pki: Pki, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Sidecar]:
    monkeypatch.setenv("TEST_BOB_TOKEN", BOB_TOKEN)
    config = SidecarConfig(
        listen="127.0.0.1:0",
        tls_cert_file=str(pki.server_cert),
        tls_key_file=str(pki.server_key),
        tls_client_ca_file=str(pki.ca_cert),
        metrics_listen="127.0.0.1:0",
        clients={
            # Written in another order than the certificate's: attribute order is ignored.
            "alice": ClientConfig("alice", subjects=("CN=alice, O=Acme",)),
            "bob": ClientConfig("bob", token_env="TEST_BOB_TOKEN"),
        },
    )
    server = Sidecar(config)
    await server.start()
    yield server
    await server.stop(1.0)


def connect(
    sidecar: Sidecar, pki: Pki, cert: Path, key: Path, **options: Any
) -> AsyncSidecarClient:
    credentials = grpc.ssl_channel_credentials(
        root_certificates=pki.ca_cert.read_bytes(),
        private_key=key.read_bytes(),
        certificate_chain=cert.read_bytes(),
    )
    return AsyncSidecarClient(sidecar.address, credentials=credentials, **options)


async def test_a_listed_certificate_subject_is_its_identity_on_every_kind_of_rpc(
    sidecar: Sidecar, pki: Pki
) -> None:
    alice = connect(sidecar, pki, pki.alice_cert, pki.alice_key)
    bob = connect(sidecar, pki, pki.unlisted_cert, pki.unlisted_key, token=BOB_TOKEN)
    async with alice, bob:
        unary = await alice.run_tool_loop("by cert", script=[{"content": "a"}], run_id="a1")
        streamed = [e.event async for e in alice.watch("a1")]
        session = [e.event async for e in alice.session("session", script=[{"content": "s"}],
                                                        run_id="a2")]  # fmt: skip
        mine = sorted(r.run_id for r in await alice.list_runs())
        with pytest.raises(SidecarRpcError) as hidden:
            await bob.get_run("a1")
        bobs = [r.run_id for r in await bob.list_runs()]
    assert unary.content == "a"
    assert isinstance(streamed[-1], RunCompleted)
    assert isinstance(session[-1], RunCompleted)
    assert mine == ["a1", "a2"]
    assert hidden.value.code is grpc.StatusCode.NOT_FOUND
    assert bobs == []


async def test_a_certificate_no_identity_lists_is_unauthenticated_and_counted(
    sidecar: Sidecar, pki: Pki
) -> None:
    async with connect(sidecar, pki, pki.unlisted_cert, pki.unlisted_key) as stranger:
        with pytest.raises(SidecarRpcError) as unary:
            await stranger.run_tool_loop("hi", script=[{"content": "x"}])
        with pytest.raises(SidecarRpcError) as streaming:
            async for _ in stranger.stream_tool_loop("hi", script=[{"content": "x"}]):
                pass
    assert unary.value.code is streaming.value.code is grpc.StatusCode.UNAUTHENTICATED
    assert "client certificate whose subject" in unary.value.details
    assert sidecar.manager.live_count == 0
    assert sidecar.manager.retained_runs() == []
    assert sidecar.metrics is not None
    assert sidecar.metrics.registry.get_sample_value("cleveragents_auth_rejected_total") == 2

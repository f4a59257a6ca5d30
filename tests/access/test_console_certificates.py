"""The run console over TLS with client certificates: a browser's certificate whose subject a
``[clients.NAME]`` lists is that identity, as over gRPC; without one, a token still signs in."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from cleveragents.sidecar import ClientConfig, Sidecar, SidecarConfig

from .conftest import Pki

BOB_TOKEN = "bob-token-for-console-tests"


@pytest.fixture
async def sidecar(pki: Pki, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Sidecar]:
    monkeypatch.setenv("TEST_BOB_TOKEN", BOB_TOKEN)
    config = SidecarConfig(
        listen="127.0.0.1:0",
        console_listen="127.0.0.1:0",
        tls_cert_file=str(pki.server_cert),
        tls_key_file=str(pki.server_key),
        tls_client_ca_file=str(pki.ca_cert),
        clients={
            "alice": ClientConfig("alice", subjects=("CN=alice, O=Acme",)),
            "bob": ClientConfig("bob", token_env="TEST_BOB_TOKEN"),
        },
    )
    server = Sidecar(config)
    await server.start()
    yield server
    await server.stop(1.0)


def tls(pki: Pki, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca_cert))
    if cert is not None:
        context.load_cert_chain(str(cert), str(key))
    return context


async def me(sidecar: Sidecar, context: ssl.SSLContext, **headers: str) -> tuple[int, object]:
    url = sidecar.console_url + "api/me"
    async with aiohttp.ClientSession() as http, http.get(url, ssl=context, headers=headers) as r:
        return r.status, await r.json()


async def test_the_console_is_served_over_https_with_the_servers_certificate(
    sidecar: Sidecar,
) -> None:
    assert sidecar.console_url.startswith("https://127.0.0.1:")


async def test_a_listed_certificate_subject_is_the_pages_identity(
    sidecar: Sidecar, pki: Pki
) -> None:
    answer = await me(sidecar, tls(pki, pki.alice_cert, pki.alice_key))

    assert answer == (200, {"identity": "alice", "roles": [], "auth": "certificate"})


async def test_a_token_signs_in_without_a_certificate_and_wins_over_one(
    sidecar: Sidecar, pki: Pki
) -> None:
    bearer = {"Authorization": f"Bearer {BOB_TOKEN}"}
    without = await me(sidecar, tls(pki), **bearer)
    over = await me(sidecar, tls(pki, pki.alice_cert, pki.alice_key), **bearer)

    assert without == (200, {"identity": "bob", "roles": [], "auth": "token"})
    assert over == without


async def test_an_unlisted_certificate_or_none_is_refused_and_counted(
    sidecar: Sidecar, pki: Pki
) -> None:
    unlisted = await me(sidecar, tls(pki, pki.unlisted_cert, pki.unlisted_key))
    nothing = await me(sidecar, tls(pki))

    assert [unlisted[0], nothing[0]] == [401, 401]
    assert sidecar.rejections.count == 2

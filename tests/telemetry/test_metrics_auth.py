"""The metrics endpoint behind the sidecar's credentials: ``metrics_require_token``."""

from __future__ import annotations

import pytest

from cleveragents.sidecar import ClientConfig

from .conftest import SidecarFactory, scrape

TOKEN = "metrics-test-token-0123"


@pytest.fixture(autouse=True)
def _token_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("METRICS_TEST_TOKEN", TOKEN)


async def test_a_scrape_without_the_token_is_refused_with_401(
    make_sidecar: SidecarFactory,
) -> None:
    sidecar = await make_sidecar(auth_token_env="METRICS_TEST_TOKEN")
    assert sidecar.metrics_port is not None

    status, body = await scrape(sidecar.metrics_port)
    wrong, _ = await scrape(sidecar.metrics_port, headers={"Authorization": "Bearer nope"})

    assert (status, wrong) == (401, 401)
    assert "Authorization: Bearer <token>" in body
    assert "cleveragents" not in body


async def test_a_scrape_with_the_token_gets_the_metrics(make_sidecar: SidecarFactory) -> None:
    sidecar = await make_sidecar(auth_token_env="METRICS_TEST_TOKEN")
    assert sidecar.metrics_port is not None

    status, body = await scrape(sidecar.metrics_port, headers={"Authorization": f"Bearer {TOKEN}"})

    assert status == 200
    assert "cleveragents_runs" in body


async def test_metrics_require_token_false_serves_scrapes_without_it(
    make_sidecar: SidecarFactory,
) -> None:
    sidecar = await make_sidecar(auth_token_env="METRICS_TEST_TOKEN", metrics_require_token=False)
    assert sidecar.metrics_port is not None

    status, body = await scrape(sidecar.metrics_port)

    assert status == 200
    assert "cleveragents_runs" in body


async def test_a_named_identitys_token_opens_the_metrics_too(
    make_sidecar: SidecarFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("METRICS_TEST_CI_TOKEN", "ci-metrics-token-4567")
    ci = ClientConfig("ci", token_env="METRICS_TEST_CI_TOKEN")
    sidecar = await make_sidecar(clients={"ci": ci})  # no shared token at all
    assert sidecar.metrics_port is not None

    status, body = await scrape(
        sidecar.metrics_port, headers={"Authorization": "Bearer ci-metrics-token-4567"}
    )
    refused, _ = await scrape(sidecar.metrics_port)

    assert (status, refused) == (200, 401)
    assert "cleveragents_runs" in body

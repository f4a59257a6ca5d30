"""The Redis run store over TLS (``rediss://``): Debian's redis-server serving TLS only, with
a certificate from a CA the test makes, and the sidecar told that CA (``event_store_ca_file``)."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from cleveragents.client import AsyncSidecarClient
from cleveragents.sidecar import Sidecar, SidecarConfig
from cleveragents.sidecar.config import ENV_PREFIX, load_config
from cleveragents.sidecar.errors import ConfigError
from tests.redis_server import RedisServer

#: EC keys: made in milliseconds (the access tests' RSA keys take seconds on a busy machine).
_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


def _openssl(directory: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA, a server certificate it issued for 127.0.0.1, a client certificate it issued, an
    unrelated CA, and a client certificate that one issued (openssl)."""
    directory = tmp_path_factory.mktemp("redis-pki")
    for ca in ("ca", "rogue-ca"):
        _openssl(directory, "req", "-x509", *_KEY, "-keyout", f"{ca}.key", "-out", f"{ca}.crt",
                 "-days", "2", "-subj", f"/CN={ca}")  # fmt: skip
    _openssl(directory, "req", "-new", *_KEY, "-keyout", "server.key", "-out", "server.csr",
             "-subj", "/CN=server")  # fmt: skip
    (directory / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl(directory, "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey",
             "ca.key", "-CAcreateserial", "-out", "server.crt", "-days", "2",
             "-extfile", "server.ext")  # fmt: skip
    for client, ca in (("client", "ca"), ("rogue-client", "rogue-ca")):
        _openssl(directory, "req", "-new", *_KEY, "-keyout", f"{client}.key", "-out",
                 f"{client}.csr", "-subj", f"/CN={client}")  # fmt: skip
        _openssl(directory, "x509", "-req", "-in", f"{client}.csr", "-CA", f"{ca}.crt",
                 "-CAkey", f"{ca}.key", "-CAcreateserial", "-out", f"{client}.crt",
                 "-days", "2")  # fmt: skip
    return directory


@pytest.fixture
def tls_redis(tmp_path: Path, certificates: Path) -> Iterator[RedisServer]:
    tls = (certificates / "server.crt", certificates / "server.key", certificates / "ca.crt")
    server = RedisServer(tmp_path / "redis-tls", tls=tls).start()
    yield server
    server.stop()


@pytest.fixture
def mtls_redis(tmp_path: Path, certificates: Path) -> Iterator[RedisServer]:
    """TLS only, and a client must show a certificate the CA issued (tls-auth-clients yes)."""
    tls = (certificates / "server.crt", certificates / "server.key", certificates / "ca.crt")
    server = RedisServer(tmp_path / "redis-mtls", tls=tls, client_certs=True).start()
    yield server
    server.stop()


def _config(url: str, ca_file: Path | str, client: Path | None = None) -> SidecarConfig:
    """A sidecar on ``url`` trusting ``ca_file``; ``client``: its certificate and key are
    ``client``.crt and ``client``.key."""
    return SidecarConfig(
        listen="127.0.0.1:0",
        event_store=url,
        event_store_ca_file=str(ca_file),
        event_store_cert_file=f"{client}.crt" if client else "",
        event_store_key_file=f"{client}.key" if client else "",
        sandbox_roots=(os.environ["CLEVERAGENTS_SIDECAR_SANDBOX_ROOTS"],),
    )


async def test_a_sidecar_keeps_its_runs_on_a_tls_redis_it_was_given_the_ca_of(
    tls_redis: RedisServer, certificates: Path
) -> None:
    assert tls_redis.url.startswith("rediss://")
    sidecar = Sidecar(_config(tls_redis.url, certificates / "ca.crt"))
    await sidecar.start()
    try:
        async with AsyncSidecarClient(sidecar.address) as client:
            result = await client.run_tool_loop("go", script=[{"content": "hi"}], run_id="tls")
            listed = [summary.run_id for summary in await client.list_runs()]
    finally:
        await sidecar.stop(1.0)
    assert result.content == "hi"
    assert listed == ["tls"]
    # Read back by a second sidecar stopped at once: its control loop's cancelled XREAD
    # (over TLS) is where a stop used to hang for good, 6 times in 42 (test_fleet_close.py).
    again = Sidecar(_config(tls_redis.url, certificates / "ca.crt"))
    await again.start()
    try:
        async with AsyncSidecarClient(again.address) as client:
            info = await client.get_run("tls")
    finally:
        await asyncio.wait_for(again.stop(1.0), 15)
    assert info.state == "completed"


async def test_a_tls_redis_whose_certificate_the_ca_did_not_issue_fails_the_start_clearly(
    tls_redis: RedisServer, certificates: Path
) -> None:
    sidecar = Sidecar(_config(tls_redis.url, certificates / "rogue-ca.crt"))
    with pytest.raises(ConfigError) as refused:
        await sidecar.start()
    message = str(refused.value)
    assert "cannot be used as a run store" in message
    assert "certificate verify failed" in message
    assert "event_store_ca_file" in message


def test_a_ca_file_is_refused_for_a_store_without_tls_or_when_it_cannot_be_read(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigError, match="event_store_ca_file is for a rediss://"):
        _config("redis://127.0.0.1:6379/0", tmp_path / "ca.crt")
    with pytest.raises(ConfigError, match=r"event_store_ca_file .* cannot be read"):
        Sidecar(_config("rediss://127.0.0.1:6379/0", tmp_path / "missing.crt"))


async def test_a_sidecar_with_a_client_certificate_the_ca_issued_keeps_its_runs_on_a_mtls_redis(
    mtls_redis: RedisServer, certificates: Path
) -> None:
    sidecar = Sidecar(_config(mtls_redis.url, certificates / "ca.crt", certificates / "client"))
    await sidecar.start()
    try:
        async with AsyncSidecarClient(sidecar.address) as client:
            result = await client.run_tool_loop("go", script=[{"content": "hi"}], run_id="mtls")
            listed = [summary.run_id for summary in await client.list_runs()]
    finally:
        await sidecar.stop(1.0)
    assert result.content == "hi"
    assert listed == ["mtls"]


async def test_a_mtls_redis_refuses_a_sidecar_without_a_client_certificate_in_one_line(
    mtls_redis: RedisServer, certificates: Path
) -> None:
    sidecar = Sidecar(_config(mtls_redis.url, certificates / "ca.crt"))
    with pytest.raises(ConfigError) as refused:
        await sidecar.start()
    message = str(refused.value)
    assert "\n" not in message
    assert "cannot be used as a run store" in message
    assert "event_store_cert_file" in message


async def test_a_mtls_redis_refuses_a_client_certificate_another_ca_issued_clearly(
    mtls_redis: RedisServer, certificates: Path
) -> None:
    config = _config(mtls_redis.url, certificates / "ca.crt", certificates / "rogue-client")
    with pytest.raises(ConfigError) as refused:
        await Sidecar(config).start()
    message = str(refused.value)
    assert "\n" not in message
    assert "cannot be used as a run store" in message
    assert "event_store_cert_file and event_store_key_file (a client certificate" in message


def test_half_a_client_certificate_pair_is_refused_at_config_load(tmp_path: Path) -> None:
    store = {f"{ENV_PREFIX}EVENT_STORE": "rediss://127.0.0.1:6379/0"}
    with pytest.raises(ConfigError, match="go together: set both or neither"):
        load_config(env={**store, f"{ENV_PREFIX}EVENT_STORE_CERT_FILE": "c.crt"})
    (tmp_path / "sidecar.toml").write_text('event_store_key_file = "c.key"\n')
    with pytest.raises(ConfigError, match="go together: set both or neither"):
        load_config(tmp_path / "sidecar.toml", env=store)


def test_a_client_certificate_is_refused_for_a_store_without_tls_or_when_it_cannot_be_read(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigError, match="event_store_cert_file is for a rediss://"):
        SidecarConfig(
            event_store="redis://127.0.0.1:6379/0",
            event_store_cert_file="c.crt",
            event_store_key_file="c.key",
        )
    (tmp_path / "c.crt").write_text("")
    for name, cert, key in (
        ("event_store_cert_file", tmp_path / "missing.crt", tmp_path / "c.crt"),
        ("event_store_key_file", tmp_path / "c.crt", tmp_path / "missing.key"),
    ):
        config = SidecarConfig(
            event_store="rediss://127.0.0.1:6379/0",
            event_store_cert_file=str(cert),
            event_store_key_file=str(key),
        )
        with pytest.raises(ConfigError, match=rf"^{name} .* cannot be read"):
            Sidecar(config)

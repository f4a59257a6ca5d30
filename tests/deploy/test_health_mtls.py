"""``cleveragents-sidecar health`` against a sidecar that asks for client certificates
(mutual TLS), the way a probe in its container checks it: over a unix socket, which no
certificate names, or an address the certificate does not name."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cleveragents.sidecar import Sidecar, SidecarConfig

from .conftest import run_cli

#: The one name in the sidecar's certificate: neither a socket path nor 127.0.0.1.
SERVER_NAME = "sidecar.internal"


@dataclass(frozen=True)
class Certificates:
    """A throw-away CA, the sidecar's certificate (``DNS:sidecar.internal`` only) and a
    client certificate the CA issued."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _issue(name: str, extensions: str, cwd: Path) -> None:
    _openssl(
        "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
        "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=cwd,
    )  # fmt: skip
    (cwd / f"{name}.ext").write_text(extensions)
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-sha256",
        "-extfile", f"{name}.ext", cwd=cwd,
    )  # fmt: skip


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    d = tmp_path_factory.mktemp("health-pki")
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
        "-out", "ca.crt", "-days", "2", "-subj", "/CN=ca", cwd=d,
    )  # fmt: skip
    _issue("server", f"subjectAltName=DNS:{SERVER_NAME}\n", d)
    _issue("probe", "extendedKeyUsage=clientAuth\n", d)
    return Certificates(
        d / "ca.crt", d / "server.crt", d / "server.key", d / "probe.crt", d / "probe.key"
    )


@pytest.fixture(params=["unix", "tcp"])
async def mtls_sidecar(
    request: pytest.FixtureRequest, certificates: Certificates, tmp_path: Path
) -> AsyncIterator[Sidecar]:
    listen = f"unix:{tmp_path}/sidecar.sock" if request.param == "unix" else "127.0.0.1:0"
    sidecar = Sidecar(
        SidecarConfig(
            listen=listen,
            file_tools=False,
            tls_cert_file=str(certificates.server_cert),
            tls_key_file=str(certificates.server_key),
            tls_client_ca_file=str(certificates.ca),
        )
    )
    await sidecar.start()
    yield sidecar
    await sidecar.stop(1.0)


def _tls(certificates: Certificates) -> list[str]:
    return ["--tls-ca-file", str(certificates.ca), "--tls-server-name", SERVER_NAME]


async def test_a_client_certificate_makes_a_mutual_tls_sidecar_healthy(
    mtls_sidecar: Sidecar, certificates: Certificates
) -> None:
    status, out, err = await run_cli(
        "health", "--target", mtls_sidecar.address, *_tls(certificates),
        "--tls-cert-file", str(certificates.client_cert),
        "--tls-key-file", str(certificates.client_key),
    )  # fmt: skip

    assert (status, out, err) == (0, f"{mtls_sidecar.address}: SERVING\n", "")


async def test_without_a_client_certificate_a_mutual_tls_sidecar_gives_no_answer(
    mtls_sidecar: Sidecar, certificates: Certificates
) -> None:
    status, out, err = await run_cli(
        "health", "--target", mtls_sidecar.address, *_tls(certificates), "--timeout", "2"
    )

    assert (status, out) == (2, "")
    assert f"no health answer from {mtls_sidecar.address}" in err


async def test_the_server_name_must_match_the_sidecars_certificate(
    mtls_sidecar: Sidecar, certificates: Certificates
) -> None:
    status, out, err = await run_cli(
        "health", "--target", mtls_sidecar.address,
        "--tls-ca-file", str(certificates.ca), "--tls-server-name", "someone.else",
        "--tls-cert-file", str(certificates.client_cert),
        "--tls-key-file", str(certificates.client_key), "--timeout", "2",
    )  # fmt: skip

    assert (status, out) == (2, "")
    assert f"no health answer from {mtls_sidecar.address}" in err


@pytest.mark.parametrize(
    ("flags", "problem"),
    [
        (["--tls-cert-file", "c.pem"], "--tls-cert-file and --tls-key-file go together"),
        (["--tls-key-file", "k.pem"], "--tls-cert-file and --tls-key-file go together"),
        (["--tls-cert-file", "c.pem", "--tls-key-file", "k.pem"], "--tls-cert-file needs "
         "--tls-ca-file"),
        (["--tls-server-name", "x"], "--tls-server-name needs --tls-ca-file"),
    ],
)  # fmt: skip
async def test_tls_flags_that_do_not_go_together_are_refused_with_a_reason(
    flags: list[str], problem: str, tmp_path: Path
) -> None:
    status, out, err = await run_cli(
        "health", "--target", f"unix:{tmp_path}/nobody.sock", "--timeout", "1", *flags
    )

    assert (status, out) == (2, "")
    assert problem in err

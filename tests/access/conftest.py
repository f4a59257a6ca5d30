"""Certificates made by the tests themselves (openssl): a CA, a server and a client cert."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Pki:
    """Paths of a throw-away PKI."""

    ca_cert: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    stranger_cert: Path
    stranger_key: Path
    #: Issued by the CA, subjects ``O=Acme,CN=alice`` and ``CN=unlisted``.
    alice_cert: Path
    alice_key: Path
    unlisted_cert: Path
    unlisted_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _issue(name: str, ca: str, cwd: Path, extensions: str, subject: str = "") -> None:
    _openssl(
        "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
        "-out", f"{name}.csr", "-subj", subject or f"/CN={name}", cwd=cwd,
    )  # fmt: skip
    (cwd / f"{name}.ext").write_text(extensions)
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-sha256",
        "-extfile", f"{name}.ext", cwd=cwd,
    )  # fmt: skip


def _ca(name: str, cwd: Path) -> None:
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
        "-out", f"{name}.crt", "-days", "2", "-subj", f"/CN={name}", cwd=cwd,
    )  # fmt: skip


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    _ca("ca", d)
    _ca("rogue-ca", d)
    _issue("server", "ca", d, "subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _issue("client", "ca", d, "extendedKeyUsage=clientAuth\n")
    _issue("stranger", "rogue-ca", d, "extendedKeyUsage=clientAuth\n")
    _issue("alice", "ca", d, "extendedKeyUsage=clientAuth\n", "/O=Acme/CN=alice")
    _issue("unlisted", "ca", d, "extendedKeyUsage=clientAuth\n")
    return Pki(
        d / "ca.crt", d / "server.crt", d / "server.key", d / "client.crt", d / "client.key",
        d / "stranger.crt", d / "stranger.key", d / "alice.crt", d / "alice.key",
        d / "unlisted.crt", d / "unlisted.key",
    )  # fmt: skip

"""Who may talk to the sidecar: the listening policy, the shared token and TLS."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path

import grpc

from cleveragents.sidecar.config import SidecarConfig
from cleveragents.sidecar.errors import ConfigError

__all__ = ["check_listen_policy", "read_token", "server_credentials"]


def read_token(config: SidecarConfig, env: Mapping[str, str] | None = None) -> str | None:
    """The shared auth token from its env var or file, or ``None`` when auth is off."""
    env = os.environ if env is None else env
    if config.auth_token_env:
        token = env.get(config.auth_token_env, "").strip()
        if not token:
            raise ConfigError(
                f"auth_token_env names {config.auth_token_env!r}, which is unset or empty"
            )
        return token
    if config.auth_token_file:
        try:
            token = Path(config.auth_token_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(
                f"cannot read auth_token_file {config.auth_token_file}: {exc.strerror}"
            ) from None
        if not token:
            raise ConfigError(f"auth_token_file {config.auth_token_file} is empty")
        return token
    return None


def server_credentials(config: SidecarConfig) -> grpc.ServerCredentials | None:
    """TLS (or, with a client CA, mutual TLS) credentials, or ``None`` for plaintext."""
    if not config.tls_cert_file:
        return None
    cert = _read(config.tls_cert_file, "tls_cert_file")
    key = _read(config.tls_key_file, "tls_key_file")
    client_ca = (
        _read(config.tls_client_ca_file, "tls_client_ca_file")
        if (config.tls_client_ca_file)
        else None
    )
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=client_ca, require_client_auth=client_ca is not None
    )


def check_listen_policy(listen: str, *, authenticated: bool, encrypted: bool) -> None:
    """Refuse a non-loopback address unless auth or TLS protects it."""
    if listen.startswith("unix:") or authenticated or encrypted:
        return
    host = listen.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return
    try:
        if ipaddress.ip_address(host).is_loopback:
            return
    except ValueError:
        pass  # a host name: not provably loopback
    raise ConfigError(
        f"refusing to listen on {listen!r} without auth or TLS: anyone who can reach it could "
        "run tools and spend LLM credits. Listen on 127.0.0.1 or a unix: socket, or set "
        "auth_token_env/auth_token_file or tls_cert_file/tls_key_file"
    )


def _read(path: str, setting: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {setting} {path}: {exc.strerror}") from None

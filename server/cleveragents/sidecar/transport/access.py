"""Who may talk to the sidecar: the listening policy, the shared token and TLS."""

from __future__ import annotations

import ipaddress
import os
import socket
import ssl
from collections.abc import Mapping
from pathlib import Path

import grpc

from cleveragents.sidecar.config import SidecarConfig
from cleveragents.sidecar.errors import ConfigError

__all__ = [
    "check_console_policy", "check_listen_policy", "console_tls", "read_secret", "read_token",
    "refuse_live_unix_socket", "server_credentials",
]  # fmt: skip


def read_token(config: SidecarConfig, env: Mapping[str, str] | None = None) -> str | None:
    """The shared auth token from its env var or file, or ``None`` when auth is off."""
    env = os.environ if env is None else env
    return read_secret(config.auth.token_env, config.auth.token_file, env, "auth_token")


def read_secret(
    env_name: str, file: str, env: Mapping[str, str], where: str, sep: str = "_"
) -> str | None:
    """A token from the environment variable ``env_name`` or the file ``file`` (whichever is
    set), or ``None``; ``ConfigError`` names the setting (``where`` + ``sep`` + ``env`` or
    ``file``) when it is unset, unreadable or empty."""
    if env_name:
        token = env.get(env_name, "").strip()
        if not token:
            raise ConfigError(f"{where}{sep}env names {env_name!r}, which is unset or empty")
        return token
    if file:
        try:
            token = Path(file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(f"cannot read {where}{sep}file {file}: {exc.strerror}") from None
        if not token:
            raise ConfigError(f"{where}{sep}file {file} is empty")
        return token
    return None


def server_credentials(config: SidecarConfig) -> grpc.ServerCredentials | None:
    """TLS (or, with a client CA, mutual TLS) credentials, or ``None`` for plaintext."""
    if not config.tls.cert_file:
        return None
    cert = _read(config.tls.cert_file, "tls_cert_file")
    key = _read(config.tls.key_file, "tls_key_file")
    client_ca = (
        _read(config.tls.client_ca_file, "tls_client_ca_file")
        if (config.tls.client_ca_file)
        else None
    )
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=client_ca, require_client_auth=client_ca is not None
    )


def console_tls(config: SidecarConfig) -> ssl.SSLContext | None:
    """The run console's TLS, the gRPC server's own certificate (``None``: plain HTTP). With a
    client CA, a browser may present a certificate it signed (its subject is then the page's
    identity), or none and sign in with a token."""
    if not config.tls.cert_file:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(config.tls.cert_file, config.tls.key_file)
        if config.tls.client_ca_file:
            context.load_verify_locations(config.tls.client_ca_file)
            context.verify_mode = ssl.CERT_OPTIONAL
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot serve the console over TLS: {exc}") from None
    return context


def check_listen_policy(listen: str, *, authenticated: bool, encrypted: bool) -> None:
    """Refuse a non-loopback address unless auth or TLS protects it."""
    if listen.startswith("unix:") or authenticated or encrypted or _loopback(listen):
        return
    raise ConfigError(
        f"refusing to listen on {listen!r} without auth or TLS: anyone who can reach it could "
        "run tools and spend LLM credits. Listen on 127.0.0.1 or a unix: socket, or set "
        "auth_token_env/auth_token_file or tls_cert_file/tls_key_file"
    )


def check_console_policy(listen: str, *, authenticated: bool) -> None:
    """Refuse a run console beyond loopback unless its callers authenticate (TLS alone does
    not say who a page is)."""
    if authenticated or _loopback(listen):
        return
    raise ConfigError(
        f"refusing to serve the console on {listen!r} without auth: anyone who can reach it "
        "could read every run, approve its calls and cancel it. Set console_listen to "
        "127.0.0.1:PORT, or set auth_token_env/auth_token_file or [clients.NAME] tokens or "
        "certificate subjects"
    )


def _loopback(listen: str) -> bool:
    host = listen.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: not provably loopback


def refuse_live_unix_socket(listen: str, timeout_s: float = 1.0) -> None:
    """Refuse a ``unix:`` address on which a live server answers: binding would silently take
    the socket over from it. A socket file nobody answers on is left for gRPC to replace."""
    if not listen.startswith("unix:"):
        return
    path = listen.removeprefix("unix:").removeprefix("//")
    if not os.path.lexists(path):
        return
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(timeout_s)
    try:
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        return  # stale: the server that made it is gone
    except OSError as exc:
        raise ConfigError(
            f"cannot listen on {listen!r}: {path} exists and cannot be checked "
            f"({exc.strerror or exc})"
        ) from None
    finally:
        probe.close()
    raise ConfigError(
        f"refusing to listen on {listen!r}: a server is already listening on it; stop that "
        "one, or choose another path"
    )


def _read(path: str, setting: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {setting} {path}: {exc.strerror}") from None

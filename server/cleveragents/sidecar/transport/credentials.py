"""The credentials the sidecar accepts, each standing for an ``Identity``.

Credentials are checked against SHA-256 digests of each token's ``Bearer`` header: a presented
header is compared (``hmac.compare_digest``) with every one of them, so neither the comparison
nor the look-up takes longer for a nearer guess. (The tokens themselves are also read, by
``token_values``, so that tool records can be cleaned of them.) Mutual-TLS subjects are
matched on the verified peer certificate's subject, attribute order ignored.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import structlog

from cleveragents.sidecar.config import ClientConfig, SidecarConfig
from cleveragents.sidecar.errors import ConfigError
from cleveragents.sidecar.identity import DEFAULT_IDENTITY, Identity, normal_subject
from cleveragents.sidecar.transport.access import read_secret, read_token

__all__ = ["MIN_TOKEN_CHARS", "Credentials", "read_credentials", "token_values"]

log = structlog.get_logger("cleveragents.sidecar.auth")
#: A shorter token is accepted, with a warning at start: it can be guessed.
MIN_TOKEN_CHARS = 16


def _digest(header: bytes) -> bytes:
    return hashlib.sha256(header).digest()


@dataclass(frozen=True, slots=True)
class Credentials:
    """Token digests and certificate subjects, each with the identity it stands for."""

    tokens: tuple[tuple[bytes, Identity], ...] = ()
    subjects: Mapping[frozenset[str], Identity] = field(default_factory=dict)

    @property
    def required(self) -> bool:
        """Whether any credential is configured (else the sidecar does not authenticate)."""
        return bool(self.tokens or self.subjects)

    def identities(self) -> dict[str, list[str]]:
        """Each identity a credential stands for, by name, with its roles (for the log);
        without credentials, every caller is the default identity."""
        known = [identity for _, identity in self.tokens] + list(self.subjects.values())
        if not known:
            known = [DEFAULT_IDENTITY]
        return {i.name: sorted(i.roles) for i in sorted(known, key=lambda i: i.name)}

    def by_token(self, header: bytes) -> Identity | None:
        """The identity whose ``Bearer <token>`` is ``header``, or ``None``."""
        presented = _digest(header)
        found: Identity | None = None
        for digest, identity in self.tokens:  # all compared: no early exit on a match
            if hmac.compare_digest(presented, digest):
                found = identity
        return found

    def by_subject(self, subjects: Iterable[bytes]) -> Identity | None:
        """The identity a verified peer certificate's subject stands for, or ``None``."""
        for subject in subjects:
            identity = self.subjects.get(normal_subject(subject.decode("utf-8", "replace")))
            if identity is not None:
                return identity
        return None


def read_credentials(config: SidecarConfig, env: Mapping[str, str] | None = None) -> Credentials:
    """Every configured credential: the shared token (``default``, every role) and each
    ``[clients.NAME]``. ``ConfigError`` for a token that cannot be read, or one used twice."""
    env = os.environ if env is None else env
    tokens: list[tuple[bytes, Identity]] = []
    owners: dict[bytes, str] = {}
    subjects: dict[frozenset[str], Identity] = {}

    def add(token: str, identity: Identity) -> None:
        if len(token) < MIN_TOKEN_CHARS:
            log.warning(
                "a token is too short to resist guessing",
                identity=identity.name,
                characters=len(token),
                advice=f"use at least {MIN_TOKEN_CHARS} random characters "
                "(openssl rand -hex 32 makes 64)",
            )
        digest = _digest(f"Bearer {token}".encode())
        if (other := owners.setdefault(digest, identity.name)) != identity.name:
            raise ConfigError(
                f"clients.{identity.name} has the same token as {other}: each identity needs "
                "its own token"
            )
        tokens.append((digest, identity))

    if (shared := read_token(config, env)) is not None:
        add(shared, DEFAULT_IDENTITY)
    for name, client in config.clients.items():
        identity = Identity(name, client.roles, client.policy)
        if (token := _client_token(client, env)) is not None:
            add(token, identity)
        for subject in client.subjects:
            subjects[normal_subject(subject)] = identity
    return Credentials(tuple(tokens), subjects)


def token_values(config: SidecarConfig, env: Mapping[str, str] | None = None) -> list[str]:
    """Every configured token itself (the shared one and each identity's): the values that
    tool records must never show (``secrets``), though credentials are checked by digest."""
    env = os.environ if env is None else env
    shared = read_token(config, env)
    clients = (_client_token(client, env) for client in config.clients.values())
    return [token for token in (shared, *clients) if token is not None]


def _client_token(client: ClientConfig, env: Mapping[str, str]) -> str | None:
    where = f"clients.{client.name}"
    token = read_secret(client.token_env, client.token_file, env, where, ".token_")
    if token is not None:
        return token
    if client.token:
        log.warning(
            "a client token is written in the configuration itself",
            client=client.name,
            advice="use token_env or token_file, and keep the file as secret as the token",
        )
        return client.token
    return None

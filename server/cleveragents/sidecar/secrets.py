"""The sidecar's secrets, kept out of tool records: a defence behind the sandbox roots.

The secrets are the auth token and the values of environment variables that hold keys: those
the provider profiles name (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY`` or ``api_key_env``) and
any whose name says it holds one (``KEY``, ``TOKEN``, ``SECRET``, ``PASSWORD``,
``CREDENTIAL``; not the sidecar's own ``CLEVERAGENTS_SIDECAR_*`` settings), of 8 characters
or more. Every tool record's output and error, server or client tool, has each such
value replaced by ``[redacted]`` before it becomes an event, a result or a stored record.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from cleveragents.sidecar.config import SidecarConfig
from cleveragents.sidecar.config.settings import ENV_PREFIX
from cleveragents.tool import (
    ToolActorContext,
    ToolCall,
    ToolCallRecord,
    ToolLimits,
    ToolRegistry,
    ToolRunner,
)
from cleveragents.tool.execution.runner import Gate, StartedCallback

__all__ = ["REDACTED", "RedactingRunner", "known_secrets", "redact"]

REDACTED = "[redacted]"
#: Shorter values are too likely to be ordinary text (``1``, ``true``) to replace.
_MIN_SECRET = 8
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
_DEFAULT_KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}


def known_secrets(
    config: SidecarConfig, tokens: Iterable[str], env: Mapping[str, str] | None = None
) -> tuple[str, ...]:
    """The values to keep out of tool records, longest first (so none is half replaced)."""
    env = os.environ if env is None else env
    # The sidecar's own settings (CLEVERAGENTS_SIDECAR_AUTH_TOKEN_ENV…) name secrets, not hold them.
    names = {n for n in env if _SECRET_NAME.search(n) and not n.startswith(ENV_PREFIX)}
    for profile in config.all_profiles().values():
        default = _DEFAULT_KEY_ENV.get(profile.kind)
        name = profile.api_key_env if profile.api_key_env is not None else default
        if name:
            names.add(name)
    values = {env.get(name, "").strip() for name in names} | {t.strip() for t in tokens}
    return tuple(sorted((v for v in values if len(v) >= _MIN_SECRET), key=len, reverse=True))


def redact(value: Any, secrets: tuple[str, ...]) -> Any:
    """``value`` (a JSON value) with every secret in its strings and keys replaced."""
    if isinstance(value, str):
        if any(secret in value for secret in secrets):
            for secret in secrets:
                value = value.replace(secret, REDACTED)
        return value
    if isinstance(value, Mapping):
        return {redact(k, secrets): redact(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(item, secrets) for item in value]
    return value


class RedactingRunner(ToolRunner):
    """A ``ToolRunner`` whose records never carry one of ``secrets``."""

    __slots__ = ("secrets",)

    def __init__(
        self,
        registry: ToolRegistry,
        *,
        secrets: tuple[str, ...],
        default_timeout_s: float | None = None,
        limits: ToolLimits | None = None,
    ) -> None:
        super().__init__(registry, default_timeout_s=default_timeout_s, limits=limits)
        self.secrets = secrets

    async def run(
        self,
        call: ToolCall,
        *,
        iteration: int,
        context: ToolActorContext | None = None,
        on_started: StartedCallback | None = None,
        gate: Gate | None = None,
    ) -> ToolCallRecord:
        record = await super().run(
            call, iteration=iteration, context=context, on_started=on_started, gate=gate
        )
        secrets = self.secrets
        if not secrets or not (
            _contains(record.output, secrets) or _contains(record.error, secrets)
        ):
            return record
        error = redact(record.error, secrets)
        return dataclasses.replace(record, output=redact(record.output, secrets), error=error)


def _contains(value: Any, secrets: tuple[str, ...]) -> bool:
    if isinstance(value, str):
        return any(secret in value for secret in secrets)
    if isinstance(value, Mapping):
        return any(_contains(k, secrets) or _contains(v, secrets) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_contains(item, secrets) for item in value)
    return False

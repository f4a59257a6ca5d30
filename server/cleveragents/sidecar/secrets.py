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
import functools
import json
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from cleveragents.sidecar.config import SidecarConfig
from cleveragents.sidecar.config.settings import ENV_PREFIX
from cleveragents.tool import (
    ErrorKind,
    ToolActorContext,
    ToolCall,
    ToolCallRecord,
    ToolLimits,
    ToolRegistry,
    ToolRunner,
)
from cleveragents.tool.execution.runner import Gate, ProgressCallback, StartedCallback

__all__ = ["REDACTED", "RedactingRunner", "known_secrets", "redact"]

REDACTED = "[redacted]"
#: Shorter values are too likely to be ordinary text (``1``, ``true``) to replace.
_MIN_SECRET = 8
#: A ``${VAR}`` reference in a setting's value.
_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
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
    for server in config.mcp_servers.values():  # ${VAR} in an MCP server's headers or env
        for value in (*server.headers.values(), *server.env.values()):
            names.update(_REFERENCE.findall(value))
    values = {env.get(name, "").strip() for name in names} | {t.strip() for t in tokens}
    return tuple(sorted((v for v in values if len(v) >= _MIN_SECRET), key=len, reverse=True))


def redact(value: Any, secrets: tuple[str, ...], text: str | None = None) -> Any:
    """``value`` (a JSON value) with every secret in its strings and keys replaced.

    It works on the value's JSON text, so that no depth of nesting can exhaust the stack (a
    tool may return hundreds of levels); each secret is looked for as JSON writes it.
    ``text``, when given, is that text (``json.dumps(value, ensure_ascii=False)``) made
    already: a record's own, so that a large output is not encoded again to be scanned.
    ``ValueError`` if the value cannot be checked (not JSON, or nested beyond what the JSON
    encoder accepts).
    """
    try:
        if text is None:
            text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValueError(f"the output could not be checked for secrets ({exc})") from None
    found = False
    for written in _as_json(secrets):
        if written in text:
            text, found = text.replace(written, REDACTED), True
    if not found:
        return value
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # a secret of digits that was a number, say
        raise ValueError("the output held a secret and could not be redacted") from None


@functools.cache
def _as_json(secrets: tuple[str, ...]) -> tuple[str, ...]:
    """Each secret as it stands inside a JSON string (once per sidecar, not per call)."""
    return tuple(json.dumps(secret, ensure_ascii=False)[1:-1] for secret in secrets)


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
        on_progress: ProgressCallback | None = None,
        run_id: str = "",
    ) -> ToolCallRecord:
        secrets = self.secrets
        if on_progress is not None and secrets:
            on_progress = _redacting_progress(on_progress, secrets)
        record = await super().run(
            call, iteration=iteration, context=context, on_started=on_started, gate=gate,
            on_progress=on_progress, run_id=run_id,
        )  # fmt: skip
        if not secrets:
            return record
        error = record.error
        if error is not None:
            for secret in secrets:
                error = error.replace(secret, REDACTED)
        try:
            output = redact(record.output, secrets, _text_of(record))
        except ValueError as exc:  # withheld: a failed record, never one that may leak
            return dataclasses.replace(
                record, output={}, success=False, error=str(exc), error_kind=ErrorKind.EXCEPTION
            )
        if output is record.output and error == record.error:
            return record
        return dataclasses.replace(record, output=output, error=error)


def _text_of(record: ToolCallRecord) -> str | None:
    """The record's output text (made once, and kept for its later uses), or ``None`` if the
    output has none: ``redact`` then says why it cannot be checked."""
    try:
        return record.output_json()
    except (TypeError, ValueError, RecursionError):
        return None


def _redacting_progress(sink: ProgressCallback, secrets: tuple[str, ...]) -> ProgressCallback:
    """``sink`` given progress messages with every one of ``secrets`` replaced."""

    def report(call: ToolCall, progress: float, total: float | None, message: str) -> None:
        for secret in secrets:
            message = message.replace(secret, REDACTED)
        sink(call, progress, total, message)

    return report

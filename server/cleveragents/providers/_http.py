"""The HTTP transport of the provider adapters: POST a JSON body, retry, explain failures.

One ``httpx2.AsyncClient`` (a connection pool) can serve any number of callers and runs; a
caller without one creates its own on first use. The body is encoded once and re-sent as is
on each retry. Failures become :class:`ProviderError` with the provider, the HTTP status, the
provider's request id and its error message; the API key is scrubbed from every text that
leaves this module and headers are never logged.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any, NamedTuple

import httpx2
import structlog

from cleveragents.providers._retry import (
    ProviderError,
    RetryPolicy,
    is_retryable_status,
    retry_after_s,
)
from cleveragents.tool.jsontext import Encoder, loads

__all__ = ["Reply", "Transport", "describe_error", "error_text", "new_client", "request_id_of"]

log = structlog.get_logger("cleveragents.providers")
_encode = Encoder(separators=(",", ":"))
_MAX_ERROR_TEXT = 500


class Reply(NamedTuple):
    """A successful response: its JSON object, HTTP status and the provider's request id."""

    data: dict[str, Any]
    status: int
    request_id: str | None


def new_client() -> httpx2.AsyncClient:
    """A client suited to LLM APIs: pooled keep-alive connections, no client-wide timeout
    (each request sets its own)."""
    return httpx2.AsyncClient(
        timeout=None,
        limits=httpx2.Limits(max_connections=None, max_keepalive_connections=64),
        headers={"user-agent": "cleveragents-sidecar"},
    )


class Transport:
    """Sends one provider's requests with its retry policy, timeout and key scrubbing."""

    __slots__ = (
        "_client",
        "_owns_client",
        "_secret",
        "max_retries",
        "policy",
        "provider",
        "timeout_s",
        "where",
    )

    def __init__(
        self,
        provider: str,
        *,
        client: httpx2.AsyncClient | None,
        timeout_s: float,
        max_retries: int,
        policy: RetryPolicy,
        secret: str = "",
        where: str = "",
    ) -> None:
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        if max_retries < 0:
            raise ValueError("max_retries must not be negative")
        self.provider = provider
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.policy = policy
        self._client = client
        self._owns_client = client is None
        self._secret = secret
        self.where = where

    @property
    def client(self) -> httpx2.AsyncClient:
        """The shared client, or this transport's own, created on first use."""
        if self._client is None:
            self._client = new_client()
        return self._client

    async def aclose(self) -> None:
        """Close the client if this transport created it (a shared one is its owner's)."""
        if self._owns_client and self._client is not None:
            await self._client.aclose()
            self._client = None

    async def post_json(self, url: str, headers: Mapping[str, str], body: Any) -> Reply:
        """POST ``body`` as JSON; the parsed reply, or ``ProviderError`` once retries run out."""
        content = _encode(body).encode()
        attempt = 0
        while True:
            attempt += 1
            retry_after: float | None = None
            try:
                response = await self.client.post(
                    url, content=content, headers=headers, timeout=self.timeout_s
                )
            except httpx2.TimeoutException as exc:
                error = self.error(
                    f"no response within {self.timeout_s:g}s ({type(exc).__name__})",
                    retryable=True,
                )
            except httpx2.TransportError as exc:
                error = self.error(
                    f"connection failed ({type(exc).__name__}: {exc})", retryable=True
                )
            except httpx2.RequestError as exc:  # undecodable body, too many redirects
                error = self.error(f"request failed ({type(exc).__name__}: {exc})")
            else:
                request_id = request_id_of(response)
                if response.is_success:
                    return self.reply(response, request_id)
                error = self.error(
                    error_text(response),
                    status=response.status_code,
                    request_id=request_id,
                    retryable=is_retryable_status(response.status_code),
                )
                retry_after = retry_after_s(response.headers)
            await self.wait_to_retry(error, attempt, retry_after)

    async def wait_to_retry(
        self, error: ProviderError, attempt: int, retry_after: float | None
    ) -> None:
        """Raise ``error`` when attempt number ``attempt`` was the last one (not retryable,
        out of retries, or the provider asked for too long a wait); else wait before the next."""
        error.attempts = attempt
        if not error.retryable or attempt > self.max_retries:
            raise error
        delay = self.policy.delay(attempt, retry_after)
        if delay is None:
            error.message += (
                f"; not retried: the provider asked to wait {retry_after:g}s, longer than "
                f"{self.policy.max_retry_after_s:g}s"
            )
            raise error
        log.warning(
            "provider request failed, retrying",
            provider=self.provider,
            where=self.where,
            status=error.status,
            request_id=error.request_id,
            error=error.message,
            attempt=attempt,
            delay_s=round(delay, 3),
        )
        await asyncio.sleep(delay)

    def reply(self, response: httpx2.Response, request_id: str | None) -> Reply:
        """A successful response's JSON object, or ``ProviderError`` when it holds none."""
        why = "a JSON object"
        try:
            data = loads(response.content)
        except json.JSONDecodeError as exc:
            data, why = None, f"standard JSON ({exc.msg} at position {exc.pos})"
        except (ValueError, RecursionError):
            data = None
        if not isinstance(data, dict):
            raise self.error(
                f"the response body is not {why}: {_snippet(response.text)}",
                status=response.status_code,
                request_id=request_id,
            )
        return Reply(data, response.status_code, request_id)

    def error(
        self,
        message: str,
        *,
        status: int | None = None,
        request_id: str | None = None,
        retryable: bool = False,
    ) -> ProviderError:
        """A ``ProviderError`` of this transport's provider and endpoint, the key scrubbed."""
        if self._secret and self._secret in message:
            message = message.replace(self._secret, "[redacted]")
        return ProviderError(
            self.provider, message, status=status, request_id=request_id, retryable=retryable,
            where=self.where,
        )  # fmt: skip


def request_id_of(response: httpx2.Response) -> str | None:
    """The provider's id for the request (``x-request-id`` at OpenAI, ``request-id`` at
    Anthropic), to quote to its support."""
    return response.headers.get("x-request-id") or response.headers.get("request-id")


def error_text(response: httpx2.Response) -> str:
    """The provider's own explanation: ``error.message`` (and ``error.type``) of its JSON
    error body, as both OpenAI and Anthropic send it, else the start of the body."""
    reason = response.reason_phrase or "error"
    try:
        body = loads(response.content)
    except (ValueError, RecursionError):
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return f"{reason}: {describe_error(error)}"
    if isinstance(error, str):
        return f"{reason}: {_snippet(error)}"
    text = response.text.strip()
    return f"{reason}: {_snippet(text)}" if text else reason


def describe_error(error: Mapping[str, Any]) -> str:
    """A provider's error object as ``type (code): message``: the specific ``code``
    (``invalid_api_key``, ``model_not_found``, or a number) says more than the ``type`` alone."""
    names = [
        str(v)
        for v in (error.get("type"), error.get("code"))
        if (isinstance(v, str) and v) or (isinstance(v, int) and not isinstance(v, bool))
    ]  # OpenRouter's code is the HTTP status it stands for: {"code": 400, "message": …}
    if len(names) == 2 and names[0] != names[1]:
        prefix = f"{names[0]} ({names[1]}): "
    else:
        prefix = f"{names[0]}: " if names else ""
    return f"{prefix}{_snippet(str(error.get('message') or 'no message'))}"


def _snippet(text: str) -> str:
    return text if len(text) <= _MAX_ERROR_TEXT else text[:_MAX_ERROR_TEXT] + "…"

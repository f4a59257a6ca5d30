"""The HTTP transport of the provider adapters: POST a JSON body, retry, explain failures.

The HTTP client is ``aiohttp`` (its HTTP/1.1 parser is C; ``bench/http_stacks.py`` measured
it against httpx2 and the others on the providers' streams). One ``aiohttp.ClientSession`` (a
connection pool) can serve any number of callers and runs; a caller without one creates its
own on first use. The body is encoded once and re-sent as is on each retry. A whole
(non-streamed) answer is read up to :func:`max_body_bytes` of its caller's answer bound, and
no further. Failures become :class:`ProviderError` with the provider, the HTTP status, the
provider's request id and its error message; the API key is scrubbed from every text that
leaves this module and headers are never logged. A failure names its kind in the same words
whatever the client library calls it (``ConnectError``, ``ConnectTimeout``, ``ReadTimeout``,
``RemoteProtocolError``), so that the messages operators match on stay put.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any, NamedTuple

import aiohttp
import structlog

from cleveragents.providers._retry import (
    AnswerTooLargeError,
    ProviderError,
    RetryPolicy,
    is_retryable_status,
    retry_after_s,
)
from cleveragents.tool.jsontext import Encoder, loads

__all__ = [
    "Body",
    "Reply",
    "Transport",
    "describe_error",
    "error_text",
    "failure_kind",
    "max_body_bytes",
    "new_client",
    "request_id_of",
]

log = structlog.get_logger("cleveragents.providers")
_encode = Encoder(separators=(",", ":"))
_MAX_ERROR_TEXT = 500
#: An error body is read this far at most: enough for any provider's explanation.
_MAX_ERROR_BODY = 64 * 1024
#: How long an idle pooled connection is kept (httpx's default, which the pool had before).
_KEEPALIVE_S = 5.0


def max_body_bytes(max_answer_chars: int) -> int:
    """The most a whole answer's body is read to, for an answer bound of ``max_answer_chars``
    characters: six bytes a character (a ``\\uXXXX`` escape, the longest JSON writes one in)
    and 1 MiB for the body's other fields."""
    return 6 * max_answer_chars + 1024 * 1024


class Body(NamedTuple):
    """A response's status, headers and body, read (up to a bound) before the connection
    went back to the pool."""

    status: int
    reason: str
    headers: Mapping[str, str]
    content: bytes

    @property
    def text(self) -> str:
        """The body as UTF-8 text (undecodable bytes replaced)."""
        return self.content.decode("utf-8", "replace")


class Reply(NamedTuple):
    """A successful response: its JSON object, HTTP status and the provider's request id."""

    data: dict[str, Any]
    status: int
    request_id: str | None


def new_client() -> aiohttp.ClientSession:
    """A client suited to LLM APIs: pooled keep-alive connections without a cap, no
    client-wide timeout (each request sets its own), ``HTTPS_PROXY`` and ``NO_PROXY`` honoured;
    certificates are checked against the system's trust store (``SSL_CERT_FILE`` too). Made in
    the event loop that will use it."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=_KEEPALIVE_S),
        timeout=aiohttp.ClientTimeout(total=None),
        headers={"user-agent": "cleveragents-sidecar"},
        trust_env=True,
    )


class Transport:
    """Sends one provider's requests with its retry policy, timeout and key scrubbing."""

    __slots__ = (
        "_client",
        "_owns_client",
        "_secret",
        "connecting",
        "limits",
        "max_body",
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
        client: aiohttp.ClientSession | None,
        timeout_s: float,
        max_retries: int,
        policy: RetryPolicy,
        secret: str = "",
        where: str = "",
        max_body: int = max_body_bytes(16 * 1024 * 1024),
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
        #: The most a whole answer's body is read to (see ``max_body_bytes``).
        self.max_body = max_body
        #: Connect within the timeout, and no read of a response may wait longer.
        self.limits = aiohttp.ClientTimeout(total=None, connect=timeout_s, sock_read=timeout_s)
        #: Connect within the timeout (a stream times its reads itself: see ``_stream.py``).
        self.connecting = aiohttp.ClientTimeout(total=None, connect=timeout_s)

    @property
    def client(self) -> aiohttp.ClientSession:
        """The shared client, or this transport's own, created on first use."""
        if self._client is None or (self._owns_client and self._client.closed):
            self._client = new_client()
        return self._client

    async def aclose(self) -> None:
        """Close the client if this transport created it (a shared one is its owner's)."""
        if self._owns_client and self._client is not None:
            await self._client.close()
            self._client = None

    async def post_json(self, url: str, headers: Mapping[str, str], body: Any) -> Reply:
        """POST ``body`` as JSON; the parsed reply, or ``ProviderError`` once retries run out
        (``AnswerTooLargeError`` at once for a body past ``max_body``)."""
        content = _encode(body).encode()
        attempt = 0
        while True:
            attempt += 1
            retry_after: float | None = None
            try:
                response = await self._post(url, headers, content)
            except (aiohttp.ClientError, TimeoutError) as exc:
                error = self.failure(exc, "no response")
            else:
                request_id = request_id_of(response)
                if 200 <= response.status < 300:
                    return self.reply(response, request_id)
                error = self.error(
                    error_text(response),
                    status=response.status,
                    request_id=request_id,
                    retryable=is_retryable_status(response.status),
                )
                retry_after = retry_after_s(response.headers)
            await self.wait_to_retry(error, attempt, retry_after)

    async def _post(self, url: str, headers: Mapping[str, str], content: bytes) -> Body:
        async with self.client.post(
            url, data=content, headers=headers, timeout=self.limits
        ) as response:
            success = 200 <= response.status < 300
            limit = self.max_body if success else _MAX_ERROR_BODY
            data = await read_body(response, limit)
            if data is None and success:
                raise AnswerTooLargeError(
                    self.provider,
                    f"the response body passed {limit} bytes, the most an answer within "
                    "its bound may take: the rest was not read",
                    status=response.status,
                    request_id=request_id_of(response),
                    where=self.where,
                )
            return Body(response.status, response.reason or "", response.headers, data or b"")

    def failure(self, exc: BaseException, waiting: str) -> ProviderError:
        """The ``ProviderError`` for a request the HTTP client could not complete: a timeout
        (while ``waiting``: "no response", "the stream stalled: no data") or a connection
        that failed, both retryable; any other client error is not."""
        kind = failure_kind(exc)
        if isinstance(exc, TimeoutError):
            return self.error(f"{waiting} within {self.timeout_s:g}s ({kind})", retryable=True)
        if isinstance(exc, aiohttp.ClientConnectionError | aiohttp.ClientPayloadError):
            return self.error(f"connection failed ({kind}: {exc})", retryable=True)
        return self.error(f"request failed ({kind}: {exc})")

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

    def reply(self, response: Body, request_id: str | None) -> Reply:
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
                status=response.status,
                request_id=request_id,
            )
        return Reply(data, response.status, request_id)

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


async def read_body(response: aiohttp.ClientResponse, limit: int) -> bytes | None:
    """``response``'s body, or ``None`` once it passes ``limit`` bytes (the rest unread)."""
    length = response.content_length
    if length is not None and length > limit:
        return None
    pieces: list[bytes] = []
    size = 0
    async for piece in response.content.iter_any():
        size += len(piece)
        if size > limit:
            return None
        pieces.append(piece)
    return b"".join(pieces)


def failure_kind(exc: BaseException) -> str:
    """What went wrong, in the words the messages have always used."""
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return "ConnectTimeout"
    if isinstance(exc, TimeoutError):
        return "ReadTimeout"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return "ConnectError"
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        return "RemoteProtocolError"
    if isinstance(exc, aiohttp.ClientOSError):
        return "NetworkError"
    return type(exc).__name__


def request_id_of(response: Body | aiohttp.ClientResponse) -> str | None:
    """The provider's id for the request (``x-request-id`` at OpenAI, ``request-id`` at
    Anthropic), to quote to its support."""
    return response.headers.get("x-request-id") or response.headers.get("request-id")


def error_text(response: Body) -> str:
    """The provider's own explanation: ``error.message`` (and ``error.type``) of its JSON
    error body, as both OpenAI and Anthropic send it, else the start of the body."""
    reason = response.reason or "error"
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

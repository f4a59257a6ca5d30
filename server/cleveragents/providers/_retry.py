"""What to retry, how long to wait, and the error a provider call ends with.

Kept apart from the HTTP transport (``_http.py``) and free of heavy imports, so that the
sidecar can recognise a :class:`ProviderError` without loading an HTTP client.

The policy follows what the vendors' SDKs do: retry connection failures, timeouts, 408, 409,
429 and 5xx; wait ``base * 2**(n-1)`` seconds capped at ``max_delay_s``, minus up to a quarter
of it at random (jitter, so that clients that failed together do not retry together); but
when the server says how long to wait (``Retry-After`` or ``retry-after-ms``), wait exactly
that, and give up at once when it asks for more than ``max_retry_after_s``.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from cleveragents.tool import LLMResponse, ToolRuntimeError

__all__ = [
    "AnswerTooLargeError",
    "ProviderError",
    "RetryPolicy",
    "is_retryable_status",
    "retry_after_s",
]


def is_retryable_status(status: int) -> bool:
    """Whether a request answered with ``status`` may succeed when sent again."""
    return status in (408, 409, 429) or status >= 500


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How long to wait between attempts (how many attempts is the caller's ``max_retries``).

    ``jitter`` is the fraction of the backoff that is randomised away (0 disables it).
    """

    base_delay_s: float = 0.5
    max_delay_s: float = 8.0
    max_retry_after_s: float = 60.0
    jitter: float = 0.25

    def __post_init__(self) -> None:
        if min(self.base_delay_s, self.max_delay_s, self.max_retry_after_s) < 0:
            raise ValueError("retry delays must not be negative")
        if not 0 <= self.jitter <= 1:
            raise ValueError("jitter must be between 0 and 1")

    def delay(
        self,
        retry: int,
        retry_after: float | None = None,
        *,
        rng: Callable[[], float] = random.random,
    ) -> float | None:
        """Seconds to wait before retry number ``retry`` (1-based); ``None``: do not retry.

        ``retry_after`` is what the server asked for, if anything.
        """
        if retry_after is not None:
            return retry_after if retry_after <= self.max_retry_after_s else None
        backoff = min(self.max_delay_s, self.base_delay_s * 2.0 ** (retry - 1))
        return backoff * (1 - self.jitter * rng())


def retry_after_s(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """The wait a response asks for: ``retry-after-ms``, or ``Retry-After`` in seconds or as an
    HTTP date; ``None`` when absent or unreadable. Never negative."""
    if (ms := headers.get("retry-after-ms")) is not None:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class ProviderError(ToolRuntimeError):
    """A provider call that failed for good: after its retries, or with an unusable answer.

    ``status`` is the HTTP status (``None`` when no response came: connection failure or
    timeout), ``request_id`` the provider's id for the request (from ``x-request-id`` or
    ``request-id``) to quote to its support, ``retryable`` whether a later attempt might
    succeed, ``attempts`` how many requests were sent. The text never holds the API key.

    A stream that broke after its first event sets ``partial``: the text and tool calls that
    had arrived (a call whose arguments were cut off has ``arguments_error`` set).
    """

    def __init__(
        self,
        provider: str,
        message: str,
        *,
        status: int | None = None,
        request_id: str | None = None,
        retryable: bool = False,
        attempts: int = 1,
        where: str = "",
    ) -> None:
        self.provider = provider
        #: Which configuration and endpoint failed (``profile 'prod' at https://…``), when the
        #: caller was given a profile name: a sidecar with several profiles says which one.
        self.where = where
        self.message = message
        self.status = status
        self.request_id = request_id
        self.retryable = retryable
        self.attempts = attempts
        self.partial: LLMResponse | None = None
        super().__init__(provider, message)

    def __str__(self) -> str:
        name = f"{self.provider} {self.where}" if self.where else self.provider
        head = f"{name}: HTTP {self.status}" if self.status is not None else name
        details = [f"request id {self.request_id}"] if self.request_id else []
        if self.attempts > 1:
            details.append(f"{self.attempts} attempts")
        tail = f" ({', '.join(details)})" if details else ""
        return f"{head}: {self.message}{tail}"

    def __repr__(self) -> str:
        return f"ProviderError({str(self)!r})"


class AnswerTooLargeError(ProviderError):
    """A streamed answer that passed its caller's ``max_answer_chars``: the stream was left
    unread from there (the sidecar reports it ``RESOURCE_EXHAUSTED``, as any answer too large
    for one message)."""

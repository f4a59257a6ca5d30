"""A streaming POST: the provider's answer as server-sent events, read as they arrive.

The events are parsed by ``httpx2.EventSource`` (httpx2's own SSE reader, derived from the
maintained ``httpx-sse``): it buffers lines across TCP chunks, skips keep-alive comments and
decodes UTF-8 incrementally, so a character split between two chunks arrives whole. The body
is read as UTF-8 whatever the ``content-type`` says, as the SSE standard requires.

Every event must come within the timeout of the one before: httpx's read timeout alone would
be reset by the keep-alive comments some proxies send forever, so an idle timer re-armed per
event ends such a stream (``UNAVAILABLE``, "no event within …s (only keep-alives)").

Retries follow the transport's policy, but only until the first event has been handed on:
once a piece of the answer has gone out to the run's watchers, a second request could answer
differently, so a stream that breaks after that ends the call with a ``ProviderError``
(``retryable``, hence ``UNAVAILABLE``) that says what had arrived.

Whatever ends the call, the error names the provider's request id once the response has
come: an error event in the stream, or a sink that refuses the answer (too large, say),
included. A sink that raises stops the reading there: the rest of the body is not read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

import httpx2

from cleveragents.providers._http import Reply, Transport, error_text, request_id_of
from cleveragents.providers._retry import ProviderError, is_retryable_status, retry_after_s
from cleveragents.tool.jsontext import Encoder

__all__ = ["MAX_EVENT_BYTES", "EventSink", "post_stream"]

_encode = Encoder(separators=(",", ":"))
#: The largest one event may be: ``response.completed`` repeats the whole answer, so well
#: above httpx2's default of 1 MiB, but bounded, so that a stream without line ends cannot
#: fill the sidecar's memory.
MAX_EVENT_BYTES = 16 * 1024 * 1024
#: The share of a stream's idle timeout by which its timer is re-armed late (see ``_attempt``).
_IDLE_SLACK = 0.01

#: Takes one event of the stream; returns ``True`` when the stream is complete (``[DONE]``,
#: ``message_stop``…), after which the rest of the body is not read.
EventSink = Callable[[httpx2.ServerSentEvent], bool]


class _Broken(Exception):
    """The stream failed after its first event: not retried."""

    def __init__(self, error: ProviderError) -> None:
        self.error = error


async def post_stream(
    transport: Transport,
    url: str,
    headers: Mapping[str, str],
    body: Any,
    sink: EventSink,
    max_event_bytes: int = MAX_EVENT_BYTES,
) -> Reply:
    """POST ``body`` and hand each server-sent event of the answer to ``sink``, in order.

    Returns once the stream is complete, with an empty ``data`` (the sink has the answer), or
    with the JSON object of a server that answered with a whole body instead of a stream (some
    OpenAI-compatible servers ignore ``stream``). Raises ``ProviderError``: after the retries
    for a failure before the first event; at once (``retryable``) for a stream that breaks,
    stalls past the timeout or ends early after it; and whatever ``sink`` raises. An event
    over ``max_event_bytes`` ends the call.
    """
    content = _encode(body).encode()
    headers = {**headers, "accept": "text/event-stream"}
    attempt = 0
    while True:
        attempt += 1
        try:
            return await _attempt(transport, url, headers, content, sink, max_event_bytes)
        except _Broken as broken:
            broken.error.attempts = attempt
            raise broken.error from None
        except _Retry as retry:
            await transport.wait_to_retry(retry.error, attempt, retry.retry_after)


class _Retry(Exception):
    """The attempt failed before its first event: retried if the policy allows."""

    def __init__(self, error: ProviderError, retry_after: float | None = None) -> None:
        self.error = error
        self.retry_after = retry_after


async def _attempt(
    transport: Transport,
    url: str,
    headers: Mapping[str, str],
    content: bytes,
    sink: EventSink,
    max_event_bytes: int,
) -> Reply:
    events = 0
    status: int | None = None
    request_id: str | None = None
    try:
        async with transport.client.stream(
            "POST", url, content=content, headers=headers, timeout=transport.timeout_s
        ) as response:
            status, request_id = response.status_code, request_id_of(response)
            if not response.is_success:
                await response.aread()
                raise _Retry(
                    transport.error(
                        error_text(response),
                        status=status,
                        request_id=request_id,
                        retryable=is_retryable_status(status),
                    ),
                    retry_after_s(response.headers),
                )
            kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
            if kind != "text/event-stream":
                await response.aread()
                return transport.reply(response, request_id)
            response.encoding = "utf-8"
            loop, seen = asyncio.get_running_loop(), 0
            # Re-armed only once this much of the idle time is used, to a deadline this much
            # later than the timeout: never sooner than the timeout after the last event, and
            # not one timer re-armed per event (a fast stream has hundreds a second).
            slack = transport.timeout_s * _IDLE_SLACK
            try:
                async with asyncio.timeout(transport.timeout_s + slack) as idle:
                    source = httpx2.EventSource(response, max_event_size=max_event_bytes)
                    rearm_at = loop.time() + slack
                    async for event in source:
                        events += 1
                        if sink(event):
                            return Reply({}, status, request_id)
                        if (now := loop.time()) >= rearm_at:
                            idle.reschedule(now + transport.timeout_s + slack)
                            rearm_at = now + slack
                        seen = response.num_bytes_downloaded
            except TimeoutError:
                kept_alive = response.num_bytes_downloaded > seen
                what = "no event" if kept_alive else "the stream stalled: no data"
                failure = f"{what} within {transport.timeout_s:g}s"
                failure += " (only keep-alives)" if kept_alive else " (idle timer)"
                _fail(transport, failure, status, request_id, events)
    except ProviderError as error:  # the sink's: an error event, an unusable or too large answer
        if error.request_id is None:
            error.request_id = request_id  # as every other failure names it
        raise
    except (_Retry, _Broken):
        raise
    except httpx2.SSEError as exc:
        raise transport.error(
            f"unusable stream: {exc}", status=status, request_id=request_id
        ) from None
    except httpx2.TimeoutException as exc:
        what = "no response" if status is None else "the stream stalled: no data"
        failure = f"{what} within {transport.timeout_s:g}s ({type(exc).__name__})"
        _fail(transport, failure, status, request_id, events)
    except httpx2.TransportError as exc:
        failure = f"connection failed ({type(exc).__name__}: {exc})"
        _fail(transport, failure, status, request_id, events)
    except httpx2.RequestError as exc:
        raise transport.error(
            f"request failed ({type(exc).__name__}: {exc})", status=status, request_id=request_id
        ) from None
    _fail(transport, "the stream ended before the answer was complete", status, request_id, events)


def _fail(
    transport: Transport, failure: str, status: int | None, request_id: str | None, events: int
) -> NoReturn:
    if not events:
        raise _Retry(transport.error(failure, status=status, request_id=request_id, retryable=True))
    error = transport.error(
        f"the stream broke after {events} event(s): {failure}",
        status=status,
        request_id=request_id,
        retryable=True,
    )
    raise _Broken(error)

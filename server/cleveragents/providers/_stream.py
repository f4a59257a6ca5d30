"""A streaming POST: the provider's answer as server-sent events, read as they arrive.

Each read of the body goes to :class:`~cleveragents.providers.sse.SSEDecoder` whole, and the
events it completes go to the sink together, so that the sink can join the deltas of one read
into one (a provider that is ahead, or a burst, costs per read, not per event). The decoder
buffers lines across reads, skips keep-alive comments and decodes UTF-8 per whole line, so a
character split between two reads arrives whole. The body is read as UTF-8 whatever the
``content-type`` says, as the SSE standard requires.

The response's headers must come within the timeout; after that every event must come within
the timeout of the one before: a read timeout alone would be reset by the keep-alive comments
some proxies send forever, so an idle timer re-armed per read that brought events ends such a
stream (``UNAVAILABLE``, "no event within …s (only keep-alives)"), and nothing else times a
read (a timer re-armed on every read of every stream costs more than the read).

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
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

import aiohttp

from cleveragents.providers._http import (
    Body,
    Reply,
    Transport,
    error_text,
    read_body,
    request_id_of,
)
from cleveragents.providers._retry import ProviderError, is_retryable_status, retry_after_s
from cleveragents.providers.sse import ServerSentEvent, SSEDecoder, SSEError
from cleveragents.tool.jsontext import Encoder

__all__ = ["MAX_EVENT_BYTES", "EventSink", "post_stream"]

_encode = Encoder(separators=(",", ":"))
#: The largest one event may be: ``response.completed`` repeats the whole answer, so well
#: above the 1 MiB SSE readers commonly allow, but bounded, so that a stream without line
#: ends cannot fill the sidecar's memory.
MAX_EVENT_BYTES = 16 * 1024 * 1024
#: The share of a stream's idle timeout by which its timer is re-armed late (see ``_attempt``).
_IDLE_SLACK = 0.01
#: An error body is read this far at most.
_MAX_ERROR_BODY = 64 * 1024

#: Takes the events of one read of the stream, in order (at least one); returns ``True``
#: when they completed it (``[DONE]``, ``message_stop``…), after which the rest of the body
#: is not read.
EventSink = Callable[[Sequence[ServerSentEvent]], bool]


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
    stalls past the timeout or ends early after it; and whatever ``sink`` raises.
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
    timeout_s = transport.timeout_s
    try:  # connected within the timeout, the response's headers within it too
        async with asyncio.timeout(timeout_s * (1 + _IDLE_SLACK)):
            response = await transport.client.post(
                url, data=content, headers=headers, timeout=transport.connecting
            )
    except (aiohttp.ClientError, TimeoutError) as exc:
        _fail(transport, exc, "no response", status, request_id, events)
    try:
        status, request_id = response.status, request_id_of(response)
        if not 200 <= status < 300:
            async with asyncio.timeout(timeout_s):
                data = await read_body(response, _MAX_ERROR_BODY)
            body = Body(status, response.reason or "", response.headers, data or b"")
            raise _Retry(
                transport.error(
                    error_text(body),
                    status=status,
                    request_id=request_id,
                    retryable=is_retryable_status(status),
                ),
                retry_after_s(response.headers),
            )
        kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
        if kind != "text/event-stream":
            async with asyncio.timeout(timeout_s):
                data = await read_body(response, transport.max_body)
            return transport.reply(
                Body(status, response.reason or "", response.headers, data or b""), request_id
            )
        loop, read, seen = asyncio.get_running_loop(), 0, 0
        # Re-armed only once this much of the idle time is used, to a deadline this much
        # later than the timeout: never sooner than the timeout after the last event, and
        # not one timer re-armed per read (a fast stream has hundreds a second).
        slack = timeout_s * _IDLE_SLACK
        decoder = SSEDecoder(max_event_bytes)
        try:
            async with asyncio.timeout(timeout_s + slack) as idle:
                rearm_at = loop.time() + slack
                async for chunk in response.content.iter_any():
                    read += len(chunk)
                    got = decoder.feed(chunk)
                    if not got:
                        continue
                    events += len(got)
                    if sink(got):
                        return Reply({}, status, request_id)
                    if (now := loop.time()) >= rearm_at:
                        idle.reschedule(now + timeout_s + slack)
                        rearm_at = now + slack
                    seen = read
        except TimeoutError:
            kept_alive = read > seen
            what = "no event" if kept_alive else "the stream stalled: no data"
            failure = f"{what} within {timeout_s:g}s"
            failure += " (only keep-alives)" if kept_alive else " (idle timer)"
            _fail(transport, failure, "", status, request_id, events)
    except ProviderError as error:  # the sink's: an error event, an unusable or too large answer
        if error.request_id is None:
            error.request_id = request_id  # as every other failure names it
        raise
    except (_Retry, _Broken):
        raise
    except SSEError as exc:
        raise transport.error(
            f"unusable stream: {exc}", status=status, request_id=request_id
        ) from None
    except (aiohttp.ClientError, TimeoutError) as exc:
        _fail(transport, exc, "the stream stalled: no data", status, request_id, events)
    finally:
        response.release()  # back to the pool when the body was read to its end, else closed
    _fail(
        transport, "the stream ended before the answer was complete", "", status, request_id, events
    )


def _fail(
    transport: Transport,
    failure: str | BaseException,
    waiting: str,
    status: int | None,
    request_id: str | None,
    events: int,
) -> NoReturn:
    """End the attempt: retried when nothing had been handed on (``events``), else broken.
    ``failure`` says why, or is the HTTP client's exception (a timeout while ``waiting``)."""
    if isinstance(failure, BaseException):
        error = transport.failure(failure, waiting)
        if not error.retryable:
            error.status, error.request_id = status, request_id
            raise error
        failure = error.message
    if not events:
        raise _Retry(transport.error(failure, status=status, request_id=request_id, retryable=True))
    error = transport.error(
        f"the stream broke after {events} event(s): {failure}",
        status=status,
        request_id=request_id,
        retryable=True,
    )
    raise _Broken(error)

"""Authentication: every RPC but health checking must come from a known identity.

Clients send ``authorization: Bearer <token>`` metadata, or (with mutual TLS) a certificate
whose subject a ``[clients.NAME]`` table lists. A presented token decides the identity; without
one, the verified certificate's subject does. The handler then runs with its caller bound
(``caller.py``). A missing or wrong credential is ``UNAUTHENTICATED`` before any handler runs,
counted and logged (``rejections.py``).

An unauthenticated peer's request message is never read: gRPC reads a unary request whole
(up to ``max_message_bytes``) before its handler runs, so a refusal that waited for it let 48
peers sending 15 MiB each push the server from 52 MB to 731 MB. Refusals are served by
request-streaming handlers that end the call without reading; gRPC's flow control then
holds at most one window of each refused stream. A call that only a certificate can admit is
served the same way: its subject is checked before its request is read. Health checks
without credentials are answered for the whole server (the empty service name), again
without reading what they ask.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc

from cleveragents.sidecar.identity import ANONYMOUS, Identity
from cleveragents.sidecar.transport.caller import bind_handler, serving_as
from cleveragents.sidecar.transport.credentials import Credentials
from cleveragents.sidecar.transport.rejections import Rejections

__all__ = ["AuthInterceptor"]

_EXEMPT_PREFIX = "/grpc.health.v1.Health/"
_REFUSAL = "missing or invalid credentials: send 'authorization: Bearer <token>' metadata"
_REFUSAL_MTLS = (
    "missing or invalid credentials: send 'authorization: Bearer <token>' metadata, or a "
    "client certificate whose subject a [clients.NAME] table lists"
)
_NO_REQUEST = "the call ended without its request message"
if TYPE_CHECKING:
    Handler = grpc.RpcMethodHandler[Any, Any]
    Context = grpc.aio.ServicerContext[Any, Any]


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Serves each call as the identity its credentials stand for, and refuses the rest."""

    def __init__(self, credentials: Credentials, rejections: Rejections) -> None:
        if not credentials.required:
            raise ValueError("no credentials to check")
        self.credentials = credentials
        self.rejections = rejections
        self._refusal = _REFUSAL_MTLS if credentials.subjects else _REFUSAL
        #: Each handler bound to each identity, made once: methods times identities, bounded.
        self._bound: dict[tuple[Handler, Identity], Handler] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        presented: bytes | None = None
        for key, value in handler_call_details.invocation_metadata or ():
            if key == "authorization":
                presented = value.encode() if isinstance(value, str) else bytes(value)
                break
        if presented is not None:
            identity = self.credentials.by_token(presented)
            if identity is not None:
                bound = self._bound.get((handler, identity))
                if bound is None:
                    bound = self._bound[(handler, identity)] = bind_handler(identity, handler)
                return bound
        exempt = method.startswith(_EXEMPT_PREFIX)
        if exempt:
            return _unread(handler)
        if presented is None and self.credentials.subjects:
            return self._by_certificate(handler, method)
        reason = "no token" if presented is None else "unknown token"
        return self._refused(handler, method, reason)

    def _refused(self, handler: Handler, method: str, reason: str) -> Handler:
        """A handler for ``handler``'s method that answers ``UNAUTHENTICATED`` unread."""
        rejections, refusal = self.rejections, self._refusal

        async def unary(requests: AsyncIterator[Any], context: Context) -> Any:
            rejections.reject(context.peer(), method, reason)
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, refusal)

        async def streaming(requests: AsyncIterator[Any], context: Context) -> AsyncIterator[Any]:
            rejections.reject(context.peer(), method, reason)
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, refusal)
            yield  # pragma: no cover - makes this an async generator

        return _request_streaming(handler, unary, streaming)

    def _by_certificate(self, handler: Handler, method: str) -> Handler:
        """``handler`` admitted by its peer certificate's subject, checked before any read."""
        credentials, rejections, refusal = self.credentials, self.rejections, self._refusal

        async def admit(context: Context) -> Identity:
            subjects = context.auth_context().get("x509_subject", [])
            identity = credentials.by_subject(subjects)
            if identity is None:
                rejections.reject(context.peer(), method, "certificate subject not listed")
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, refusal)
            assert identity is not None  # abort raises
            serving_as(identity)
            return identity

        if handler.request_streaming:
            behaviour: Any = handler.stream_stream or handler.stream_unary

            async def passthrough(requests: AsyncIterator[Any], context: Context) -> Any:
                await admit(context)
                return await behaviour(requests, context)

            if handler.stream_stream is not None:
                return handler._replace(stream_stream=passthrough)  # type: ignore[attr-defined, no-any-return]
            return handler._replace(stream_unary=passthrough)  # type: ignore[attr-defined, no-any-return]
        behaviour = handler.unary_unary or handler.unary_stream

        async def unary(requests: AsyncIterator[Any], context: Context) -> Any:
            await admit(context)
            async for request in requests:
                return await behaviour(request, context)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, _NO_REQUEST)

        async def streaming(requests: AsyncIterator[Any], context: Context) -> None:
            await admit(context)
            async for request in requests:
                result = behaviour(request, context)
                if isinstance(result, AsyncIterator):
                    async for response in result:
                        await context.write(response)
                else:
                    await result
                return
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, _NO_REQUEST)

        return _request_streaming(handler, unary, streaming)


def _unread(handler: Handler) -> Handler:
    """``handler`` serving its method's default request instead of the one sent (unread)."""
    default = handler.request_deserializer(b"") if handler.request_deserializer else b""
    behaviour: Any = handler.unary_unary or handler.unary_stream
    if handler.request_streaming or behaviour is None:
        return _refusal(handler)  # no exempt method streams its requests

    async def unary(requests: AsyncIterator[Any], context: Context) -> Any:
        serving_as(ANONYMOUS)
        return await behaviour(default, context)

    async def streaming(requests: AsyncIterator[Any], context: Context) -> AsyncIterator[Any]:
        serving_as(ANONYMOUS)  # health Watch streams count such callers apart
        result = behaviour(default, context)
        if isinstance(result, AsyncIterator):
            async for response in result:
                yield response
        else:
            await result

    return _request_streaming(handler, unary, streaming)


def _refusal(handler: Handler) -> Handler:
    """``UNAUTHENTICATED``, unread and uncounted (an exempt method that streams requests)."""

    async def unary(requests: AsyncIterator[Any], context: Context) -> Any:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, _REFUSAL)

    async def streaming(requests: AsyncIterator[Any], context: Context) -> AsyncIterator[Any]:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, _REFUSAL)
        yield  # pragma: no cover - makes this an async generator

    return _request_streaming(handler, unary, streaming)


def _request_streaming(
    handler: Handler,
    unary: Callable[[AsyncIterator[Any], Context], Awaitable[Any]],
    streaming: Callable[[AsyncIterator[Any], Context], Any],
) -> Handler:
    """A handler of ``handler``'s response shape whose requests gRPC reads only on demand."""
    options = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(streaming, **options)
    return grpc.stream_unary_rpc_method_handler(unary, **options)

"""The identity of the call being served, for the servicer (never for the core).

The auth interceptor wraps each handler so that it runs with its caller bound here; a sidecar
without credentials binds nothing, and every call is ``DEFAULT_IDENTITY``.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from cleveragents.sidecar.identity import DEFAULT_IDENTITY, Identity

if TYPE_CHECKING:
    import grpc

    Handler = grpc.RpcMethodHandler[Any, Any]

__all__ = ["as_caller", "bind_handler", "current_caller", "serving_as"]

_CALLER: ContextVar[Identity] = ContextVar("cleveragents_caller", default=DEFAULT_IDENTITY)


def current_caller() -> Identity:
    """Who makes the call being served."""
    return _CALLER.get()


def serving_as(identity: Identity) -> None:
    """Bind the call being served (its own task) to ``identity``."""
    _CALLER.set(identity)


def as_caller(identity: Identity, behaviour: Callable[..., Any]) -> Callable[..., Any]:
    """``behaviour`` (a handler's function, a coroutine or an async generator function) run
    with ``identity`` as its caller."""
    if inspect.isasyncgenfunction(behaviour):

        async def streaming(request: Any, context: Any) -> AsyncIterator[Any]:
            _CALLER.set(identity)
            async for response in behaviour(request, context):
                yield response

        return streaming

    async def call(request: Any, context: Any) -> Any:
        _CALLER.set(identity)
        return await behaviour(request, context)

    return call


def bind_handler(identity: Identity, handler: Handler) -> Handler:
    """``handler`` with each of its behaviours run as ``identity``."""
    kinds = ("unary_unary", "unary_stream", "stream_unary", "stream_stream")
    replaced = {
        kind: as_caller(identity, getattr(handler, kind))
        for kind in kinds
        if getattr(handler, kind) is not None
    }
    return handler._replace(**replaced)  # type: ignore[attr-defined, no-any-return]

"""The service's gRPC method handlers: lenient request parsing, and frames sent as they are.

A request that does not parse reaches its handler as ``Malformed``, so that the client gets
``INVALID_ARGUMENT`` naming the problem instead of gRPC's generic ``UNKNOWN``. Streaming
responses are already-encoded bytes (frames joined behind a field tag): they are sent through
an identity serialiser.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf.message import DecodeError

from cleveragents.toolruntime.v1 import service_pb2, session_pb2

if TYPE_CHECKING:
    from cleveragents.sidecar.transport.service import ToolRuntimeService

__all__ = ["SERVICE_NAME", "Malformed", "generic_handler"]

SERVICE_NAME = service_pb2.DESCRIPTOR.services_by_name["ToolRuntimeService"].full_name

#: Unary RPCs: the handler's name is the RPC's, its messages are ``<Name>Request/Response``.
_UNARY = ("RunToolLoop", "GetRun", "CancelRun", "DecideApproval", "ListRuns", "ListTools")
#: Server-streaming RPCs, which send pre-encoded frames.
_STREAMING = ("StreamToolLoop", "WatchRun")
#: Unary RPCs whose response is already encoded (frames joined behind their tags).
_UNARY_FRAMES = ("GetRunHistory",)


class Malformed:
    """Stands in for a request that did not parse."""

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message


def _identity(data: bytes) -> bytes:
    return data


def _lenient(message_type: Any) -> Callable[[bytes], Any]:
    name = message_type.DESCRIPTOR.name

    def parse(data: bytes) -> Any:
        try:
            return message_type.FromString(data)
        except DecodeError as exc:
            return Malformed(f"malformed {name}: {exc}")

    return parse


def _guarded(method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    async def handler(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        if isinstance(request, Malformed):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)
        return await method(request, context)

    return handler


def generic_handler(service: ToolRuntimeService) -> grpc.GenericRpcHandler:
    """Every method of ``ToolRuntimeService``, served by ``service``."""
    pb = service_pb2
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
        name: grpc.unary_unary_rpc_method_handler(
            _guarded(getattr(service, name)),
            request_deserializer=_lenient(getattr(pb, f"{name}Request")),
            response_serializer=getattr(pb, f"{name}Response").SerializeToString,
        )
        for name in _UNARY
    }
    for name in _UNARY_FRAMES:
        handlers[name] = grpc.unary_unary_rpc_method_handler(
            _guarded(getattr(service, name)),
            request_deserializer=_lenient(getattr(pb, f"{name}Request")),
            response_serializer=_identity,
        )
    for name in _STREAMING:
        handlers[name] = grpc.unary_stream_rpc_method_handler(
            _guarded(getattr(service, name)),
            request_deserializer=_lenient(getattr(pb, f"{name}Request")),
            response_serializer=_identity,
        )
    handlers["Session"] = grpc.stream_stream_rpc_method_handler(
        service.Session,
        request_deserializer=_lenient(session_pb2.SessionRequest),
        response_serializer=_identity,
    )
    handlers["FollowRun"] = grpc.stream_stream_rpc_method_handler(
        service.FollowRun,
        request_deserializer=_lenient(service_pb2.FollowRunRequest),
        response_serializer=_identity,
    )
    return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)

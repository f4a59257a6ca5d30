"""Server reflection under both names clients use: ``grpc.reflection.v1`` (today's grpcurl,
Go's ``grpcreflect``, Postman) and the older ``grpc.reflection.v1alpha``.

grpcio-reflection (1.85) implements v1alpha only. The two protocols are the same messages under
another package name, byte for byte on the wire, so the v1alpha servicer answers v1 calls too;
v1's descriptor is v1alpha's renamed, so that reflection can describe itself under either name.
"""

from __future__ import annotations

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection, reflection_pb2
from grpc_reflection.v1alpha._async import ReflectionServicer

__all__ = ["V1_SERVICE_NAME", "enable_reflection"]

V1_SERVICE_NAME = "grpc.reflection.v1.ServerReflection"
_V1_FILE = "grpc/reflection/v1/reflection.proto"


def enable_reflection(service_names: tuple[str, ...], server: grpc.aio.Server) -> None:
    """Serve reflection v1 and v1alpha, listing ``service_names`` and both reflections."""
    _register_v1_descriptor()
    names = (*service_names, V1_SERVICE_NAME, reflection.SERVICE_NAME)
    reflection.enable_server_reflection(names, server)
    servicer = ReflectionServicer(names)
    method = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(V1_SERVICE_NAME, {"ServerReflectionInfo": method}),)
    )


def _register_v1_descriptor() -> None:
    """Put v1's file in the default pool (once; a library that ships it wins)."""
    pool = descriptor_pool.Default()
    try:
        pool.FindFileByName(_V1_FILE)
        return
    except KeyError:
        pass
    try:
        pool.FindServiceByName(V1_SERVICE_NAME)
        return
    except KeyError:
        pass
    file = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(file)
    file.name, file.package = _V1_FILE, "grpc.reflection.v1"
    old, new = ".grpc.reflection.v1alpha.", ".grpc.reflection.v1."
    for message in file.message_type:
        for field in message.field:
            if field.type_name.startswith(old):  # assigning "" would mark it set
                field.type_name = field.type_name.replace(old, new)
    for service in file.service:
        for rpc in service.method:
            rpc.input_type = rpc.input_type.replace(old, new)
            rpc.output_type = rpc.output_type.replace(old, new)
    pool.Add(file)

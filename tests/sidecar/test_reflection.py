"""Server reflection v1, the protocol today's grpcurl and Go's grpcreflect speak (v1alpha is
tested with the rest of the server's life in test_lifecycle.py)."""

from __future__ import annotations

import asyncio

import grpc
from grpc_reflection.v1alpha import reflection_pb2

from .conftest import WAIT_S

SERVICE = "cleveragents.toolruntime.v1.ToolRuntimeService"


async def reflect_v1(
    channel: grpc.aio.Channel, request: reflection_pb2.ServerReflectionRequest
) -> reflection_pb2.ServerReflectionResponse:
    """One exchange over reflection v1, as today's grpcurl and Go clients speak it (its
    messages are v1alpha's, byte for byte)."""
    info = channel.stream_stream(
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    call_ = info()
    await call_.write(request)
    async with asyncio.timeout(WAIT_S):
        response = await call_.read()
    await call_.done_writing()
    assert isinstance(response, reflection_pb2.ServerReflectionResponse)
    return response


async def test_reflection_v1_lists_the_services(channel: grpc.aio.Channel) -> None:
    response = await reflect_v1(channel, reflection_pb2.ServerReflectionRequest(list_services=""))

    names = {s.name for s in response.list_services_response.service}
    assert {SERVICE, "grpc.reflection.v1.ServerReflection"} <= names


async def test_reflection_v1_describes_the_service_and_itself(channel: grpc.aio.Channel) -> None:
    for symbol, expected in (
        (SERVICE, b"ToolRuntimeService"),
        ("grpc.reflection.v1.ServerReflection", b"grpc/reflection/v1/reflection.proto"),
    ):
        request = reflection_pb2.ServerReflectionRequest(file_containing_symbol=symbol)
        response = await reflect_v1(channel, request)

        files = response.file_descriptor_response.file_descriptor_proto
        assert any(expected in f for f in files), symbol

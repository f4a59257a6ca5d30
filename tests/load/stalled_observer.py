"""A FollowRun observer that stalls: ``python stalled_observer.py ADDRESS TOKEN COUNT`` opens
COUNT ``FollowRun`` streams of run ``big`` on one connection, with the smallest windows gRPC
allows it to grant (no BDP probing), and never reads them; it prints each call's status as it
ends ("CODE details"). A token of "" sends no credentials."""

import asyncio
import sys
from typing import Any

import grpc

from cleveragents.toolruntime.v1 import service_pb2, service_pb2_grpc


async def main() -> None:
    address, token, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    metadata = (("authorization", f"Bearer {token}"),) if token else ()
    options = [
        ("grpc.max_receive_message_length", 1 << 25),
        ("grpc.http2.bdp_probe", 0),
        ("grpc.http2.lookahead_bytes", 65536),
    ]
    async with grpc.aio.insecure_channel(address, options=options) as channel:
        stub = service_pb2_grpc.ToolRuntimeServiceStub(channel)
        start = service_pb2.FollowRunRequest(start=service_pb2.FollowRunStart(run_id="big"))
        calls = [stub.FollowRun(metadata=metadata) for _ in range(count)]
        for call in calls:
            await call.write(start)

        async def ended(call: grpc.aio.StreamStreamCall[Any, Any]) -> None:
            code = await call.code()
            print(code.name, await call.details(), flush=True)

        await asyncio.gather(*(ended(call) for call in calls))


if __name__ == "__main__":
    asyncio.run(main())

"""Fuzz the sidecar's request parsers: bytes -> protobuf -> every check a request meets.

Run with `make fuzz` (atheris, coverage-guided). A ``SessionRequest`` goes through what the
sidecar does with it: ``cleveragents.wire`` converts it, and a start is assembled into a run
(``RunAssembler``), the checks of every RPC that starts one. Any exception other than the ones
the service turns into a status (DecodeError and ValueError -> INVALID_ARGUMENT, SidecarError
-> its code) is a finding.
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports():
    from google.protobuf.message import DecodeError

    from cleveragents.sidecar import SidecarConfig
    from cleveragents.sidecar.assembly import RunAssembler
    from cleveragents.sidecar.errors import SidecarError
    from cleveragents.sidecar.hosted import ClientHost
    from cleveragents.sidecar.tool_sources import default_registry
    from cleveragents.toolruntime.v1 import session_pb2
    from cleveragents.wire import (
        llm_answer_from_pb,
        parse_json,
        session_opening_from_pb,
        tool_answer_from_pb,
    )

CONFIG = SidecarConfig()
ASSEMBLER = RunAssembler(CONFIG, default_registry(CONFIG))


def test_one_input(data: bytes) -> None:
    try:
        request = session_pb2.SessionRequest.FromString(data)
    except DecodeError:
        return
    try:
        kind = request.WhichOneof("kind")
        if kind == "start":
            opening = session_opening_from_pb(request.start)
            ASSEMBLER.assemble(
                opening.request,
                call_deadline_s=None,
                host=ClientHost(CONFIG.limits.default_tool_timeout_s),
                client_tools=opening.tools,
                client_llm=opening.client_llm,
            )
        elif kind == "tool_result":
            answer = tool_answer_from_pb(request.tool_result)
            if answer.output.strip():
                parse_json(answer.output, "output")
        elif kind == "llm_result":
            llm_answer_from_pb(request.llm_result)
    except (SidecarError, ValueError):
        pass


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()

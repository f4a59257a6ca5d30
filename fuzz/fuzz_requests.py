"""Fuzz the sidecar's request parsers: bytes -> protobuf -> every check a request meets.

Run with `make fuzz` (atheris, coverage-guided). Any exception other than the ones the
service turns into a status (DecodeError -> INVALID_ARGUMENT, SidecarError -> its code) is
a finding.
"""

from __future__ import annotations

import contextlib
import sys

import atheris

with atheris.instrument_imports():
    from google.protobuf.message import DecodeError

    from cleveragents.sidecar import SidecarConfig, convert
    from cleveragents.sidecar.errors import SidecarError
    from cleveragents.sidecar.profiles import resolve_llm
    from cleveragents.sidecar.service import _client_specs
    from cleveragents.toolruntime.v1 import session_pb2, types_pb2

CONFIG = SidecarConfig()


def check_spec(spec: types_pb2.RunSpec, client_llm: bool) -> None:
    """What the service does with a spec before a run starts."""
    with contextlib.suppress(ValueError):
        convert.context_from_pb(spec.context)
    resolve_llm(spec.llm, CONFIG, client_llm=client_llm)


def test_one_input(data: bytes) -> None:
    try:
        request = session_pb2.SessionRequest.FromString(data)
    except DecodeError:
        return
    try:
        kind = request.WhichOneof("kind")
        if kind == "start":
            _client_specs(request.start.tools)
            check_spec(request.start.spec, request.start.client_llm)
        elif kind == "tool_result" and request.tool_result.WhichOneof("outcome") == "output":
            convert.parse_json_object(request.tool_result.output, "output")
        elif kind == "llm_result":
            for call in request.llm_result.tool_calls:
                convert.call_from_pb(call)
    except (SidecarError, ValueError):
        pass


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()

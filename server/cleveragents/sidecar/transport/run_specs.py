"""A ``RunSpec`` read into a ``RunRequest``, its output schema checked before the run starts.

The schema's text over ``max_schema_bytes`` is refused unparsed; then it is parsed, measured
and compiled (``sidecar/output_schemas.py``). A large one is read in one of the sidecar's
opening threads rather than on the event loop, as a Session's large tool schemas are, so that
a client sending hostile schemas delays other runs by little.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses

from cleveragents.sidecar.config import SidecarConfig
from cleveragents.sidecar.output_schemas import (
    PreparedSchemas,
    prepare_output,
    refuse_large_output,
)
from cleveragents.sidecar.transport.calls import request_of
from cleveragents.toolruntime.v1 import types_pb2
from cleveragents.wire import RunRequest

__all__ = ["INLINE_SCHEMA_CHARS", "checked_request", "read_request", "refuse_large_spec_output"]

#: Output schemas of at most this many characters are read on the event loop (about 1 ms for
#: 8 KiB); larger ones in a worker thread.
INLINE_SCHEMA_CHARS = 8 * 1024


def refuse_large_spec_output(spec: types_pb2.RunSpec, config: SidecarConfig) -> None:
    """``INVALID_ARGUMENT`` for a spec whose output schema text is over ``max_schema_bytes``
    (measured without parsing it)."""
    text = spec.output_schema.schema
    if len(text) > config.limits.max_schema_bytes // 4:
        refuse_large_output(len(text.encode("utf-8", "replace")), config)


#: The output schemas this process prepared last (see ``output_schemas.PreparedSchemas``).
_PREPARED = PreparedSchemas()


def checked_request(spec: types_pb2.RunSpec, config: SidecarConfig) -> RunRequest:
    """The request ``spec`` stands for, its output schema measured and compiled (or the same
    schema as prepared for an earlier run); ``SidecarError`` (``INVALID_ARGUMENT``) names what
    is refused."""
    refuse_large_spec_output(spec, config)
    request = request_of(spec)
    if request.output is None:
        return request
    pb = spec.output_schema
    limits = (
        config.limits.max_schema_depth,
        config.limits.max_schema_expansion,
        config.limits.max_validation_steps,
    )
    key = (pb.name, pb.schema, pb.description, *limits)
    known = _PREPARED.get(key)
    if known is not None:
        return dataclasses.replace(request, output=known)
    _PREPARED.keep(key, prepare_output(request.output, config))
    return request


async def read_request(
    spec: types_pb2.RunSpec, config: SidecarConfig, workers: concurrent.futures.Executor
) -> RunRequest:
    """:func:`checked_request`, in one of ``workers`` when the output schema is large."""
    if len(spec.output_schema.schema) <= INLINE_SCHEMA_CHARS:
        return checked_request(spec, config)
    refuse_large_spec_output(spec, config)  # a too-large text never takes a thread
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(workers, checked_request, spec, config)

"""A ``Session``'s first message read into an opening and a host, its client tools checked.

A client's tool schemas are measured before anything is compiled: text over
``max_schema_bytes`` is refused unparsed; a schema nesting deeper than ``max_schema_depth``,
expanding to more than ``max_schema_expansion`` subschemas, or referring outside itself is
refused (``INVALID_ARGUMENT`` naming the tool and the limit). Validating one call then costs
about the expansion times the number of JSON values in its arguments, so a call of a costly
schema may carry at most ``max_validation_steps`` / expansion values (more is a failed record,
``invalid_arguments``). Parsing, measuring and compiling
large schemas run in a worker thread that hands the GIL back every millisecond, so a thousand
large schemas arriving together delay other runs by about that, not by the whole batch.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable, Sequence

from cleveragents.sidecar.config import SidecarConfig
from cleveragents.sidecar.errors import SidecarError
from cleveragents.sidecar.hosted import ClientHost
from cleveragents.sidecar.output_schemas import prepare_output
from cleveragents.sidecar.transport.run_specs import refuse_large_spec_output
from cleveragents.tool import ToolSpec
from cleveragents.tool.execution.schemacost import SchemaCostError, measure_schema
from cleveragents.toolruntime.v1 import session_pb2
from cleveragents.wire import SessionOpening, session_opening_from_pb

__all__ = ["open_session", "read_opening"]

#: A schema expanding to at most this many subschemas costs about what parsing the arguments
#: did: its calls' arguments are not counted.
_CHEAP_EXPANSION = 32
#: Sessions whose schemas hold at most this many characters in all open on the event loop
#: (measured: about 1 ms for 8 KiB); larger ones in a worker thread.
_INLINE_SCHEMA_CHARS = 8 * 1024
#: How much work a worker thread does between hand-offs of the GIL.
_HANDOFF_S = 0.001


async def read_opening(
    start: session_pb2.SessionStart,
    config: SidecarConfig,
    frame_limit: int,
    workers: concurrent.futures.Executor,
) -> tuple[SessionOpening, ClientHost]:
    """:func:`open_session`, in one of ``workers`` when the client's schemas are large.

    Small ones (most sessions) open on the loop: a thread hop would cost more than the work.
    ``workers`` is the sidecar's own pool for openings, not the loop's default one: sync tools
    run there, and a few stuck ones would otherwise keep every new session from opening.
    """
    schemas = sum(len(tool.input_schema) for tool in start.tools)
    if schemas + len(start.spec.output_schema.schema) <= _INLINE_SCHEMA_CHARS:
        return open_session(start, config, frame_limit)
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(
        workers, open_session, start, config, frame_limit, _GilHandoff()
    )


def open_session(
    start: session_pb2.SessionStart,
    config: SidecarConfig,
    frame_limit: int,
    pause: Callable[[], None] = lambda: None,
) -> tuple[SessionOpening, ClientHost]:
    """The opening ``start`` asks for, and the host of its tools with their schemas compiled;
    ``SidecarError`` (``INVALID_ARGUMENT``) names what is refused. ``frame_limit`` is the
    largest invocation one message to the client may carry; ``pause`` is called between
    tools (in a worker thread, to let the event loop have the GIL)."""
    declared, cap = len(start.tools), config.limits.max_session_tools
    if declared > cap:
        raise SidecarError.invalid(
            f"start.tools declares {declared} tools, more than this sidecar's "
            f"max_session_tools of {cap}"
        )
    _check_sizes(start, config.limits.max_schema_bytes)
    refuse_large_spec_output(start.spec, config)
    try:
        opening = session_opening_from_pb(start)
    except ValueError as exc:
        raise SidecarError.invalid(str(exc)) from None
    if opening.request.output is not None:
        pause()
        prepare_output(opening.request.output, config)
    _check_timeouts(opening.tools, config.limits.max_client_tool_timeout_s)
    costs = _check_costs(opening.tools, config, pause)
    host = ClientHost(
        config.limits.default_tool_timeout_s,
        incremental_messages=opening.incremental_messages,
        llm_timeout_s=config.limits.client_llm_timeout_s,
        max_message_bytes=frame_limit,
    )
    steps = config.limits.max_validation_steps
    caps = [steps // cost if cost > _CHEAP_EXPANSION else None for cost in costs]
    try:
        host.prepare_tools(opening.tools, caps, pause)
    except ValueError as exc:
        raise SidecarError.invalid(f"start.tools: {exc}") from None
    return opening, host


def _check_sizes(start: session_pb2.SessionStart, cap: int) -> None:
    for index, tool in enumerate(start.tools):
        text = tool.input_schema
        if len(text) > cap // 4 and (size := len(text.encode("utf-8", "replace"))) > cap:
            raise SidecarError.invalid(
                f"start.tools[{index}] ({_short(tool.name)!r}) has an input_schema of {size} "
                f"bytes, more than this sidecar's max_schema_bytes of {cap}"
            )


def _check_timeouts(tools: Sequence[ToolSpec], longest: float) -> None:
    """No client tool may hold its run slot longer than the sidecar allows."""
    for spec in tools:
        if spec.timeout_s is not None and spec.timeout_s > longest:
            raise SidecarError.invalid(
                f"tools[{spec.name}].timeout of {spec.timeout_s:g}s is longer than this "
                f"sidecar's max_client_tool_timeout_s of {longest:g}s"
            )


def _check_costs(
    tools: Sequence[ToolSpec], config: SidecarConfig, pause: Callable[[], None]
) -> list[int]:
    """Each schema's expansion; ``SidecarError`` for the first over a limit."""
    costs = []
    for index, spec in enumerate(tools):
        pause()
        try:
            cost = measure_schema(
                spec.input_schema,
                max_depth=config.limits.max_schema_depth,
                max_expansion=config.limits.max_schema_expansion,
            )
        except SchemaCostError as exc:
            limit = exc.limit
            why = f" (this sidecar's {limit} is {config.setting(limit)})" if limit else ""
            raise SidecarError.invalid(
                f"start.tools[{index}] ({_short(spec.name)!r}) has an input_schema that {exc}{why}"
            ) from None
        costs.append(cost.expansion)
    return costs


class _GilHandoff:
    """Called between tools in a worker thread: hands the GIL to the event loop once per
    millisecond of work, not 5 ms later (Python's switch interval) nor at every tool (a
    ``sleep(0)`` costs tens of microseconds)."""

    __slots__ = ("_since",)

    def __init__(self) -> None:
        self._since = time.perf_counter()

    def __call__(self) -> None:
        if time.perf_counter() - self._since >= _HANDOFF_S:
            time.sleep(0)
            self._since = time.perf_counter()


def _short(name: str) -> str:
    return name if len(name) <= 64 else name[:64] + "…"

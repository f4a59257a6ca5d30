"""What every RPC handler shares: ending a call with the status a refusal maps to, and
reading a ``RunSpec`` as a request."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn

import grpc

from cleveragents.sidecar.errors import SidecarError
from cleveragents.sidecar.status import status_of
from cleveragents.toolruntime.v1 import types_pb2
from cleveragents.wire import RunRequest, run_request_from_pb

if TYPE_CHECKING:
    from cleveragents.sidecar.runs import Run

__all__ = [
    "DEADLINE_SLACK_S", "MAX_STATUS_MESSAGE", "Context", "abort", "bounded", "end_if_lost",
    "read_start", "request_of",
]  # fmt: skip

#: A client that gives up this close to its deadline gave up *at* it (clocks differ).
DEADLINE_SLACK_S = 0.1
#: The longest status message sent, in characters. The message travels in a trailer
#: (percent-encoded: up to three bytes a character), and gRPC refuses metadata over 8 KiB: a
#: message quoting a huge value would otherwise turn the status into RESOURCE_EXHAUSTED.
MAX_STATUS_MESSAGE = 1024

Context = grpc.aio.ServicerContext[Any, Any]


async def abort(context: Context, error: SidecarError) -> NoReturn:
    """End the call with the status that ``error`` maps to, and its (bounded) message."""
    await context.abort(status_of(error), bounded(error.message))
    raise AssertionError("unreachable: abort raises")  # pragma: no cover


async def end_if_lost(run: Run, context: Context) -> None:
    """End a stream of ``run`` with ``FAILED_PRECONDITION`` if another sidecar took it over
    (``Run.lose``): its copy here stopped, its log goes on there."""
    if run.lost is not None:
        await abort(context, run.lost)


async def read_start(context: Context, message_type: Any) -> Any | None:
    """The first message of a bidi call, which must be a ``message_type`` with ``kind`` set to
    ``start`` (else the call ends: ``INVALID_ARGUMENT`` if it did not parse,
    ``FAILED_PRECONDITION`` if it is another kind); ``None`` if the client sent nothing."""
    first = await context.read()
    if first is grpc.aio.EOF:
        return None
    if not isinstance(first, message_type):  # did not parse
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(first.message))
    kind = first.WhichOneof("kind")
    if kind != "start":
        await context.abort(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"the first {message_type.DESCRIPTOR.name} must be 'start', got "
            f"{kind or 'an empty message'!r}",
        )
    return first


def bounded(message: str, limit: int = MAX_STATUS_MESSAGE) -> str:
    """``message``, cut in its middle to ``limit`` characters: its start says what went wrong
    and its end often what would be right (a list of the known names, say)."""
    if len(message) <= limit:
        return message
    cut = f" [... {len(message) - limit} characters cut ...] "
    head = (limit - len(cut)) * 2 // 3
    tail = limit - len(cut) - head
    return message[:head] + cut + message[-tail:]


def request_of(spec: types_pb2.RunSpec) -> RunRequest:
    """The request a ``RunSpec`` stands for; ``INVALID_ARGUMENT`` names a malformed field."""
    try:
        return run_request_from_pb(spec)
    except ValueError as exc:
        raise SidecarError.invalid(str(exc)) from None

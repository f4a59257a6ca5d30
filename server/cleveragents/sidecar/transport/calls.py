"""What every RPC handler shares: the size limits of its messages, ending a call with the
status a refusal maps to, and reading a ``RunSpec`` as a request."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

import grpc

from cleveragents.sidecar.config import SidecarConfig
from cleveragents.sidecar.errors import SidecarError
from cleveragents.sidecar.status import status_of
from cleveragents.toolruntime.v1 import types_pb2
from cleveragents.wire import RunRequest, batch_limit, event_limit, run_request_from_pb

if TYPE_CHECKING:
    from cleveragents.sidecar.runs import Run

__all__ = [
    "MAX_STATUS_MESSAGE", "Context", "Limits", "abort", "bounded", "end_if_lost", "metadata_of",
    "read_start", "request_of",
]  # fmt: skip

#: A watcher's messages stay this small (unless one event is larger): gRPC holds about two.
WATCH_BATCH_BYTES = 64 * 1024
#: The longest status message sent, in characters. The message travels in a trailer
#: (percent-encoded: up to three bytes a character), and gRPC refuses metadata over 8 KiB: a
#: message quoting a huge value would otherwise turn the status into RESOURCE_EXHAUSTED.
MAX_STATUS_MESSAGE = 1024

Context = grpc.aio.ServicerContext[Any, Any]


@dataclass(frozen=True, slots=True)
class Limits:
    """How large the messages of a stream may be: ``batch`` (a batch of events),
    ``frame`` (one event, or a page of a run's history) and ``watch_batch`` (a watcher's
    message, unless one event is larger)."""

    batch: int
    frame: int
    watch_batch: int

    @classmethod
    def of(cls, config: SidecarConfig) -> Limits:
        """The limits ``max_message_bytes`` sets."""
        batch = batch_limit(config.limits.max_message_bytes)
        return cls(
            batch, event_limit(config.limits.max_message_bytes), min(batch, WATCH_BATCH_BYTES)
        )


def metadata_of(context: Context) -> dict[str, str]:
    """The call's text metadata (binary values left out), for the run's observers."""
    return {
        str(key): value
        for key, value in (context.invocation_metadata() or ())
        if isinstance(value, str)
    }


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

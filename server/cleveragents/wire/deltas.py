"""LLM deltas on the wire: the ``llm_delta`` event (live, sequence 0), coalescing, and a
client-hosted LLM's ``LlmResultDelta``.

A delta frame is a ``RunEvent`` frame like any other, so it joins the same response messages;
its sequence is 0 and ``after_sequence`` says where in the numbered log it belongs.
"""

from __future__ import annotations

from collections.abc import Sequence

from cleveragents.tool import LLMDelta, ResponseDelta, Usage
from cleveragents.toolruntime.v1 import events_pb2, session_pb2, types_pb2
from cleveragents.wire.frames import frame
from cleveragents.wire.timestamps import set_time
from cleveragents.wire.values import usage_from_pb

#: Coalescing stops joining deltas into one once it holds this many characters, so that a
#: joined delta stays far under any message limit.
JOIN_LIMIT = 16 * 1024

__all__ = [
    "JOIN_LIMIT",
    "coalesce",
    "delta_frames",
    "delta_from_pb",
    "fill_delta",
    "join_delta_requests",
    "llm_delta_request",
    "llm_deltas_request",
    "response_delta_from_pb",
]


def fill_delta(pb: events_pb2.LlmDelta, event: LLMDelta, after_sequence: int = 0) -> None:
    """Fill an ``LlmDelta`` message from a core event."""
    pb.iteration, pb.index, pb.count = event.iteration, event.index, event.count
    pb.after_sequence = after_sequence
    if event.text:
        pb.text = event.text
    if event.tool_call_index is not None:
        pb.tool_call_index = event.tool_call_index
        pb.tool_call_id, pb.tool_name = event.tool_call_id, event.tool_name
        pb.arguments = event.arguments
    if event.usage is not None:
        _fill_usage(pb.usage, event.usage)


def _fill_usage(pb: types_pb2.Usage, usage: Usage) -> None:
    """Copy every field of ``usage``, the provider's own total included."""
    pb.input_tokens, pb.output_tokens = usage.input_tokens, usage.output_tokens
    pb.reported_total_tokens = usage.reported_total_tokens


def delta_from_pb(pb: events_pb2.LlmDelta) -> LLMDelta:
    """The core event an ``LlmDelta`` message carries."""
    return LLMDelta(
        pb.iteration,
        pb.index,
        pb.text,
        pb.tool_call_index if pb.HasField("tool_call_index") else None,
        pb.tool_call_id,
        pb.tool_name,
        pb.arguments,
        usage_from_pb(pb.usage) if pb.HasField("usage") else None,
        pb.count or 1,
    )


def coalesce(deltas: Sequence[LLMDelta]) -> list[LLMDelta]:
    """``deltas`` (consecutive ones of one call) with each run of text deltas, and each run of
    one tool call's deltas, joined into one; order, text and arguments are kept exactly."""
    joined: list[LLMDelta] = []
    start = 0
    while start < len(deltas):
        first = deltas[start]
        stop, size = start + 1, len(first.text) + len(first.arguments)
        while stop < len(deltas) and deltas[stop].tool_call_index == first.tool_call_index:
            size += len(deltas[stop].text) + len(deltas[stop].arguments)
            if size > JOIN_LIMIT:
                break
            stop += 1
        if stop == start + 1:
            joined.append(first)
        else:
            run = deltas[start:stop]
            usage: Usage | None = None
            for delta in run:
                usage = delta.usage if delta.usage is not None else usage
            joined.append(
                LLMDelta(
                    first.iteration,
                    first.index,
                    "".join(d.text for d in run),
                    first.tool_call_index,
                    next((d.tool_call_id for d in run if d.tool_call_id), ""),
                    next((d.tool_name for d in run if d.tool_name), ""),
                    "".join(d.arguments for d in run),
                    usage,
                    sum(d.count for d in run),
                )
            )
        start = stop
    return joined


def delta_frames(run_id: str, after_sequence: int, deltas: Sequence[LLMDelta]) -> list[bytes]:
    """The frames of ``deltas`` (coalesced), each a ``RunEvent`` of sequence 0."""
    items = []
    for delta in coalesce(deltas):
        pb = events_pb2.RunEvent(run_id=run_id)
        set_time(pb.time)
        fill_delta(pb.llm_delta, delta, after_sequence)
        items.append(frame(pb))
    return items


def response_delta_from_pb(pb: session_pb2.LlmResultDelta) -> ResponseDelta:
    """The core delta a client-hosted LLM's ``LlmResultDelta`` carries."""
    return ResponseDelta(
        pb.text,
        pb.tool_call_index if pb.HasField("tool_call_index") else None,
        pb.tool_call_id,
        pb.tool_name,
        pb.arguments,
        usage_from_pb(pb.usage) if pb.HasField("usage") else None,
    )


def _fill_result_delta(
    pb: session_pb2.LlmResultDelta, request_id: str, index: int, delta: ResponseDelta
) -> None:
    pb.request_id, pb.index, pb.text = request_id, index, delta.text
    pb.tool_call_id, pb.tool_name, pb.arguments = (
        delta.tool_call_id,
        delta.tool_name,
        delta.arguments,
    )
    if delta.tool_call_index is not None:
        pb.tool_call_index = delta.tool_call_index
    if delta.usage is not None:
        _fill_usage(pb.usage, delta.usage)


def llm_delta_request(
    request_id: str, index: int, delta: ResponseDelta
) -> session_pb2.SessionRequest:
    """A client-hosted LLM's ``index``-th delta of its answer to ``request_id``."""
    request = session_pb2.SessionRequest()
    _fill_result_delta(request.llm_delta, request_id, index, delta)
    return request


def llm_deltas_request(
    request_id: str, first: int, deltas: Sequence[ResponseDelta]
) -> session_pb2.SessionRequest:
    """Deltas ``first``, ``first + 1``… of a client-hosted LLM's answer to ``request_id`` in
    one message (to a sidecar whose invocation ``accepts_delta_batches``); a single delta
    goes as ``llm_delta``, which every sidecar takes."""
    if len(deltas) == 1:
        return llm_delta_request(request_id, first, deltas[0])
    request = session_pb2.SessionRequest()
    batch = request.llm_deltas.deltas
    for index, delta in enumerate(deltas, first):
        _fill_result_delta(batch.add(), request_id, index, delta)
    return request


def join_delta_requests(
    messages: Sequence[session_pb2.SessionRequest],
) -> session_pb2.SessionRequest:
    """Consecutive ``llm_delta`` messages as one ``llm_deltas`` message (one alone as it is)."""
    if len(messages) == 1:
        return messages[0]
    request = session_pb2.SessionRequest()
    request.llm_deltas.deltas.extend(m.llm_delta for m in messages)
    return request

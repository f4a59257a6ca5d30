"""Events that fit in one message: a result without its history, an output cut short.

Every response carries at most one event that does not fit with others, so each frame must
stay under the sidecar's ``max_message_bytes`` less a little room for the message around it.
A frame that fits is sent exactly as it was encoded. One that does not is encoded again:

- a terminal event's result leaves out ``tool_call_history`` (``history_omitted``, with
  ``tool_call_count``): every record is in its own ``tool_call_completed`` event already; if
  that is not enough its ``content`` is cut (``content_truncated``), then its message;
- a ``tool_call_completed`` record keeps the start of its output (``output_truncated``, with
  ``output_bytes``), as the JSON object ``{"truncated_output": "<start of the JSON text>"}``.
- an ``llm_responded`` event leaves out its reasoning's opaque ``items`` (``items_omitted``,
  with ``items_bytes``), keeping the readable summary (cut if need be): the live run still
  has them, and a run resumed from the log sends that turn without them.

Any other event that does not fit raises :class:`OversizedEvent`: the caller ends the run with
a status that says so, rather than let gRPC kill a stream with a message that names nothing.
"""

from __future__ import annotations

import json
from typing import Any

from cleveragents.toolruntime.v1 import events_pb2, types_pb2
from cleveragents.wire.frames import frame

__all__ = ["MESSAGE_HEADROOM", "OversizedEvent", "event_limit", "fit_frame"]

#: Room for what a response puts around one event or result: field tags and lengths, a run id
#: (at most 128 characters), a state and a sequence number; generous on purpose.
MESSAGE_HEADROOM = 1024
_TERMINALS = ("run_completed", "run_failed", "run_cancelled")
_TRUNCATED_KEY = "truncated_output"


class OversizedEvent(ValueError):
    """An event that no re-encoding makes fit in one message."""


def event_limit(max_message_bytes: int) -> int:
    """The largest frame that still fits in one message of ``max_message_bytes``."""
    return max(max_message_bytes - MESSAGE_HEADROOM, MESSAGE_HEADROOM)


def fit_frame(event: events_pb2.RunEvent, limit: int) -> bytes:
    """``event``'s frame, made to fit in ``limit`` bytes as the module says; ``event`` is
    changed in place. ``OversizedEvent`` when it cannot be."""
    kind = event.WhichOneof("payload")
    if kind in _TERMINALS:
        _fit_result(event, getattr(event, kind), limit)
    elif kind == "tool_call_completed":
        _fit_record(event, event.tool_call_completed.record, limit)
    elif kind == "llm_responded" and event.llm_responded.HasField("reasoning"):
        _fit_reasoning(event, event.llm_responded.reasoning, limit)
    item = frame(event)
    if len(item) > limit:
        raise OversizedEvent(
            f"event {event.sequence} ({kind}) of run {event.run_id} is {len(item)} bytes, more "
            f"than the {limit} bytes one message may carry (max_message_bytes less "
            f"{MESSAGE_HEADROOM})"
        )
    return item


def _fit_result(event: events_pb2.RunEvent, payload: Any, limit: int) -> None:
    result: types_pb2.ToolCallRunResult = payload.result
    if result.tool_call_history:
        result.tool_call_count = len(result.tool_call_history)
        result.history_omitted = True
        del result.tool_call_history[:]
    if _over(event, limit) > 0 and result.content:
        result.content = _cut(result.content, _over(event, limit))
        result.content_truncated = True
    for field in ("message", "reason"):  # run_failed's message, run_cancelled's reason
        if _over(event, limit) > 0 and getattr(payload, field, None):
            setattr(payload, field, _cut(getattr(payload, field), _over(event, limit)))


def _fit_record(event: events_pb2.RunEvent, record: types_pb2.ToolCallRecord, limit: int) -> None:
    data = record.output.encode()
    record.output_truncated = True
    record.output_bytes = len(data)
    keep, over = len(data), _over(event, limit)
    quote = _quote if len(data.translate(None, _CONTROLS)) == len(data) else _quote_any
    while over > 0 and keep > 0:
        # The kept start is JSON text quoted again, which escapes its quotes: a round or two
        # more may be needed.
        keep = max(keep - over - 64, 0)
        prefix = data[:keep].decode("utf-8", "ignore")
        record.output = quote(prefix)
        over = _over(event, limit)


#: The characters JSON escapes besides ``"`` and ``\``: none in text the encoder wrote.
_CONTROLS = bytes(range(0x20))
#: ``{"truncated_output": "``, up to the kept text.
_TRUNCATED_START = json.dumps({_TRUNCATED_KEY: ""})[:-2]


def _quote(prefix: str) -> str:
    """``json.dumps({"truncated_output": prefix}, ensure_ascii=False)`` for a ``prefix`` with
    no control character, by two replacements: the encoder's escaping of every other
    character of tens of MiB took several times as long."""
    escaped = prefix.replace("\\", "\\\\").replace('"', '\\"')
    return "".join((_TRUNCATED_START, escaped, '"}'))


def _quote_any(prefix: str) -> str:
    return json.dumps({_TRUNCATED_KEY: prefix}, ensure_ascii=False)


def _fit_reasoning(event: events_pb2.RunEvent, reasoning: types_pb2.Reasoning, limit: int) -> None:
    if reasoning.items:
        reasoning.items_bytes = len(reasoning.items.encode())
        reasoning.items_omitted = True
        reasoning.items = ""
    if _over(event, limit) > 0 and reasoning.summary:
        reasoning.summary = _cut(reasoning.summary, _over(event, limit))


def _over(event: events_pb2.RunEvent, limit: int) -> int:
    """By how many bytes ``event``'s frame is over ``limit`` (negative when under)."""
    size = event.ByteSize()
    return size + len(_varint(size)) - limit


def _varint(size: int) -> bytes:
    out = bytearray()
    while size > 0x7F:
        out.append((size & 0x7F) | 0x80)
        size >>= 7
    out.append(size)
    return bytes(out)


def _cut(text: str, over: int) -> str:
    """``text`` less at least ``over`` bytes (and a margin), cut on a character boundary."""
    data = text.encode()
    return data[: max(len(data) - over - 64, 0)].decode("utf-8", "ignore")

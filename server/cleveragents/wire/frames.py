"""Frames: each run event serialised once, and the response messages made by joining them.

A *frame* is a ``RunEvent``'s length-delimited encoding, which is a whole response message
(``StreamToolLoopResponse``, ``WatchRunResponse`` or ``SessionResponse``) once a field tag is
put in front. One tag byte makes the message that carries one event, in ``event`` (field 1). A
client that sets ``batch_events`` gets the frames waiting for it (two or more) joined behind
the tag of the repeated ``events`` field instead. Either way no event is encoded twice,
whatever the number of streams.
"""

from __future__ import annotations

from collections.abc import Sequence

from cleveragents.toolruntime.v1 import events_pb2

__all__ = [
    "BATCH_BYTES",
    "EVENTS_TAG",
    "SESSION_EVENTS_TAG",
    "Message",
    "batch",
    "batch_limit",
    "follow_message",
    "frame",
    "history_page",
    "session_messages",
    "single",
    "take_frames",
    "unframe",
]

#: The tag of ``event`` (field 1, length-delimited) in all three response messages.
_EVENT_TAG = b"\x0a"
#: The tag of ``events`` in StreamToolLoopResponse and WatchRunResponse (field 2).
EVENTS_TAG = b"\x12"
#: The tag of ``events`` in SessionResponse (field 4).
SESSION_EVENTS_TAG = b"\x22"
#: A batch stops growing at this size (a single larger event still goes, alone), well under
#: the 4 MiB that gRPC clients accept by default.
BATCH_BYTES = 256 * 1024


def batch_limit(max_message_bytes: int) -> int:
    """The frame bytes a batch may gather under a send limit of ``max_message_bytes``.

    Half the limit: the tag added to each frame (one byte for at least two) and an invocation
    that closes a session's batch (counted among the items) then still fit.
    """
    return min(BATCH_BYTES, max_message_bytes // 2)


def frame(event: events_pb2.RunEvent) -> bytes:
    """Serialise ``event`` once, length-delimited: a field of a response minus its tag."""
    data = event.SerializeToString()
    size = len(data)
    if size < 0x80:
        return bytes((size,)) + data
    if size < 0x4000:  # nearly every event: two bytes
        return bytes(((size & 0x7F) | 0x80, size >> 7)) + data
    prefix = bytearray()
    while size > 0x7F:
        prefix.append((size & 0x7F) | 0x80)
        size >>= 7
    prefix.append(size)
    return bytes(prefix) + data


def unframe(item: bytes) -> events_pb2.RunEvent:
    """The ``RunEvent`` inside a frame."""
    index, size, shift = 0, 0, 0
    while True:
        byte = item[index]
        size |= (byte & 0x7F) << shift
        index += 1
        if byte < 0x80:
            break
        shift += 7
    return events_pb2.RunEvent.FromString(item[index : index + size])


def single(item: bytes) -> bytes:
    """The response message carrying one frame, in ``event``."""
    return _EVENT_TAG + item


def batch(frames: Sequence[bytes], tag: bytes = EVENTS_TAG) -> bytes:
    """One response message holding ``frames`` (oldest first) in its ``events`` field ``tag``.

    A single frame goes in ``event``, as for any client: one that asked for batches reads both.
    """
    return single(frames[0]) if len(frames) == 1 else tag + tag.join(frames)


def history_page(frames: Sequence[bytes], last_sequence: int, *, finished: bool) -> bytes:
    """A whole ``GetRunHistoryResponse``: ``frames`` in ``events`` (field 1), then
    ``last_sequence`` (field 2) and ``finished`` (field 3), without decoding any frame."""
    tail = bytearray(b"\x10")
    _append_varint(tail, last_sequence)
    if finished:
        tail += b"\x18\x01"
    body = _EVENT_TAG + _EVENT_TAG.join(frames) if frames else b""
    return body + bytes(tail)


def follow_message(frames: Sequence[bytes], *, ack_requested: bool, window_bytes: int) -> bytes:
    """A whole ``FollowRunResponse``: ``frames`` in ``events`` (field 1), then
    ``ack_requested`` (field 2) and, when not 0, ``window_bytes`` (field 3)."""
    tail = bytearray(b"\x10\x01" if ack_requested else b"")
    if window_bytes:
        tail.append(0x18)
        _append_varint(tail, window_bytes)
    return _EVENT_TAG + _EVENT_TAG.join(frames) + bytes(tail)


def _append_varint(buffer: bytearray, value: int) -> None:
    while value > 0x7F:
        buffer.append((value & 0x7F) | 0x80)
        value >>= 7
    buffer.append(value)


def take_frames(frames: Sequence[bytes], start: int, stop: int, max_bytes: int) -> list[bytes]:
    """``frames[start:stop]``, cut short where (each with its one tag byte) they would pass
    ``max_bytes`` in all; at least one frame when there is one."""
    taken: list[bytes] = []
    size = 0
    for index in range(start, stop):
        item = frames[index]
        size += len(item) + 1
        if taken and size > max_bytes:
            break
        taken.append(item)
    return taken


class Message(bytes):
    """A whole ``SessionResponse`` queued between frames (a session's invocation)."""

    __slots__ = ()


def session_messages(items: Sequence[bytes]) -> list[bytes]:
    """A session's outbox ``items`` packed into as few SessionResponses as order allows.

    Consecutive frames are joined into ``events``, and an invocation (a ``Message``) closes the
    message they lead: the events come before it.
    """
    messages: list[bytes] = []
    start = 0
    for index, item in enumerate(items):
        if isinstance(item, Message):
            if index > start:
                events = SESSION_EVENTS_TAG.join(items[start:index])
                messages.append(b"".join((SESSION_EVENTS_TAG, events, item)))
            else:
                messages.append(bytes(item))  # gRPC takes exactly bytes, not a subclass
            start = index + 1
    if start < len(items):
        messages.append(batch(items[start:], SESSION_EVENTS_TAG))
    return messages

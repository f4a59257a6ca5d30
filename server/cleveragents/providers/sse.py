"""Server-sent events from the bytes of whole reads: every event a read completes, at once.

A provider streams its answer as ``text/event-stream``. :class:`SSEDecoder` takes the body's
bytes as the HTTP client hands them over (one call per read, however the read splits lines or
characters) and returns the events that read completed, so that a reader works per read and
not per line or per event. It follows the WHATWG rules a client needs: lines end with CR LF,
LF or CR (a CR at the end of a read waits for the next, which may bring its LF); a blank line
ends an event; ``event`` names it, ``data`` lines are joined with LF; comments (``:``), ``id``
and ``retry`` are skipped (a provider's stream is never resumed); a leading byte-order mark is
dropped; an event is dispatched only when it has data, and one cut off by the end of the body
is not. Lines end at ASCII bytes, so a character split between two reads is decoded whole
(invalid UTF-8 becomes U+FFFD, as the standard says). What is buffered of an unfinished event
is bounded by ``max_event_bytes``: past it, :class:`SSEError`.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["SSEDecoder", "SSEError", "ServerSentEvent"]

_BOM = b"\xef\xbb\xbf"
#: Makes a ``ServerSentEvent`` from a tuple without the named tuple's Python ``__new__``.
_new = tuple.__new__


class SSEError(ValueError):
    """The stream is not usable as server-sent events (an event past the size bound)."""


class ServerSentEvent(NamedTuple):
    """One event: its type (``message`` unless an ``event`` line named it) and its data."""

    event: str
    data: str


class SSEDecoder:
    """Splits a ``text/event-stream`` body into events, read by read (module docstring)."""

    __slots__ = ("_cr", "_head", "_parts", "_plain", "_size", "max_event_bytes")

    def __init__(self, max_event_bytes: int) -> None:
        if max_event_bytes < 1:
            raise ValueError("max_event_bytes must be at least 1")
        self.max_event_bytes = max_event_bytes
        #: The unfinished event's bytes (LF line ends), kept as they came: joined once, when
        #: a read ends it, not copied on every read of a large one.
        self._parts: list[bytes] = []
        self._size = 0
        #: The last read ended with CR: an LF that starts the next one belongs to it.
        self._cr = False
        #: The body's first bytes while too few have come to tell whether they are a BOM.
        self._head: bytes | None = b""
        #: Nothing is pending (no BOM to look for, no CR, no unfinished event).
        self._plain = False

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """The events that ``chunk`` completes, in order (often none, or one)."""
        if self._plain and chunk[-2:] == b"\n\n" and b"\r" not in chunk:
            return _events(chunk, len(chunk) - 2)  # whole events and nothing else: most reads
        events = self._feed(chunk)
        self._plain = self._head is None and not self._cr and not self._parts
        return events

    def _feed(self, chunk: bytes) -> list[ServerSentEvent]:
        if self._head is not None:
            chunk = self._head + chunk
            if len(chunk) < len(_BOM) and _BOM.startswith(chunk):
                self._head = chunk
                return []
            self._head = None
            if chunk.startswith(_BOM):
                chunk = chunk[len(_BOM) :]
        if self._cr:
            self._cr = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]  # the LF of a CR LF split between reads
        if b"\r" in chunk:
            self._cr = chunk[-1:] == b"\r"
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if not chunk:
            return []
        parts = self._parts
        if parts:
            if b"\n\n" not in chunk and not (chunk[0] == 0x0A and parts[-1][-1] == 0x0A):
                self._keep(chunk)  # the event goes on
                return []
            chunk = b"".join(parts) + chunk
            parts.clear()
            self._size = 0
        end = chunk.rfind(b"\n\n")
        if end < 0:
            self._keep(chunk)
            return []
        if end + 2 < len(chunk):
            self._keep(chunk[end + 2 :])
        return _events(chunk, end)

    def _keep(self, piece: bytes) -> None:
        self._size += len(piece)
        if self._size > self.max_event_bytes:
            raise SSEError(f"Server-sent event exceeded the {self.max_event_bytes} byte limit.")
        self._parts.append(piece)


def _events(chunk: bytes, end: int) -> list[ServerSentEvent]:
    """The events of ``chunk[:end]``: whole events (LF line ends) without the last blank line."""
    # The shapes providers send, looked for first: one data line, with or without its name.
    if chunk.startswith(b"data: "):
        if chunk.find(b"\n", 6) == end:
            return [_new(ServerSentEvent, ("message", chunk[6:end].decode("utf-8", "replace")))]
    elif chunk.startswith(b"event: "):
        line = chunk.find(b"\n", 7)
        if chunk.startswith(b"data: ", line + 1) and chunk.find(b"\n", line + 7) == end:
            name = chunk[7:line].decode("utf-8", "replace")
            return [_new(ServerSentEvent, (name, chunk[line + 7 : end].decode("utf-8", "replace")))]
    events = []
    for block in chunk[:end].split(b"\n\n"):
        if block.startswith(b"data: ") and b"\n" not in block:
            events.append(_new(ServerSentEvent, ("message", block[6:].decode("utf-8", "replace"))))
            continue
        name = ""
        data: list[bytes] = []
        for line_ in block.split(b"\n"):
            if not line_ or line_[0] == 0x3A:  # a blank line or a comment
                continue
            field, colon, value = line_.partition(b":")
            if colon and value[:1] == b" ":
                value = value[1:]
            if field == b"data":
                data.append(value)
            elif field == b"event":
                name = value.decode("utf-8", "replace")
        if data:
            text = b"\n".join(data).decode("utf-8", "replace")
            events.append(_new(ServerSentEvent, (name or "message", text)))
    return events

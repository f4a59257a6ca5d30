"""Assembling one streamed answer: deltas out as events arrive, the whole answer at the end.

An :class:`Assembler` takes the server-sent events of one call in order. It hands each piece
to the request's delta sink as a :class:`~cleveragents.tool.ResponseDelta` and keeps what
arrived, so that at the end it can give the answer in the shape the API returns when it does
not stream (:meth:`Assembler.body`); the caller parses that with the same checks as a whole
answer, which is why the deltas and the returned ``LLMResponse`` always agree. Subclasses
(one per API's event format) implement :meth:`Assembler.handle` and :meth:`Assembler.body`.

The events of one read come together (:meth:`Assembler.feed_read`), and the deltas they make
are joined before they go: consecutive text into one text delta, consecutive fragments of one
call's arguments (with its id and name, when the call began in that read) into one, so that
a read costs one delta per kind of piece, however many events it held. Joined or not, the
deltas concatenate to the same answer.

What an answer keeps is bounded: every character of text, tool-call arguments, ids and names
(and refusals) counts toward ``max_chars``, and the piece that passes it raises
:class:`AnswerTooLarge` before it is kept or sent on, so the caller stops reading the stream
there, whatever HTTP client reads it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from cleveragents.providers.sse import ServerSentEvent
from cleveragents.tool import DeltaSink, LLMResponse, ResponseDelta, parse_call
from cleveragents.tool.jsontext import loads

__all__ = [
    "DEFAULT_MAX_ANSWER_CHARS",
    "AnswerTooLarge",
    "Assembler",
    "StreamFailure",
    "StreamedCall",
    "parse_event",
]

#: What one streamed answer may hold unless its caller says otherwise: the sidecar's default
#: ``max_message_bytes``, since a larger answer could not be logged in one event anyway.
DEFAULT_MAX_ANSWER_CHARS = 16 * 1024 * 1024


def parse_event(data: str) -> Any:
    """An event's JSON, parsed by orjson (C; a third of the stdlib's time on a chunk, and as
    strict: no NaN, no infinite number, no lone surrogate; an integer past 64 bits reads as a
    float, which no provider's event carries); what it refuses is parsed again by
    :func:`~cleveragents.tool.jsontext.loads`, whose error says what is wrong and where."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return loads(data)


#: Error types and codes of an in-stream error that a later request may not meet.
_TRANSIENT = frozenset(
    {"overloaded_error", "api_error", "server_error", "rate_limit_error", "rate_limit_exceeded"}
)


class StreamFailure(Exception):
    """The provider reported an error inside the stream (``event: error`` and the like)."""

    def __init__(self, error: Any) -> None:
        self.error: Mapping[str, Any] = error if isinstance(error, Mapping) else {"message": error}
        kinds = {self.error.get("type"), self.error.get("code")}
        self.retryable = bool(kinds & _TRANSIENT)
        super().__init__(str(self.error.get("message")))


class AnswerTooLarge(Exception):
    """The answer streamed past its bound (``max_chars``); the rest of it is not read."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(f"the streamed answer passed {limit} characters, the most it may hold")


class StreamedCall:
    """One tool call as it streams: its id, name and the fragments of its arguments' JSON."""

    __slots__ = ("arguments", "id", "name")

    def __init__(self, call_id: str, name: str) -> None:
        self.id = call_id
        self.name = name
        self.arguments: list[str] = []

    @property
    def arguments_text(self) -> str:
        """The arguments' JSON text so far."""
        return "".join(self.arguments)


class Assembler:
    """Deltas and the whole answer from one stream's events (see the module docstring)."""

    def __init__(
        self, sink: DeltaSink | None, iteration: int, max_chars: int = DEFAULT_MAX_ANSWER_CHARS
    ) -> None:
        if max_chars < 1:
            raise ValueError("max_chars must be at least 1")
        self.events = 0
        #: Characters kept of the answer so far (see ``keep``), at most ``max_chars``.
        self.size = 0
        self.max_chars = max_chars
        self._event_chars = 0
        self.complete = False
        self.text: list[str] = []
        self.calls: list[StreamedCall] = []
        self._sink = sink
        self._iteration = iteration
        #: The pieces of the read being fed not yet sent, all of one kind: text (-1) or the
        #: arguments of one call (its position), with the call's id and name when it began
        #: in this read.
        self._held: list[str] = []
        self._held_call = -1
        self._held_head = ("", "")
        self._holding = False

    def feed_read(self, events: Sequence[ServerSentEvent]) -> bool:
        """Take the events of one read, in order; ``True`` when they completed the answer
        (the events after the one that did are not looked at). Their deltas go joined, once
        the read's events are handled, or the one that failed."""
        self._holding = True
        try:
            return any(self.feed(event) for event in events)
        finally:
            self._holding = False
            self._release()

    def feed(self, event: ServerSentEvent) -> bool:
        """Take one event; ``True`` when it completed the answer.

        Raises ``StreamFailure`` for an error the provider sent in the stream and
        ``ValueError`` for an event that is not what the API sends.
        """
        self.events += 1
        data = event.data
        self._event_chars = len(data)
        payload = parse_event(data) if data[:1] == "{" else None  # the common case: no strip
        if payload is None:
            if not data.strip():
                return False
            if data.strip() == "[DONE]":
                self.complete = True
                return True
            payload = parse_event(data)
        if not isinstance(payload, dict):
            raise ValueError(f"event {event.event!r} holds no JSON object")
        self.complete = self.handle(event.event, payload)
        return self.complete

    def handle(self, event: str, data: dict[str, Any]) -> bool:
        """Act on one event's JSON object; ``True`` when it completed the answer."""
        raise NotImplementedError

    def body(self) -> dict[str, Any]:
        """The whole answer, shaped as the API's response when it does not stream."""
        raise NotImplementedError

    # -- for subclasses ----------------------------------------------------------------------

    def keep(self, *pieces: str) -> None:
        """Count ``pieces`` toward the answer's bound before they are kept; ``AnswerTooLarge``
        once the answer would pass it."""
        self._grow(sum(map(len, pieces)))

    def keep_event(self) -> None:
        """Count the whole current event toward the bound: for an object of it that is kept
        as it came (a content block, a message's fields), not piece by piece."""
        self._grow(self._event_chars)

    def _grow(self, chars: int) -> None:
        size = self.size + chars
        if size > self.max_chars:
            raise AnswerTooLarge(self.max_chars)
        self.size = size

    def add_text(self, text: Any) -> None:
        """Append ``text`` to the answer's content and send it on."""
        if isinstance(text, str) and text:
            self.keep(text)
            self.text.append(text)
            self._send(-1, text)

    def start_call(self, call_id: Any, name: Any) -> int:
        """A new tool call; its 0-based position. A call without an id gets one (as a whole
        answer's would) so that its results can name it."""
        position = len(self.calls)
        call_id = call_id if isinstance(call_id, str) and call_id else ""
        call_id = call_id or f"call_{self._iteration}_{position + 1}"
        name = name if isinstance(name, str) else ""
        self.keep(call_id, name)
        self.calls.append(StreamedCall(call_id, name))
        self._release()  # its first delta carries its id and name (and what follows it)
        self._held_call, self._held_head = position, (call_id, name)
        if not self._holding:
            self._release()
        return position

    def add_arguments(self, position: int, fragment: Any) -> None:
        """Append a fragment of the arguments' JSON text of call number ``position``."""
        if isinstance(fragment, str) and fragment:
            self.keep(fragment)
            self.calls[position].arguments.append(fragment)
            self._send(position, fragment)

    # -- when a stream breaks ----------------------------------------------------------------

    def partial(self) -> LLMResponse:
        """What had arrived: the text, and the calls (cut-off arguments set arguments_error)."""
        calls = [parse_call(c.id, c.name, c.arguments_text) for c in self.calls]
        return LLMResponse("".join(self.text), calls)

    def received(self) -> str:
        """A line saying what had arrived, for the error that ends the call."""
        parts = [f"{sum(map(len, self.text))} characters of text"]
        if self.calls:
            names = ", ".join(c.name or "?" for c in self.calls)
            parts.append(f"{len(self.calls)} tool call(s) ({names})")
        return " and ".join(parts)

    def _send(self, call: int, piece: str) -> None:
        """Send ``piece`` (text for ``call`` -1, else arguments of call number ``call``);
        while a read is fed, joined with the pieces of the same kind held before it."""
        if call != self._held_call and (self._held or self._held_head[0] or self._held_head[1]):
            self._release()
        self._held_call = call
        self._held.append(piece)
        if not self._holding:
            self._release()

    def _release(self) -> None:
        """Send what is held, as one delta."""
        pieces, (call_id, name) = self._held, self._held_head
        if not pieces and not call_id and not name:
            return
        self._held, self._held_head = [], ("", "")
        if self._sink is None:
            return
        joined = pieces[0] if len(pieces) == 1 else "".join(pieces)
        if self._held_call < 0:
            self._sink(ResponseDelta(joined))
        else:
            self._sink(ResponseDelta("", self._held_call, call_id, name, joined))

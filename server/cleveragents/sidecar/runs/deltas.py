"""A run's live LLM deltas: what its LLM calls have streamed so far, for the streams that
asked for deltas (``stream_deltas``).

Deltas are not logged: the run keeps the deltas of its latest two LLM calls, and of any
older call a stream that reads deltas has not passed yet, and each stream's ``DeltaCursor``
remembers only where it is and how many of its call's deltas it has sent. So a stream that
joins mid-call, or that was busy writing while deltas came, gets every delta it has not sent
joined into as few messages as their kinds allow (``cleveragents.wire.coalesce``), and no
stream holds a queue of its own: memory per watcher stays constant however slow it is.
A call's kept deltas are joined (``coalesce``) between the places streams have reached, each
time their number doubles, so a provider that streams many small deltas costs memory in
proportion to its answer, not to its number of deltas.
Deltas belong right after their call's ``iteration_started`` (``after``): a stream sends
them once it has sent that event, and before any later one.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Callable

from cleveragents.tool import LLMDelta
from cleveragents.wire import coalesce, delta_frames

__all__ = ["DeltaCursor", "LiveDeltas"]

#: The calls a run keeps deltas of for streams yet to join: the current one and the one
#: before (older ones only while a reading stream has not passed them).
_CALLS_KEPT = 2

#: A call's kept deltas are first joined once it has this many.
_COMPACT_FROM = 64


class _Call:
    """One LLM call's deltas so far, and the frames last made of a range of them."""

    __slots__ = ("after", "cached", "compact_at", "deltas", "iteration")

    def __init__(self, after: int, iteration: int) -> None:
        self.after = after
        self.iteration = iteration
        self.deltas: list[LLMDelta] = []
        self.cached: tuple[int, int, list[bytes]] | None = None
        #: How many kept deltas make the next join worth it.
        self.compact_at = _COMPACT_FROM


class LiveDeltas:
    """The deltas of a run's latest LLM calls, and the readers to wake when more come."""

    __slots__ = ("_calls", "closed", "readers", "run_id")

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self._calls: collections.deque[_Call] = collections.deque()
        self.readers: list[DeltaCursor] = []
        self.closed = False

    def add(self, after: int, delta: LLMDelta) -> None:
        """A delta of the LLM call whose ``iteration_started`` is event ``after``."""
        calls = self._calls
        if not calls or calls[-1].after != after or calls[-1].iteration != delta.iteration:
            calls.append(_Call(after, delta.iteration))
            readers = self.readers
            floor = min((r.position for r in readers), default=after) if readers else after
            while len(calls) > _CALLS_KEPT and calls[0].after < floor:
                calls.popleft()
        call = calls[-1]
        call.deltas.append(delta)
        if len(call.deltas) >= call.compact_at:
            self._compact(call)
        for reader in self.readers:
            reader.wake()

    def _compact(self, call: _Call) -> None:
        """Join ``call``'s kept deltas between the places its readers have reached (a reader
        sends from its place on, a joining one from the start), moving each reader's place to
        match; the join waits until their number doubles again."""
        deltas = call.deltas
        on_call = [r for r in self.readers if r._after == call.after]
        places = sorted({0, len(deltas), *(r._sent for r in on_call)})
        joined: list[LLMDelta] = []
        moved: dict[int, int] = {}
        for start, stop in itertools.pairwise(places):
            moved[start] = len(joined)
            joined += coalesce(deltas[start:stop])
        moved[len(deltas)] = len(joined)
        for reader in on_call:
            reader._sent = moved[reader._sent]
        call.deltas, call.cached = joined, None
        call.compact_at = max(_COMPACT_FROM, 2 * len(joined))

    def read(self) -> bool:
        """Whether a stream reads the run's deltas now (one that asked for them is attached)."""
        return bool(self.readers)

    def close(self) -> None:
        """The run has ended: no call streams any more; the deltas go once no stream still
        reads them."""
        self.closed = True
        if not self.readers:
            self._calls.clear()

    def reader(self, wake: Callable[[], None], position: int) -> DeltaCursor:
        """A new stream's reader, which has sent the events up to ``position``; ``wake`` is
        called when a delta comes (``drop`` it after)."""
        reader = DeltaCursor(self, wake, position)
        self.readers.append(reader)
        return reader

    def drop(self, reader: DeltaCursor) -> None:
        """Stop waking ``reader``."""
        if reader in self.readers:
            self.readers.remove(reader)
        if self.closed and not self.readers:
            self._calls.clear()

    def afters(self) -> list[int]:
        """Where the kept calls' deltas go: after these events."""
        return [call.after for call in self._calls]

    def call_after(self, sequence: int) -> _Call | None:
        """The call whose deltas come right after event ``sequence``, if kept."""
        for call in self._calls:
            if call.after == sequence:
                return call
        return None

    def frames(self, call: _Call, start: int, stop: int) -> list[bytes]:
        """The frames of ``call``'s deltas ``start:stop``, coalesced; streams that are level
        with each other share them."""
        cached = call.cached
        if cached is not None and cached[0] == start and cached[1] == stop:
            return cached[2]
        items = delta_frames(self.run_id, call.after, call.deltas[start:stop])
        call.cached = (start, stop, items)
        return items


class DeltaCursor:
    """One stream's place in its run's deltas: the call it is at and how many it has sent."""

    __slots__ = ("_after", "_live", "_pending", "_sent", "position", "wake")

    def __init__(self, live: LiveDeltas, wake: Callable[[], None], position: int) -> None:
        self._live = live
        self.wake = wake
        #: The events its stream has sent: 1..position (older calls' deltas can go).
        self.position = position
        self._after = -1
        self._sent = 0
        #: Frames made of deltas taken, not yet handed out (a batch holds fewer).
        self._pending: list[bytes] = []

    def take(self, position: int, max_bytes: int) -> list[bytes]:
        """The frames of the deltas due for a stream that has sent every event up to
        ``position`` and none after it, up to ``max_bytes`` (at least one); empty when none
        are due."""
        self.position = position
        pending = self._pending
        if not pending:
            call = self._live.call_after(position)
            if call is None:
                return []
            if call.after != self._after:
                self._after, self._sent = call.after, 0
            stop = len(call.deltas)
            if self._sent >= stop:
                return []
            start, self._sent = self._sent, stop
            pending = self._live.frames(call, start, stop)
        taken, size = 1, len(pending[0])
        while taken < len(pending) and size + len(pending[taken]) <= max_bytes:
            size += len(pending[taken])
            taken += 1
        self._pending = pending[taken:]
        return pending[:taken]

    def due_after(self, sequence: int) -> bool:
        """Whether deltas not yet sent follow event ``sequence``."""
        if self._pending and sequence == self._after:
            return True
        call = self._live.call_after(sequence)
        if call is None:
            return False
        sent = self._sent if call.after == self._after else 0
        return sent < len(call.deltas)

    def due_within(self, start: int, stop: int) -> int | None:
        """The first event after ``start``, up to ``stop``, after which deltas are due (so a
        batch of events ``start+1..stop`` must end there); ``None`` when none is."""
        self.position = start
        due = [after for after in self._live.afters() if start < after < stop]
        return min((a for a in due if self.due_after(a)), default=None)

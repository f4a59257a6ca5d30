"""The ``FollowRun`` RPC: a watcher that acknowledges what it has handled.

``WatchRun`` writes while gRPC takes its messages, and gRPC takes them while the client's
HTTP/2 window has room, which the client sets. Here the bound is the server's own: the client
acknowledges sequences, and the server keeps at most ``watch_window_bytes`` of unacknowledged
messages in flight. A reader task takes the acks while the handler writes.

One identity's watchers share a second bound, ``watch_window_bytes_per_identity``, on their
unacknowledged bytes together (:class:`IdentityWindows`): without it, each of many stalled
watchers of one observer held a message (240 of them, each a 4 MiB first event: +966 MiB). A
message goes only when it fits both windows (or nothing is in flight in either); a watcher
that cannot send for ``watcher_stall_s`` is dropped with ``RESOURCE_EXHAUSTED``, naming the
bound it met.

The server never ends a call while an ack it asked for is owed: a client that writes an ack
after the status came gets the call failed locally (gRPC's ``INTERNAL``), losing the status
and the messages before it. So the call ends when the owed ack comes (or the client closes its
side), or after ``_FINAL_ACK_STALLS`` stall periods without it; a dropped watcher is first
asked for an ack of everything it was sent.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

import grpc

from cleveragents.sidecar.config import SidecarConfig
from cleveragents.sidecar.errors import SidecarError
from cleveragents.sidecar.gateway import Gateway
from cleveragents.sidecar.runs import Run, WatchCursor
from cleveragents.sidecar.transport.caller import current_caller
from cleveragents.sidecar.transport.calls import Context, Limits, abort, end_if_lost, read_start
from cleveragents.sidecar.transport.dropped import dropped_reason
from cleveragents.toolruntime.v1 import service_pb2
from cleveragents.wire import follow_message

__all__ = ["AckWindow", "FollowRuns", "IdentityWindow", "IdentityWindows"]

#: What a response adds to its frames, at most: a tag byte per frame is counted apart, and
#: ``ack_requested`` and ``window_bytes`` take up to 12 bytes.
_TAIL_BYTES = 12
#: A message with no events that asks for an ack (``ack_requested``, field 2, true).
_ASK_FOR_ACK = b"\x10\x01"
#: How many ``watcher_stall_s`` a dropped watcher has to ack what it was sent.
_FINAL_ACK_STALLS = 10


class IdentityWindow:
    """The unacknowledged bytes of one identity's watchers together, and who waits for room."""

    __slots__ = ("_waiting", "identity", "limit", "unacked", "watchers")

    def __init__(self, identity: str, limit: int) -> None:
        self.identity = identity
        self.limit = limit
        self.unacked = 0
        #: The watchers sharing it (it is forgotten once none is left).
        self.watchers = 0
        self._waiting: set[AckWindow] = set()

    def fits(self, size: int) -> bool:
        """Whether ``size`` more bytes may go: one message always may when none is in flight."""
        return self.unacked == 0 or self.unacked + size <= self.limit

    def wait_for(self, window: AckWindow) -> None:
        """Wake ``window`` once room is freed."""
        self._waiting.add(window)

    def free(self, size: int) -> None:
        """``size`` bytes were acknowledged (or their watcher went): wake those waiting."""
        self.unacked -= size
        waiting, self._waiting = self._waiting, set()
        for window in waiting:
            window.wake()


class IdentityWindows:
    """Each identity's :class:`IdentityWindow`, while it has watchers."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._windows: dict[str, IdentityWindow] = {}

    def join(self, identity: str) -> IdentityWindow:
        """The window a new watcher of ``identity`` shares (``leave`` it when it ends)."""
        shared = self._windows.get(identity)
        if shared is None:
            shared = self._windows[identity] = IdentityWindow(identity, self.limit)
        shared.watchers += 1
        return shared

    def leave(self, shared: IdentityWindow) -> None:
        """A watcher sharing ``shared`` has ended (its bytes freed first: ``AckWindow.end``)."""
        shared.watchers -= 1
        if shared.watchers <= 0 and self._windows.get(shared.identity) is shared:
            del self._windows[shared.identity]


class AckWindow:
    """The messages written to one watcher and not yet acknowledged, and waits on its acks;
    ``together`` is its identity's window, which it counts its bytes in too."""

    def __init__(
        self, window_bytes: int, after_sequence: int, together: IdentityWindow | None = None
    ) -> None:
        self.window_bytes = window_bytes
        self.together = together
        #: Bytes of the messages written but not wholly acknowledged.
        self.unacked = 0
        #: The newest sequence acknowledged, and the newest written (or skipped by the start).
        self.acked = self.sent = after_sequence
        #: The newest sequence an ack was asked for (one that comes covers it).
        self.asked_up_to = after_sequence
        #: The client closed its side: no more acks.
        self.closed = False
        #: A message of deltas went out after the last ack asked for (ask again for them).
        self.unasked_deltas = False
        self._messages: deque[tuple[int, int]] = deque()  # (last sequence, bytes)
        self._changed = asyncio.Event()

    def fits_own(self, size: int) -> bool:
        """Whether a message of ``size`` bytes fits this watcher's window: one always may, alone."""
        return self.unacked == 0 or self.unacked + size <= self.window_bytes

    def fits(self, size: int) -> bool:
        """Whether a message of ``size`` bytes may go now: it fits this watcher's window and
        its identity's."""
        return self.fits_own(size) and (self.together is None or self.together.fits(size))

    def wake(self) -> None:
        """Something this watcher waits for has changed."""
        self._changed.set()

    def wrote(self, last_sequence: int, size: int, *, asked: bool) -> None:
        """A message ending at ``last_sequence`` went out (``asked``: asking for an ack)."""
        self._messages.append((last_sequence, size))
        self.unacked += size
        if self.together is not None:
            self.together.unacked += size
        # Deltas go after their sequence, already sent: only an ack asked anew covers them.
        self.unasked_deltas = (self.unasked_deltas or last_sequence == self.sent) and not asked
        self.sent = last_sequence
        if asked:
            self.asked_up_to = last_sequence

    def ack(self, sequence: int) -> None:
        """The client has handled every event up to ``sequence``."""
        if sequence > self.sent:
            raise SidecarError.invalid(
                f"ack of sequence {sequence}, but this stream has sent events up to "
                f"{self.sent} only"
            )
        if sequence < self.acked:
            return
        # The same sequence again acknowledges the deltas (sequence 0) sent after it.
        self.acked = sequence
        messages, freed = self._messages, 0
        while messages and messages[0][0] <= sequence:
            freed += messages.popleft()[1]
        self.unacked -= freed
        if self.together is not None and freed:
            self.together.free(freed)
        self._changed.set()

    def end(self) -> None:
        """The watcher has gone: what it had in flight no longer counts for its identity."""
        self._messages.clear()
        if self.together is not None and self.unacked:
            self.together.free(self.unacked)
        self.unacked = 0

    def close(self) -> None:
        """The client will send no more acks."""
        self.closed = True
        self._changed.set()

    async def wait_for_room(self, size: int) -> None:
        """Until a message of ``size`` bytes fits."""
        while not self.fits(size):
            self._changed.clear()
            if self.together is not None and not self.together.fits(size):
                self.together.wait_for(self)
            await self._changed.wait()

    @property
    def owed(self) -> bool:
        """Whether an ack asked for has not come (and still can)."""
        return self.acked < self.asked_up_to and not self.closed

    async def wait_for_owed_ack(self) -> None:
        """Until the ack asked for comes, or no ack can come."""
        while self.owed:
            self._changed.clear()
            await self._changed.wait()


class FollowRuns:
    """Serves ``FollowRun`` streams: each asks ``gateway``, within ``config``'s windows."""

    def __init__(self, gateway: Gateway, config: SidecarConfig, limits: Limits) -> None:
        self.gateway = gateway
        self.config = config
        self.limits = limits
        #: What each identity's watchers have in flight together, bounded.
        self.windows = IdentityWindows(config.watching.window_bytes_per_identity)

    async def serve(self, context: Context) -> None:
        """Serve one ``FollowRun`` stream."""
        first = await read_start(context, service_pb2.FollowRunRequest)
        if first is None:
            return
        start, config, gateway, caller = first.start, self.config, self.gateway, current_caller()
        try:
            run, cursor = await gateway.watch(
                caller, start.run_id, start.after_sequence, deltas=start.stream_deltas
            )
        except SidecarError as exc:
            await abort(context, exc)
        window = min(
            start.window_bytes or config.watching.window_bytes, config.watching.window_bytes
        )
        shared = self.windows.join(caller.name)
        flow = AckWindow(window, start.after_sequence, shared)
        follower = _Follower(self, context, run, cursor, flow)
        dropped: str | None = None
        try:
            async with asyncio.TaskGroup() as group:
                reading = group.create_task(follower.read_acks())
                try:
                    dropped = await follower.send()
                    if dropped is not None:
                        await follower.ask()  # for everything sent: the status comes after it
                    await follower.take_owed_ack()
                finally:
                    reading.cancel()
        except BaseExceptionGroup as failure:  # the reader's refusal of an ack
            error = failure.exceptions[0]
            if isinstance(error, SidecarError):
                await abort(context, error)
            raise error from None
        finally:
            gateway.unwatch(run, cursor)
            flow.end()
            self.windows.leave(shared)
        await end_if_lost(run, context)
        if dropped is not None:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{dropped} and was dropped; reconnect with after_sequence={follower.flow.sent}",
            )


class _Follower:
    """One FollowRun stream: sends the run's frames within the window, and takes the acks."""

    def __init__(
        self,
        follows: FollowRuns,
        context: Context,
        run: Run,
        cursor: WatchCursor,
        flow: AckWindow,
    ) -> None:
        self.follows = follows
        self.context = context
        self.run = run
        self.cursor = cursor
        self.flow = flow
        self.stall_s = follows.config.watching.stall_s

    async def send(self) -> str | None:
        """Send the run's frames to its end; or why the watcher was dropped."""
        cursor, flow, log = self.cursor, self.flow, self.run.log
        window = flow.window_bytes
        limit = min(self.follows.limits.watch_batch, window)
        first = True
        while items := await cursor.get_many(limit):
            size = sum(map(len, items)) + len(items) + _TAIL_BYTES
            if not flow.fits(size):
                await self.ask()
                cursor.busy_since = None  # waiting for acks, not in a write
                try:
                    async with asyncio.timeout(self.stall_s):
                        await flow.wait_for_room(size)
                except TimeoutError:
                    # Gone from the run at once (it no longer counts as following it), though
                    # its call waits a while for the last ack.
                    gateway, shared = self.follows.gateway, flow.together
                    if flow.fits_own(size) and shared is not None:
                        why = f"identity {shared.identity!r} left its window unacknowledged"
                        gateway.drop_watcher(self.run, cursor, why)
                        return (
                            f"the FollowRun watchers of identity {shared.identity!r} left "
                            f"{shared.unacked} bytes unacknowledged together, and this one could "
                            f"not send for over {self.stall_s:g} s (the sidecar's "
                            f"watch_window_bytes_per_identity is {shared.limit})"
                        )
                    gateway.drop_watcher(self.run, cursor, "it left its window unacknowledged")
                    return (
                        f"this watcher left {flow.unacked} bytes unacknowledged (its window "
                        f"is {window}) for over {self.stall_s:g} s"
                    )
                cursor.busy_since = time.monotonic()
            # No ack for the run's last message: the call ends after it.
            ask = flow.unacked + size >= window // 2 and not (
                log.finished and cursor.cursor == log.released
            )
            message = follow_message(items, ack_requested=ask, window_bytes=window * first)
            first = False
            # Counted first: the client may ack it before this write returns.
            flow.wrote(cursor.cursor, len(message), asked=ask)
            await self.context.write(message)
        config = self.follows.config
        return dropped_reason(cursor, config.watching.queue_size, config.watching.stall_s)

    async def take_owed_ack(self) -> None:
        """Before the call ends: the ack asked for, if it comes in time."""
        try:
            async with asyncio.timeout(self.stall_s * _FINAL_ACK_STALLS):
                await self.flow.wait_for_owed_ack()
        except TimeoutError:
            return

    async def ask(self) -> None:
        """Make sure an ack of everything sent will come (unless all is acked)."""
        flow = self.flow
        if flow.closed or not flow.unacked:
            return
        if (flow.acked < flow.sent and flow.asked_up_to < flow.sent) or flow.unasked_deltas:
            flow.asked_up_to = flow.sent
            flow.unasked_deltas = False
            await self.context.write(_ASK_FOR_ACK)

    async def read_acks(self) -> None:
        """Take the client's acks until it closes its side; anything else is refused."""
        while True:
            message = await self.context.read()
            if message is grpc.aio.EOF:
                self.flow.close()
                return
            if not isinstance(message, service_pb2.FollowRunRequest):  # did not parse
                raise SidecarError.invalid(str(message.message))
            kind = message.WhichOneof("kind")
            if kind == "ack":
                self.flow.ack(message.ack.sequence)
            elif kind == "start":
                raise SidecarError.out_of_order("this FollowRun has already started")
            else:
                raise SidecarError.invalid("empty FollowRunRequest: set start or ack")

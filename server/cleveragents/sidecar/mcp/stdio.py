"""The stdio transport to an MCP server: the SDK's ``stdio_client`` rebuilt so that one huge
line cannot stall the event loop.

The SDK's reader joins its whole buffer to each 64 KiB chunk and splits it again (quadratic in
a long line) and parses every line on the event loop: a 24 MB result took 18 s with a 2.4 s
pause of the whole sidecar. Here a line is split from the bytes as they come, looking only at
each new chunk (:class:`LineSplitter`, linear), a line over ``max_message_bytes`` is not
buffered on but reported as :class:`MessageTooLarge` (the connection treats it as broken), and
a line of ``THREAD_PARSE_BYTES`` or more is parsed in a worker thread. Everything else is what
the SDK does: the server in a session (process group) of its own, with the SDK's default
environment plus ``env``; its stderr passed through; one JSON line per message written; a line
that does not parse sent down the read stream as the parser's exception; and on exit its
stdin closed, then its whole group sent SIGTERM (even when the server itself exited at EOF),
then SIGKILL (no orphans). POSIX only.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Mapping
from typing import TextIO

import anyio
import anyio.lowlevel
import anyio.to_thread
import mcp_types
from anyio.abc import AsyncResource, ObjectReceiveStream, ObjectSendStream, Process
from mcp.client.stdio import get_default_environment
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

from cleveragents.sidecar.config.mcp import DEFAULT_MAX_MESSAGE_BYTES

__all__ = [
    "THREAD_PARSE_BYTES",
    "LineSplitter",
    "MessageTooLarge",
    "parse_line",
    "stdio_transport",
]

#: A line at least this long is parsed in a worker thread; shorter ones inline (no thread hop
#: on the hot path of small calls).
THREAD_PARSE_BYTES = 1024 * 1024
_READ_BYTES = 65536
#: As the SDK: how long the server may take to exit once its stdin is closed, then how long
#: after SIGTERM before SIGKILL, then how long to wait for the kill to be seen.
_EXIT_GRACE_S = 2.0
_TERM_GRACE_S = 2.0
_REAP_S = 2.0
_FLUSH_S = 0.5
_POLL_S = 0.01

Streams = tuple[ObjectReceiveStream[SessionMessage | Exception], ObjectSendStream[SessionMessage]]


class MessageTooLarge(Exception):
    """A line from the server longer than the transport's ``max_message_bytes``."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"a message over {limit} bytes")
        self.limit = limit


class LineSplitter:
    """Splits the bytes a server writes into lines, in time linear in the bytes fed.

    Only each new chunk is searched for ``\\n``; the pieces of a line not yet ended are kept
    in a list and joined once it ends. A line (less its ``\\n``) over ``limit`` bytes gives
    one :class:`MessageTooLarge` as soon as it is, and the rest of it up to its ``\\n`` is
    dropped unbuffered. A ``\\r`` before the ``\\n`` is kept (JSON allows it as whitespace).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._pieces: list[bytes] = []
        self._size = 0
        self._dropping = False

    @property
    def pending(self) -> list[bytes]:
        """The pieces of the line not ended yet, as they came (joined once it ends)."""
        return list(self._pieces)

    @property
    def pending_bytes(self) -> int:
        """How many bytes of the line not ended yet it keeps."""
        return self._size

    def feed(self, chunk: bytes) -> list[bytes | MessageTooLarge]:
        """The lines (and oversized lines) that ``chunk`` ends or overflows, in order."""
        out: list[bytes | MessageTooLarge] = []
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            if self._dropping:
                self._dropping = False
            elif self._size + end - start > self.limit:
                out.append(MessageTooLarge(self.limit))
            elif self._pieces:
                out.append(b"".join([*self._pieces, chunk[start:end]]))
            else:
                out.append(chunk[start:end])
            self._pieces.clear()
            self._size = 0
            start = end + 1
        if start < len(chunk) and not self._dropping:
            if self._size + len(chunk) - start > self.limit:
                out.append(MessageTooLarge(self.limit))
                self._pieces.clear()
                self._size = 0
                self._dropping = True
            else:
                self._pieces.append(chunk[start:] if start else chunk)
                self._size += len(chunk) - start
        return out


def parse_line(line: bytes) -> SessionMessage | Exception:
    """One line as the SDK parses it; a parse failure is returned (pydantic's
    ``ValidationError``, whose first error's ``input`` is the line), not raised."""
    try:
        message = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError as exc:
        return exc
    return SessionMessage(message)


async def _parsed(line: bytes) -> SessionMessage | Exception:
    if len(line) < THREAD_PARSE_BYTES:
        return parse_line(line)
    return await anyio.to_thread.run_sync(parse_line, line)


@contextlib.asynccontextmanager
async def stdio_transport(
    command: str,
    args: tuple[str, ...] = (),
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    errlog: TextIO | None = None,
) -> AsyncIterator[Streams]:
    """Start ``command`` and yield the ``(read, write)`` streams a ``ClientSession`` takes;
    stop it (and its process group) on exit, even when cancelled."""
    process = await anyio.open_process(
        [command, *args],
        env=get_default_environment() | dict(env or {}),
        stderr=errlog if errlog is not None else sys.stderr,
        cwd=cwd,
        start_new_session=True,
    )
    # No awaits until the task group is entered, or a cancellation could leak the process.
    read_send, read_receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_receive = anyio.create_memory_object_stream[SessionMessage](0)
    writer_done = anyio.Event()

    async def reader() -> None:
        assert process.stdout is not None
        splitter = LineSplitter(max_message_bytes)
        try:
            async with read_send:
                while True:
                    chunk = await process.stdout.receive(_READ_BYTES)
                    for line in splitter.feed(chunk):
                        item = line if isinstance(line, MessageTooLarge) else await _parsed(line)
                        await read_send.send(item)
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass  # the server closed its output, or the session is gone
        finally:
            await _drain(process)

    async def writer() -> None:
        assert process.stdin is not None
        try:
            async with write_receive:
                async for item in write_receive:
                    text = item.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send((text + "\n").encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_send.aclose()  # the session sees the connection end, not a hang
        finally:
            writer_done.set()

    async with anyio.create_task_group() as group:
        group.start_soon(reader)
        group.start_soon(writer)
        try:
            yield read_receive, write_send
        finally:
            with anyio.CancelScope(shield=True):  # every wait inside is bounded
                read_receive.close()  # the reader drains, so a server stuck writing can exit
                write_send.close()
                with anyio.move_on_after(_FLUSH_S):
                    await writer_done.wait()
                await _stop(process)
                for stream in (read_receive, write_send, read_send, write_receive):
                    await stream.aclose()
                await anyio.lowlevel.checkpoint()
            group.cancel_scope.cancel()


async def _drain(process: Process) -> None:
    """Read and drop what the server still writes, until its output closes (shielded)."""
    assert process.stdout is not None
    with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
        while True:
            await process.stdout.receive(_READ_BYTES)


async def _stop(process: Process) -> None:
    """Close its stdin, wait, then SIGTERM and SIGKILL its process group (the SDK's order).

    The group is signalled whether or not the server exited at EOF: a child it left in its
    group (a worker, a helper it spawned) would otherwise outlive the sidecar. A group already
    empty is not waited for.
    """
    assert process.stdin is not None
    assert process.stdout is not None
    await _close(process.stdin)
    await _exited(process, _EXIT_GRACE_S)
    await terminate_posix_process_tree(process, _TERM_GRACE_S)
    await _exited(process, _REAP_S)
    await _close(process.stdout)
    # A descendant holding a pipe open keeps asyncio's subprocess transport open; close it.
    transport = getattr(getattr(process, "_process", None), "_transport", None)
    close = getattr(transport, "close", None)
    if callable(close):
        with contextlib.suppress(PermissionError):
            close()


async def _close(stream: AsyncResource) -> None:
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await stream.aclose()


async def _exited(process: Process, timeout_s: float) -> bool:
    """Whether the process exits within ``timeout_s`` (polled: ``wait()`` would also wait
    for the pipes to close, which a child that inherited them keeps open)."""
    deadline = anyio.current_time() + timeout_s
    while process.returncode is None:
        if anyio.current_time() >= deadline:
            return False
        await anyio.sleep(_POLL_S)
    return True

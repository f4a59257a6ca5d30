"""An MCP server's progress notifications in a run: ``tool_call_progress`` events between the
call's start and its record, coalesced so that a server spamming them cannot grow the run's
log, and (when its settings say so) renewing the call's timeout up to a hard maximum."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from cleveragents.client import AsyncSidecarClient
from cleveragents.sidecar.mcp.progress import MAX_PROGRESS_EVENTS, MAX_PROGRESS_MESSAGE_BYTES
from cleveragents.tool import (
    ErrorKind,
    RunCompleted,
    RunEvent,
    ToolCallCompleted,
    ToolCallProgress,
    ToolCallStarted,
)

from .conftest import RAW, McpSidecarFactory, bounded, calling, fault_server, raw_server

CLI = str(Path(sys.executable).parent / "cleveragents-sidecar")

#: How many notifications the spamming server sends: ten times what the most events a call may
#: add would let through uncoalesced (MAX_PROGRESS_EVENTS), many more than an interval holds.
SPAM = 20_000
#: Long enough for SPAM notifications through the SDK on a loaded machine (about 0.25 ms each).
SPAM_WAIT_S = 120.0


async def _events(client: AsyncSidecarClient, tool: str, **arguments: Any) -> list[RunEvent]:
    """The events of a scripted run calling ``tool`` once, as a client streams them."""
    stream = client.stream_tool_loop("go", script=calling(("c1", tool, arguments)))
    return [streamed.event async for streamed in stream]


def _record(events: list[RunEvent]) -> Any:
    return next(e.record for e in events if isinstance(e, ToolCallCompleted))


async def test_progress_notifications_become_tool_call_progress_events_in_the_log(
    make_mcp_sidecar: McpSidecarFactory, fault_dir: Path
) -> None:
    sidecar = await make_mcp_sidecar(fault_server(fault_dir, progress_interval_s=0))
    async with AsyncSidecarClient(sidecar.address) as client:
        script = calling(("c1", "f_spam_progress", {"count": 3}))
        streamed = [s async for s in client.stream_tool_loop("go", script=script)]
        logged = [s async for s in client.watch(streamed[0].run_id)]  # replayed from the log

    events = [s.event for s in streamed]

    kinds = [type(e).__name__ for e in events]
    start, end = kinds.index("ToolCallStarted"), kinds.index("ToolCallCompleted")
    progress = [e for e in events if isinstance(e, ToolCallProgress)]
    assert kinds[start + 1 : end] == ["ToolCallProgress"] * 3
    assert [(p.progress, p.total, p.message) for p in progress] == [
        (1.0, 3.0, "step 1"), (2.0, 3.0, "step 2"), (3.0, 3.0, "step 3"),
    ]  # fmt: skip
    assert {(p.call_id, p.tool_name, p.iteration) for p in progress} == {
        ("c1", "f_spam_progress", 1)
    }
    assert [(s.sequence, s.event) for s in logged] == [(s.sequence, s.event) for s in streamed]


@pytest.mark.timeout(SPAM_WAIT_S + 20)
async def test_a_server_spamming_20k_progress_notifications_adds_bounded_events_and_memory(
    tmp_path: Path, fault_dir: Path
) -> None:
    config = tmp_path / "sidecar.toml"
    config.write_text(
        f'file_tools = false\n[mcp_servers.r]\ncommand = "{sys.executable}"\nargs = ["{RAW}"]\n'
        f'env = {{ FAULT_DIR = "{fault_dir}" }}\nprogress_interval = 0.5\n'
        f"timeout = {SPAM_WAIT_S - 30:g}\n",
        encoding="utf-8",
    )
    serve = await asyncio.create_subprocess_exec(
        CLI, "serve", "--listen", "127.0.0.1:0", "--log-level", "warning", "--config", str(config),
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert serve.stdout is not None
        async with asyncio.timeout(SPAM_WAIT_S):  # the start too: the machine may be loaded
            address = (await serve.stdout.readline()).decode().split()[-1]
        async with AsyncSidecarClient(address) as client, asyncio.timeout(SPAM_WAIT_S):
            await _events(client, "r_echo", text="warm up")
            before = _peak_rss_kib(serve.pid)
            events = await _events(client, "r_spam_progress", count=SPAM)
            grown = _peak_rss_kib(serve.pid) - before
    finally:
        serve.terminate()
        await serve.wait()

    progress = [e for e in events if isinstance(e, ToolCallProgress)]
    record = _record(events)
    assert record.success, record.error
    assert record.output == {"content": [{"type": "text", "text": f"reported {SPAM}"}]}
    # The first at once, then one per half second at most, and the latest before the record.
    assert 2 <= len(progress) <= 2 + record.duration_ms / 500
    assert progress[-1].progress == SPAM
    assert len(events) == len(progress) + 8  # the run, two iterations, the call: no more
    assert grown < 8 * 1024  # measured: 0.5 MiB; 20k events in the log would be over 8 MiB


def _peak_rss_kib(pid: int) -> int:
    """The process's peak resident set (``VmHWM``), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmHWM in /proc/{pid}/status")


async def test_progress_with_no_interval_is_still_capped_per_call(
    make_mcp_sidecar: McpSidecarFactory, fault_dir: Path
) -> None:
    sidecar = await make_mcp_sidecar(raw_server(fault_dir, progress_interval_s=0))
    async with AsyncSidecarClient(sidecar.address) as client:
        events = await bounded(_events(client, "r_spam_progress", count=MAX_PROGRESS_EVENTS + 500))

    progress = [e for e in events if isinstance(e, ToolCallProgress)]
    assert len(progress) == MAX_PROGRESS_EVENTS
    assert _record(events).success


async def test_progress_extends_the_timeout_of_a_call_that_keeps_reporting(
    make_mcp_sidecar: McpSidecarFactory, fault_dir: Path
) -> None:
    server = fault_server(
        fault_dir, timeout_s=2.0, progress_extends_timeout=True, max_timeout_s=60.0
    )
    sidecar = await make_mcp_sidecar(server)
    async with AsyncSidecarClient(sidecar.address) as client:
        events = await bounded(_events(client, "f_slow_progress", steps=20, every=0.2))

    record = _record(events)
    assert record.success, record.error
    assert record.output == {"result": "done after 20"}
    assert record.duration_ms > 2000  # it ran past its timeout, kept alive by its progress


async def test_without_progress_extends_timeout_progress_does_not_extend_it(
    make_mcp_sidecar: McpSidecarFactory, fault_dir: Path
) -> None:
    sidecar = await make_mcp_sidecar(fault_server(fault_dir, timeout_s=2.0))
    async with AsyncSidecarClient(sidecar.address) as client:
        events = await bounded(_events(client, "f_slow_progress", steps=20, every=0.2))

    record = _record(events)
    assert record.error_kind is ErrorKind.TIMEOUT
    assert record.error == "tool 'f_slow_progress' timed out after 2s"
    assert any(isinstance(e, ToolCallProgress) for e in events)


async def test_progress_cannot_extend_a_call_past_its_max_timeout(
    make_mcp_sidecar: McpSidecarFactory, fault_dir: Path
) -> None:
    server = fault_server(
        fault_dir, timeout_s=1.5, progress_extends_timeout=True, max_timeout_s=3.0
    )
    sidecar = await make_mcp_sidecar(server)
    async with AsyncSidecarClient(sidecar.address) as client:
        events = await bounded(_events(client, "f_slow_progress", steps=0, every=0.1))

    record = _record(events)
    assert record.error_kind is ErrorKind.TIMEOUT
    assert "extended by progress" in (record.error or "")
    assert 2900 <= record.duration_ms < 3000 + 5000  # the hard maximum, not for ever
    assert isinstance(events[3], ToolCallStarted)


async def test_a_progress_message_bigger_than_a_frame_is_cut_and_the_call_completes(
    make_mcp_sidecar: McpSidecarFactory, fault_dir: Path
) -> None:
    server = raw_server(fault_dir, progress_interval_s=0)
    sidecar = await make_mcp_sidecar(server, max_message_bytes=1024 * 1024)
    async with AsyncSidecarClient(sidecar.address) as client:
        # 2 MiB of UTF-8 ("é" is two bytes): twice what one message may carry.
        events = await bounded(_events(client, "r_big_progress", count=1, size=1024 * 1024))

    progress = [e for e in events if isinstance(e, ToolCallProgress)]
    record = _record(events)
    assert record.success, record.error
    assert [p.progress for p in progress] == [1.0]
    message = progress[0].message
    assert len(message.encode()) <= MAX_PROGRESS_MESSAGE_BYTES
    assert message.startswith("éé")
    assert message.endswith("more bytes cut]")
    assert isinstance(events[-1], RunCompleted)


async def test_many_large_progress_messages_add_a_bounded_amount_to_the_log(
    make_mcp_sidecar: McpSidecarFactory, fault_dir: Path
) -> None:
    sidecar = await make_mcp_sidecar(raw_server(fault_dir, progress_interval_s=0))
    async with AsyncSidecarClient(sidecar.address) as client:
        events = await bounded(_events(client, "r_big_progress", count=20, size=1024 * 1024))

    progress = [e for e in events if isinstance(e, ToolCallProgress)]
    assert _record(events).success
    assert len(progress) == 20
    logged = sum(len(p.message.encode()) for p in progress)
    assert logged <= 20 * MAX_PROGRESS_MESSAGE_BYTES  # 40 MiB of messages before the cut


async def test_a_held_progress_report_goes_out_when_its_interval_ends(
    make_mcp_sidecar: McpSidecarFactory, fault_dir: Path
) -> None:
    sidecar = await make_mcp_sidecar(fault_server(fault_dir, progress_interval_s=0.5))
    arrived: list[tuple[float, float]] = []
    async with AsyncSidecarClient(sidecar.address) as client:
        script = calling(("c1", "f_gapped_progress", {"pause": 4.0}))

        async def follow() -> None:
            async for streamed in client.stream_tool_loop("go", script=script):
                if isinstance(streamed.event, ToolCallProgress):
                    arrived.append((streamed.event.progress, time.monotonic()))

        await bounded(follow())

    assert [p for p, _ in arrived] == [1.0, 2.0, 9.0]
    first, second = arrived[0][1], arrived[1][1]
    assert second - first < 2.5  # about 0.5 s: its interval's end, not the next report at 4 s


async def test_a_held_progress_report_goes_out_before_the_record_of_a_call_that_times_out(
    make_mcp_sidecar: McpSidecarFactory, fault_dir: Path
) -> None:
    server = fault_server(fault_dir, progress_interval_s=30.0, timeout_s=1.0)
    sidecar = await make_mcp_sidecar(server)
    async with AsyncSidecarClient(sidecar.address) as client:
        events = await bounded(_events(client, "f_gapped_progress", pause=10.0))

    kinds = [type(e).__name__ for e in events]
    start, end = kinds.index("ToolCallStarted"), kinds.index("ToolCallCompleted")
    assert [e.progress for e in events[start + 1 : end] if isinstance(e, ToolCallProgress)] == [
        1.0,
        2.0,
    ]
    assert _record(events).error_kind is ErrorKind.TIMEOUT


async def test_progress_that_is_not_a_finite_number_is_dropped_and_such_a_total_is_none(
    make_mcp_sidecar: McpSidecarFactory, fault_dir: Path
) -> None:
    sidecar = await make_mcp_sidecar(raw_server(fault_dir, progress_interval_s=0))
    async with AsyncSidecarClient(sidecar.address) as client:
        script = calling(("c1", "r_odd_progress", {}))
        streamed = await bounded(_collect(client.stream_tool_loop("go", script=script)))
        logged = await bounded(_collect(client.watch(streamed[0].run_id)))  # from the log

    events = [s.event for s in streamed]

    progress = [(e.progress, e.total) for e in events if isinstance(e, ToolCallProgress)]
    assert progress == [(1.0, None)]
    assert _record(events).success
    assert [s.event for s in logged] == events


async def _collect(stream: Any) -> list[Any]:
    return [item async for item in stream]

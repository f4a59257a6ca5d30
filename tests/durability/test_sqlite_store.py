"""With a durable event store (SQLite, Redis), a restarted sidecar still answers for every run
it had; the last tests look inside the SQLite file."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest

from cleveragents.client import AsyncSidecarClient, SidecarRpcError, StreamedEvent
from cleveragents.sidecar import ConfigError, Sidecar, SidecarConfig
from cleveragents.tool import RunCancelled, RunFailed, ToolCallCompleted, ToolCallStarted

from .conftest import SidecarProcess, Spawn, StartInProcess

ECHO_THEN_ANSWER: list[dict[str, Any]] = [
    {
        "content": "echoing",
        "tool_calls": [{"id": "c1", "name": "echo", "arguments": {"text": "a"}}],
    },
    {"content": "done", "usage": {"input_tokens": 5, "output_tokens": 2}},
]
#: The sidecar's command line, in the same environment as the tests.
CLI = str(Path(sys.executable).parent / "cleveragents-sidecar")
NAP: list[dict[str, Any]] = [
    {"tool_calls": [{"id": "nap", "name": "sleep", "arguments": {"seconds": 30}}]}
]


async def _log(client: AsyncSidecarClient, run_id: str) -> list[StreamedEvent]:
    return [event async for event in client.watch(run_id)]


async def test_finished_runs_survive_a_restart_with_their_whole_log(
    start_in_process: StartInProcess,
) -> None:
    first = await start_in_process()
    async with AsyncSidecarClient(first.address) as client:
        done = await client.run_tool_loop("go", script=ECHO_THEN_ANSWER, run_id="done")
        before = await _log(client, "done")
    await first.stop(1.0)

    second = await start_in_process()
    async with AsyncSidecarClient(second.address) as client:
        info = await client.get_run("done")
        after = await _log(client, "done")
    assert info.state == "completed"
    assert info.result == done
    assert [(e.sequence, e.event) for e in after] == [(e.sequence, e.event) for e in before]


async def test_failed_and_cancelled_runs_keep_their_state_across_a_restart(
    start_in_process: StartInProcess,
) -> None:
    first = await start_in_process()
    async with AsyncSidecarClient(first.address) as client:
        with pytest.raises(SidecarRpcError):
            # The script runs out at iteration 2: the run fails.
            await client.run_tool_loop(
                "go", script=ECHO_THEN_ANSWER[:1], max_iterations=3, run_id="failed"
            )
        stream = client.stream_tool_loop("go", script=NAP, run_id="cancelled")
        async for streamed in stream:
            if isinstance(streamed.event, ToolCallStarted):
                break
        await stream.aclose()
        await client.get_run("cancelled")
    await first.stop(1.0)

    second = await start_in_process()
    async with AsyncSidecarClient(second.address) as client:
        failed, cancelled = await client.get_run("failed"), await client.get_run("cancelled")
    assert (failed.state, cancelled.state) == ("failed", "cancelled")
    assert cancelled.result is not None
    assert cancelled.result.tool_call_history[0].error_kind is not None


async def test_a_run_reused_by_id_replaces_the_stored_log(
    start_in_process: StartInProcess,
) -> None:
    first = await start_in_process()
    async with AsyncSidecarClient(first.address) as client:
        await client.run_tool_loop("go", script=ECHO_THEN_ANSWER, run_id="same")
        await client.run_tool_loop("go", script=[{"content": "second"}], run_id="same")
    await first.stop(1.0)
    second = await start_in_process()
    async with AsyncSidecarClient(second.address) as client:
        events = await _log(client, "same")
    assert [e.sequence for e in events] == [1, 2, 3, 4]
    assert events[-1].event.result.content == "second"  # type: ignore[union-attr]


async def test_retention_applies_to_restored_runs(start_in_process: StartInProcess) -> None:
    first = await start_in_process()
    async with AsyncSidecarClient(first.address) as client:
        for run_id in ("old", "new"):
            await client.run_tool_loop("go", script=[{"content": run_id}], run_id=run_id)
    await first.stop(1.0)
    second = await start_in_process(max_finished_runs=1)
    async with AsyncSidecarClient(second.address) as client:
        assert (await client.get_run("new")).state == "completed"
        with pytest.raises(SidecarRpcError) as raised:
            await client.get_run("old")
    assert raised.value.code is grpc.StatusCode.NOT_FOUND


async def test_the_store_uses_wal_mode(start_on_sqlite: StartInProcess, db: Path) -> None:
    await start_on_sqlite()
    with sqlite3.connect(db) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)


async def test_a_stream_sees_only_stored_events_and_all_of_them(
    start_on_sqlite: StartInProcess, db: Path
) -> None:
    sidecar = await start_on_sqlite()
    async with AsyncSidecarClient(sidecar.address) as client:
        seen = [e async for e in client.stream_tool_loop("go", script=ECHO_THEN_ANSWER)]
    run_id = seen[0].run_id
    with sqlite3.connect(db) as connection:
        stored = connection.execute(
            "SELECT count(*) FROM events WHERE run_id = ?", (run_id,)
        ).fetchone()
    assert stored == (len(seen),)


async def test_a_run_live_at_a_crash_ends_with_run_failed_after_the_restart(
    spawn: Spawn,
) -> None:
    first: SidecarProcess = spawn()
    script: list[dict[str, Any]] = [ECHO_THEN_ANSWER[0], *NAP]
    async with AsyncSidecarClient(first.address) as client:
        seen = []
        async for streamed in client.stream_tool_loop(
            "go", script=script, run_id="live", detach=True
        ):
            seen.append(streamed)
            if isinstance(streamed.event, ToolCallStarted) and streamed.event.tool_name == "sleep":
                break
    first.kill()

    second: SidecarProcess = spawn(resume_runs="false")  # today's behaviour without resuming
    async with AsyncSidecarClient(second.address) as client:
        info = await client.get_run("live")
        log = await _log(client, "live")
    assert info.state == "failed"
    assert [e.sequence for e in log] == list(range(1, len(log) + 1))
    assert [e.event for e in log[: len(seen)]] == [e.event for e in seen]
    terminal = log[-1].event
    assert isinstance(terminal, RunFailed)
    assert "stopped while this run was live" in terminal.message
    assert [r.tool_name for r in terminal.result.tool_call_history] == ["echo"]
    assert not any(isinstance(e.event, RunCancelled) for e in log)
    assert sum(isinstance(e.event, ToolCallCompleted) for e in log) == 1


async def test_a_kill_9_under_load_loses_no_event_a_client_was_sent(spawn: Spawn) -> None:
    """Many concurrent streaming runs; kill -9 mid-way; every event any client received is
    in the restarted sidecar's logs, in order, and every run ends with a terminal event."""
    first: SidecarProcess = spawn()
    turns: list[dict[str, Any]] = [
        {"tool_calls": [{"id": f"c{i}", "name": "echo", "arguments": {"text": "x" * 50}}]}
        for i in range(400)
    ] + [{"content": "done"}]
    received: dict[str, list[StreamedEvent]] = {}
    enough = asyncio.Event()

    async def follow(client: AsyncSidecarClient, run_id: str) -> None:
        events = received.setdefault(run_id, [])
        try:
            async for streamed in client.stream_tool_loop(
                "go", script=turns, max_iterations=500, run_id=run_id, detach=True
            ):
                events.append(streamed)
                if sum(len(v) for v in received.values()) > 3000:
                    enough.set()
        except SidecarRpcError:
            pass  # the server died under us: what we got is what counts

    async with AsyncSidecarClient(first.address) as client:
        followers = [asyncio.create_task(follow(client, f"load-{i}")) for i in range(30)]
        await asyncio.wait_for(enough.wait(), 60)
        first.kill()
        await asyncio.gather(*followers)

    second: SidecarProcess = spawn()
    acknowledged = {run_id: events for run_id, events in received.items() if events}
    assert len(acknowledged) >= 2
    async with AsyncSidecarClient(second.address) as client:
        for run_id, events in acknowledged.items():
            log = await _log(client, run_id)
            assert [e.sequence for e in log] == list(range(1, len(log) + 1)), run_id
            assert len(log) >= len(events), run_id
            assert [e.event for e in log[: len(events)]] == [e.event for e in events], run_id
            assert (await client.get_run(run_id)).state in ("completed", "failed")


async def test_a_file_that_is_not_a_database_is_refused_in_one_line(db: Path) -> None:
    _write(db, b"this is not SQLite, just garbage\x00" * 64)
    sidecar = Sidecar(SidecarConfig(listen="127.0.0.1:0", event_store=str(db)))
    with pytest.raises(ConfigError, match="is not a usable run store") as refused:
        await sidecar.start()
    assert "\n" not in str(refused.value)


async def test_a_store_of_another_schema_is_refused(db: Path) -> None:
    with sqlite3.connect(db) as connection:
        connection.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, payload TEXT)")
    sidecar = Sidecar(SidecarConfig(listen="127.0.0.1:0", event_store=str(db)))
    with pytest.raises(ConfigError, match="is not a usable run store"):
        await sidecar.start()


async def test_serve_on_an_unusable_store_exits_2_with_one_line(db: Path) -> None:
    _write(db, b"garbage" * 100)
    process = await asyncio.create_subprocess_exec(
        CLI, "serve", "--listen", "127.0.0.1:0",
        env={**os.environ, "CLEVERAGENTS_SIDECAR_EVENT_STORE": str(db)},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with asyncio.timeout(30):
        _, err = await process.communicate()
    assert process.returncode == 2
    lines = [line for line in err.decode().splitlines() if "not a usable run store" in line]
    assert len(lines) == 1
    assert "Traceback" not in err.decode()


async def test_an_undecodable_row_quarantines_its_run_and_the_others_start(
    start_on_sqlite: StartInProcess, db: Path
) -> None:
    first = await start_on_sqlite()
    async with AsyncSidecarClient(first.address) as client:
        await client.run_tool_loop("go", script=ECHO_THEN_ANSWER, run_id="good")
        await client.run_tool_loop("go", script=ECHO_THEN_ANSWER, run_id="bad")
    await first.stop(1.0)
    with sqlite3.connect(db) as connection:
        connection.execute(
            "UPDATE events SET frame = ? WHERE run_id = 'bad' AND sequence = 3",
            (b"\x0a\x05\xff\xff\xff\xff\xff",),
        )

    second = await start_on_sqlite()
    async with AsyncSidecarClient(second.address) as client:
        assert (await client.get_run("good")).state == "completed"
        with pytest.raises(SidecarRpcError) as missing:
            await client.get_run("bad")
    assert missing.value.code == grpc.StatusCode.NOT_FOUND
    await second.stop(1.0)
    with sqlite3.connect(db) as connection:
        kept = connection.execute(
            "SELECT count(*) FROM quarantine WHERE run_id = 'bad'"
        ).fetchone()[0]
        served = connection.execute("SELECT count(*) FROM events WHERE run_id = 'bad'").fetchone()
    assert kept > 0  # set aside, not deleted
    assert served[0] == 0


def _write(path: Path, data: bytes) -> None:
    path.write_bytes(data)

"""``cleveragents-sidecar watch`` and ``runs`` against a real sidecar."""

from __future__ import annotations

import asyncio
import io
import re
import sys
import threading
from pathlib import Path

import pytest

from cleveragents.client import AsyncSidecarClient, SidecarClient
from cleveragents.sidecar import ProfileConfig, Sidecar
from cleveragents.sidecar.cli.tables import show_runs
from cleveragents.sidecar.cli.watch import watch
from cleveragents.tool import ToolCallStarted

from .conftest import WAIT_S, SidecarFactory, Tools, call, turn

#: Starting a Python process and importing grpc takes a while on a loaded machine.
PROCESS_WAIT_S = 30.0


class _Terminal(io.StringIO):
    """Output that says it is a terminal, so the view draws its progress line."""

    def isatty(self) -> bool:
        return True


def _command() -> list[str]:
    script = Path(sys.executable).parent / "cleveragents-sidecar"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "cleveragents.sidecar.cli"]  # pragma: no cover


async def _start_gated_run(client: AsyncSidecarClient, run_id: str) -> None:
    """A detached run that waits in the ``gate`` tool, then naps and fails in parallel."""
    script = [
        turn("", call("g1", "gate")),
        turn("", call("n1", "nap", seconds=0.1), call("f1", "fail", text="x")),
        turn("all done", usage=(5, 2)),
    ]
    stream = client.stream_tool_loop("go", script=script, run_id=run_id, detach=True)
    async with asyncio.timeout(WAIT_S):
        async for streamed in stream:
            if isinstance(streamed.event, ToolCallStarted):
                break
    await stream.aclose()


async def test_watch_follows_a_run_live_in_a_subprocess(sidecar: Sidecar, tools: Tools) -> None:
    async with AsyncSidecarClient(sidecar.address) as client:
        await _start_gated_run(client, "watched")
    process = await asyncio.create_subprocess_exec(
        *_command(), "watch", "watched", "--target", sidecar.address,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stdout is not None
    try:
        # The header comes from the replayed run_started: the watcher is following the run.
        header = await asyncio.wait_for(process.stdout.readline(), PROCESS_WAIT_S)
        assert header.decode().startswith("run watched: up to 25 iterations, tools: ")
        tools.release.set()
        out, err = await asyncio.wait_for(process.communicate(), PROCESS_WAIT_S)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0, err.decode()
    text = out.decode()
    assert "\r" not in text  # not a terminal: plain lines, no progress line
    lines = text.splitlines()
    # A line per tool call as it ended: the failure first, it does not wait for the nap.
    calls = [line.split() for line in lines if line.startswith("  [")]
    assert [(c[0], c[1], c[4]) for c in calls] == [
        ("[1]", "gate", "ok"),
        ("[2]", "fail", "FAILED"),
        ("[2]", "nap", "ok"),
    ]
    assert "FAILED exception  it failed" in lines[1]
    # Then the table, in the order the model asked for the calls, and the result.
    table = lines[lines.index("") + 1 : lines.index("", lines.index("") + 1)]
    assert table[0].split() == ["#", "iter", "tool", "call", "id", "duration", "status", "error"]
    assert [row.split()[2] for row in table[1:]] == ["gate", "nap", "fail"]
    assert "FAILED exception  it failed" in table[3]
    assert lines[-2] == (
        "completed: stop_reason=final_answer, iterations=3, tool calls=3 (1 failed), "
        "tokens in/out=5/2"
    )
    assert lines[-1] == "answer: all done"


async def test_watch_draws_a_progress_line_on_a_terminal(sidecar: Sidecar) -> None:
    async with AsyncSidecarClient(sidecar.address) as client:
        script = [turn("", call("e1", "echo", text="x")), turn("ok")]
        await client.run_tool_loop("go", script=script, run_id="done-run")
    out = _Terminal()

    def follow() -> int:
        with SidecarClient(sidecar.address) as client:
            return watch(client, "done-run", 0, out)

    assert await asyncio.to_thread(follow) == 0
    text = out.getvalue()
    progress = r"\r\x1b\[2Kiteration {} \| {} tool calls, 0 failed \| [\d.]+ s{}"
    assert re.search(progress.format("1/25", 0, r" \| running: echo [\d.]+ s"), text)
    assert re.search(progress.format("2/25", 1, ""), text)
    # The progress line is erased before each record line and before the table.
    assert "\r\x1b[2K  [1]   echo" in text
    table_at = text.index("\n#  iter")
    assert text[:table_at].endswith("\r\x1b[2K")
    assert text.rstrip().endswith("answer: ok")


async def test_watch_of_an_unknown_run_fails(
    sidecar: Sidecar, capsys: pytest.CaptureFixture[str]
) -> None:
    def follow() -> int:
        with SidecarClient(sidecar.address) as client:
            return watch(client, "nope", 0, io.StringIO())

    assert await asyncio.to_thread(follow) == 2
    assert "NOT_FOUND" in capsys.readouterr().err


async def test_runs_lists_recent_runs_or_the_named_ones(
    sidecar: Sidecar, tools: Tools, capsys: pytest.CaptureFixture[str]
) -> None:
    async with AsyncSidecarClient(sidecar.address) as client:
        await client.run_tool_loop(
            "go", script=[turn("", call("f", "fail")), turn("ok")], run_id="a"
        )
        await _start_gated_run(client, "b")
    out = io.StringIO()

    def show(run_ids: list[str]) -> int:
        with SidecarClient(sidecar.address) as client:
            return show_runs(client, run_ids, 20, out)

    assert await asyncio.to_thread(show, ["a", "b"]) == 0
    rows = [line.split() for line in out.getvalue().splitlines()]
    assert rows[0] == ["run", "id", "state", "stop", "reason", "iterations", "tool", "calls",
                       "failed", "events"]  # fmt: skip
    assert rows[1] == ["a", "completed", "final_answer", "2", "1", "1", "8"]
    assert rows[2][:2] == ["b", "running"]
    assert await asyncio.to_thread(show, ["a", "missing"]) == 1
    assert "no run 'missing'" in capsys.readouterr().err
    # Without ids: the recent runs (ListRuns), newest first.
    out.seek(0)
    out.truncate()
    assert await asyncio.to_thread(show, []) == 0
    lines = out.getvalue().splitlines()
    assert lines[0].split() == ["run", "id", "state", "stop", "reason", "iterations", "tool",
                                "calls", "started", "took", "prompt"]  # fmt: skip
    assert [line.split()[:2] for line in lines[1:]] == [["b", "running"], ["a", "completed"]]
    assert lines[2].split()[2:5] == ["final_answer", "2", "1"]
    assert lines[2].endswith(" s  go")
    tools.release.set()


class _Writes(io.StringIO):
    """Output that keeps each write apart, and says when the run's header is out."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []
        self.header = threading.Event()

    def write(self, text: str) -> int:
        self.writes.append(text)
        if text.startswith("run "):
            self.header.set()
        return super().write(text)


async def _watched_answer(
    make_sidecar: SidecarFactory, tools: Tools, answer: str, run_id: str
) -> _Writes:
    """What ``watch`` wrote following a run whose model streams ``answer`` (after a gated
    tool call) while it follows it."""
    sidecar = await make_sidecar(
        profiles={"slow": ProfileConfig("slow", "scripted", stream_delay_s=0.01)}
    )
    script = [turn("", call("g1", "gate")), turn(answer)]
    out = _Writes()

    def follow() -> int:
        with SidecarClient(sidecar.address) as client:
            return watch(client, run_id, 0, out)

    async with AsyncSidecarClient(sidecar.address) as client:
        stream = client.stream_tool_loop(
            "go", script=script, profile="slow", run_id=run_id, detach=True
        )
        async with asyncio.timeout(WAIT_S):
            await anext(stream)  # run_started: the run exists
            await tools.gate_started.wait()
        await stream.aclose()
        watching = asyncio.create_task(asyncio.to_thread(follow))
        assert await asyncio.to_thread(out.header.wait, WAIT_S)
        tools.release.set()  # the answer streams while the watcher follows
        async with asyncio.timeout(WAIT_S):
            assert await watching == 0
    return out


async def test_watch_prints_the_model_text_as_it_streams(
    make_sidecar: SidecarFactory, tools: Tools
) -> None:
    words = [f"w{i} " for i in range(20)]
    out = await _watched_answer(make_sidecar, tools, "".join(words).strip(), "talk")

    assert "  model: " + "".join(words).strip() + "\n" in out.getvalue()
    pieces = [w for w in out.writes if w.startswith("w")]
    assert len(pieces) > 1  # written as it came, not at the end


async def test_watch_shows_control_characters_in_the_model_text_as_escapes(
    make_sidecar: SidecarFactory, tools: Tools
) -> None:
    answer = "safe\x1b[2J\x1b]0;owned\x07 line\roverwritten\ttab\nnext \x9b31m end"
    out = await _watched_answer(make_sidecar, tools, answer, "ctl")

    printed = out.getvalue()
    model = printed[printed.index("  model: ") : printed.index(" end") + 4]
    shown = r"safe\e[2J\e]0;owned\x07 line\roverwritten" + "\ttab\n         next " + r"\x9b31m end"
    assert model == "  model: " + shown

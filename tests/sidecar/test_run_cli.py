"""``cleveragents-sidecar run``, ``cancel`` and ``runs RUN_ID`` against a real ``serve``: a run
started from a terminal and streamed to its end, cancelled from another, and its failed calls
shown afterwards."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from cleveragents.client import SidecarClient, SidecarRpcError
from cleveragents.tool import RunCancelled, RunCompleted, RunEvent, ToolCallStarted

from .conftest import CLI, CLI_WAIT_S

if TYPE_CHECKING:
    from tests.conftest import ServedSidecar, ServeSidecar

ECHO_AND_A_BAD_SLEEP: list[dict[str, Any]] = [
    {"tool_calls": [
        {"id": "c1", "name": "echo", "arguments": {"text": "hi"}},
        {"id": "c2", "name": "sleep", "arguments": {"seconds": "soon"}},
    ]},
    {"content": "done"},
]  # fmt: skip
SLOW: list[dict[str, Any]] = [
    {"tool_calls": [{"id": "s1", "name": "sleep", "arguments": {"seconds": 60}}]},
    {"content": "woke"},
]


def cli(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    """Run ``cleveragents-sidecar args``; its exit status, stdout and stderr."""
    done = subprocess.run(
        [CLI, *args], capture_output=True, text=True, timeout=CLI_WAIT_S, input=stdin
    )
    return done.returncode, done.stdout, done.stderr


def script(tmp_path: Path, turns: Any, name: str = "script.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(turns))
    return str(path)


@pytest.fixture
def served(serve_sidecar: ServeSidecar) -> ServedSidecar:
    return serve_sidecar()


@pytest.fixture
def client(served: ServedSidecar) -> Iterator[SidecarClient]:
    with SidecarClient(served.address) as c:
        yield c


def until_started(client: SidecarClient, run_id: str, running: subprocess.Popen[str]) -> None:
    """Wait until ``running`` (a ``run`` command) has started ``run_id`` (it prints the run's
    first line then), then follow the run until one of its tool calls has started."""
    assert running.stdout is not None
    first = running.stdout.readline()
    assert first.startswith(f"run {run_id}: "), first
    for streamed in client.watch(run_id):
        if isinstance(streamed.event, ToolCallStarted):
            return
    raise AssertionError(f"run {run_id} ended before a tool call started")


def final_event(client: SidecarClient, run_id: str) -> RunEvent:
    """The terminal event of ``run_id``, once it has ended."""
    return list(client.watch(run_id))[-1].event


def test_run_streams_each_tool_call_and_the_result_and_exits_0_when_the_run_completes(
    served: ServedSidecar, client: SidecarClient, tmp_path: Path
) -> None:
    turns = script(tmp_path, ECHO_AND_A_BAD_SLEEP)
    code, out, err = cli("run", "Say hi", "--script", turns, "--run-id", "r1",
                         "--target", served.address)  # fmt: skip
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].startswith("run r1: up to 25 iterations, tools: echo, sleep")
    assert lines[1].split()[:4] == ["[1]", "echo", lines[1].split()[2], "ms"]
    assert "FAILED invalid_arguments" in lines[2]
    assert "completed: stop_reason=final_answer, iterations=2, tool calls=2 (1 failed)" in out
    assert out.rstrip().endswith("answer: done")
    info = client.get_run("r1")  # one run, each call once
    assert info.state == "completed"
    assert info.result is not None
    assert [r.call_id for r in info.result.tool_call_history] == ["c1", "c2"]
    assert len(client.list_runs()) == 1


def test_run_reads_the_prompt_from_stdin_given_a_dash(
    served: ServedSidecar, client: SidecarClient, tmp_path: Path
) -> None:
    turns = script(tmp_path, [{"content": "ok"}])
    code, _, _ = cli("run", "-", "--script", turns, "--run-id", "p", "--target", served.address,
                     stdin="a prompt\nover two lines")  # fmt: skip
    assert code == 0
    summary = client.list_runs()[0]
    assert (summary.run_id, summary.prompt) == ("p", "a prompt\nover two lines")


def test_run_exits_1_when_the_run_fails(served: ServedSidecar, tmp_path: Path) -> None:
    # The script runs out of turns after its tool call: the run fails.
    turns = script(tmp_path, [{"tool_calls": [{"id": "c1", "name": "echo", "arguments": {}}]}])
    code, out, _ = cli("run", "go", "--script", turns, "--target", served.address)
    assert code == 1
    assert "\nfailed: " in out
    assert "script" in out.split("\nfailed: ", 1)[1]  # the reason line says what failed


def test_run_with_a_script_that_is_not_json_exits_2_naming_the_file_and_starts_nothing(
    served: ServedSidecar, client: SidecarClient, tmp_path: Path
) -> None:
    path = tmp_path / "turns.json"
    path.write_text('[{"content": "x"},\n')
    code, out, err = cli("run", "go", "--script", str(path), "--target", served.address)
    assert (code, out) == (2, "")
    assert f"the script {str(path)!r} is not valid JSON" in err
    assert "line 2" in err
    assert client.list_runs() == []


def test_run_with_a_deeply_nested_script_exits_2_with_one_line_and_starts_nothing(
    served: ServedSidecar, client: SidecarClient, tmp_path: Path
) -> None:
    path = tmp_path / "deep.json"
    path.write_text('[{"content": "x", "usage": ' + "[" * 100_000 + "]" * 100_000 + "}]")
    code, out, err = cli("run", "go", "--script", str(path), "--target", served.address)
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        f"cleveragents-sidecar: the script {str(path)!r} is nested too deeply to read (arrays "
        f"and objects more than about {sys.getrecursionlimit()} levels inside each other)"
    ]
    assert client.list_runs() == []


def test_run_with_a_script_file_that_is_missing_exits_2(served: ServedSidecar) -> None:
    code, _, err = cli("run", "go", "--script", "/nonexistent/turns.json",
                       "--target", served.address)  # fmt: skip
    assert code == 2
    assert "cannot read the script '/nonexistent/turns.json'" in err


def test_run_the_sidecar_refuses_exits_2_with_its_reason(
    served: ServedSidecar, client: SidecarClient
) -> None:
    code, out, err = cli("run", "go", "--profile", "nosuch", "--target", served.address)
    assert (code, out) == (2, "")
    assert "cannot run the prompt: NOT_FOUND: unknown LLM profile 'nosuch'" in err
    assert client.list_runs() == []


def test_run_without_a_sidecar_exits_2() -> None:
    code, _, err = cli("run", "go", "--target", "unix:/nonexistent/sidecar.sock")
    assert code == 2
    assert "UNAVAILABLE" in err


def test_cancel_ends_a_live_run_which_run_reports_with_exit_1(
    served: ServedSidecar, client: SidecarClient, tmp_path: Path
) -> None:
    turns = script(tmp_path, SLOW)
    running = subprocess.Popen(
        [CLI, "run", "nap", "--script", turns, "--run-id", "slow", "--target", served.address],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        until_started(client, "slow", running)
        code, out, err = cli("cancel", "slow", "--reason", "enough", "--target", served.address)
        run_out, _ = running.communicate(timeout=CLI_WAIT_S)
    finally:
        running.kill()
    assert (code, out, err) == (0, "run slow: cancelled\n", "")
    assert running.returncode == 1
    assert "cancelled: stop_reason=cancelled" in run_out
    assert "reason: enough" in run_out
    final = final_event(client, "slow")
    assert isinstance(final, RunCancelled)
    assert final.reason == "enough"


def test_cancel_of_a_run_that_has_ended_exits_1_and_says_how_it_ended(
    served: ServedSidecar, tmp_path: Path
) -> None:
    turns = script(tmp_path, [{"content": "ok"}])
    assert (
        cli("run", "go", "--script", turns, "--run-id", "done", "--target", served.address)[0] == 0
    )
    code, out, _ = cli("cancel", "done", "--target", served.address)
    assert (code, out) == (1, "run done had already ended: completed\n")


def test_cancel_of_a_run_already_cancelled_exits_1_and_says_it_had_ended(
    served: ServedSidecar, client: SidecarClient, tmp_path: Path
) -> None:
    turns = script(tmp_path, SLOW)
    running = subprocess.Popen(
        [CLI, "run", "nap", "--script", turns, "--run-id", "twice", "--detach",
         "--target", served.address],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        until_started(client, "twice", running)
        first = cli("cancel", "twice", "--target", served.address)
        second = cli("cancel", "twice", "--reason", "again", "--target", served.address)
        running.communicate(timeout=CLI_WAIT_S)
    finally:
        running.kill()
    assert first == (0, "run twice: cancelled\n", "")
    assert second == (1, "run twice had already ended: cancelled\n", "")
    final = final_event(client, "twice")
    assert isinstance(final, RunCancelled)
    assert final.reason != "again"  # the second cancel changed nothing


def test_cancel_of_a_failed_run_exits_1_and_says_it_failed(
    served: ServedSidecar, tmp_path: Path
) -> None:
    turns = script(tmp_path, [{"tool_calls": [{"id": "c1", "name": "echo", "arguments": {}}]}])
    assert cli("run", "go", "--script", turns, "--run-id", "f", "--target", served.address)[0] == 1
    assert cli("cancel", "f", "--target", served.address) == (
        1, "run f had already ended: failed\n", ""
    )  # fmt: skip


def test_cancel_with_no_sidecar_to_ask_exits_2(tmp_path: Path) -> None:
    code, out, err = cli("cancel", "any", "--target", f"unix:{tmp_path / 'nobody.sock'}")
    assert (code, out) == (2, "")
    assert "UNAVAILABLE" in err


def test_cancel_of_an_unknown_run_exits_1(served: ServedSidecar) -> None:
    code, out, err = cli("cancel", "no-such-run", "--target", served.address)
    assert (code, out) == (1, "")
    assert "NOT_FOUND" in err


def test_ctrl_c_during_run_cancels_the_run(
    served: ServedSidecar, client: SidecarClient, tmp_path: Path
) -> None:
    turns = script(tmp_path, SLOW)
    running = subprocess.Popen(
        [CLI, "run", "nap", "--script", turns, "--run-id", "int", "--target", served.address],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        until_started(client, "int", running)
        running.send_signal(signal.SIGINT)
        _, err = running.communicate(timeout=CLI_WAIT_S)
    finally:
        running.kill()
    assert running.returncode == 130
    assert "run int: cancelled (interrupted)" in err
    assert isinstance(final_event(client, "int"), RunCancelled)


def test_ctrl_c_during_a_detached_run_leaves_it_running(
    served: ServedSidecar, client: SidecarClient, tmp_path: Path
) -> None:
    turns = script(tmp_path, SLOW)
    running = subprocess.Popen(
        [CLI, "run", "nap", "--script", turns, "--run-id", "det", "--detach",
         "--target", served.address],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        until_started(client, "det", running)
        running.send_signal(signal.SIGINT)
        _, err = running.communicate(timeout=CLI_WAIT_S)
    finally:
        running.kill()
    assert running.returncode == 130
    assert "run det goes on (detached): cleveragents-sidecar watch det" in err
    assert client.get_run("det").state == "running"
    assert client.cancel_run("det") == "cancelled"


def test_runs_shows_each_failed_call_with_its_tool_and_error(
    served: ServedSidecar, tmp_path: Path
) -> None:
    turns = script(tmp_path, ECHO_AND_A_BAD_SLEEP)
    assert cli("run", "go", "--script", turns, "--run-id", "r1", "--target", served.address)[0] == 0
    code, out, _ = cli("runs", "r1", "--target", served.address)
    assert code == 0
    table, failures = out.split("\n\n")
    assert table.splitlines()[1].split()[:6] == ["r1", "completed", "final_answer", "2", "2", "1"]
    lines = failures.splitlines()
    assert lines[0] == "failed tool calls (1):"
    assert lines[1].split() == ["run", "id", "#", "iter", "tool", "call", "id", "kind", "error"]
    row = lines[2].split(maxsplit=6)
    assert row[:6] == ["r1", "2", "1", "sleep", "c2", "invalid_arguments"]
    assert (
        row[6]
        == "invalid arguments for tool 'sleep': at 'seconds': \"soon\" is not of type \"number\""
    )


def test_runs_of_a_run_with_no_failed_calls_shows_no_failures_section(
    served: ServedSidecar, tmp_path: Path
) -> None:
    turns = script(tmp_path, [{"content": "ok"}])
    assert cli("run", "go", "--script", turns, "--run-id", "ok", "--target", served.address)[0] == 0
    code, out, _ = cli("runs", "ok", "--target", served.address)
    assert code == 0
    assert "failed tool calls" not in out


def test_cancel_of_a_run_leaves_no_other_run_touched(
    served: ServedSidecar, client: SidecarClient, tmp_path: Path
) -> None:
    turns = script(tmp_path, [{"content": "ok"}])
    assert cli("run", "go", "--script", turns, "--run-id", "a", "--target", served.address)[0] == 0
    with pytest.raises(SidecarRpcError):
        client.get_run("b")
    assert cli("cancel", "b", "--target", served.address)[0] == 1
    assert isinstance(final_event(client, "a"), RunCompleted)

"""A sidecar started by a runtime: it follows its parent's death, tells the parent where it
listens without log scraping, names its version, and a second Ctrl-C hurries its stop."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import stat
import sys
from asyncio.subprocess import PIPE
from pathlib import Path

import pytest

from cleveragents.client import AsyncSidecarClient
from cleveragents.sidecar.cli.lifecycle import VERSION, ParentWatch
from cleveragents.tool import RunCancelled

from .conftest import CLI, CLI_WAIT_S, call, cli_sidecar, turn, until_tool_started, watch_to_end

#: A runtime that spawns the sidecar (its stdout and stderr inherited), then idles until killed.
PARENT = """
import subprocess, sys, threading
subprocess.Popen([sys.argv[1], "serve", *sys.argv[2:]])
threading.Event().wait()
"""


def port_is_free(address: str) -> bool:
    """Whether a new listener can bind the port (as the runtime's next sidecar would)."""
    host, _, port = address.rpartition(":")
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, int(port)))
            probe.listen()
        except OSError:
            return False
    return True


async def read_until_exit(process: asyncio.subprocess.Process) -> tuple[str, str]:
    """Everything left on the pipes the sidecar inherited: their end is the sidecar's exit."""
    assert process.stdout is not None
    assert process.stderr is not None
    async with asyncio.timeout(CLI_WAIT_S):
        out, err = await asyncio.gather(process.stdout.read(), process.stderr.read())
    return out.decode(), err.decode()


async def test_sidecar_exits_when_its_parent_is_killed(tmp_path: Path) -> None:
    store = tmp_path / "runs.sqlite"
    parent = await asyncio.create_subprocess_exec(
        sys.executable, "-c", PARENT, CLI, "--listen", "127.0.0.1:0", "--exit-with-parent",
        "--ready-fd", "1", "--event-store", str(store), "--shutdown-grace-s", "600",
        "--no-file-tools",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert parent.stdout is not None
    async with asyncio.timeout(CLI_WAIT_S):
        ready = json.loads(await parent.stdout.readline())
    async with AsyncSidecarClient(ready["address"]) as client:
        script = [turn("", call("s1", "sleep", seconds=300)), turn("never")]
        stream = client.stream_tool_loop("go", script=script, detach=True)
        run_id = (await until_tool_started(stream, "sleep"))[0].run_id

    parent.kill()  # kill -9: the parent runs no clean-up at all
    await parent.wait()
    out, err = await read_until_exit(parent)

    assert ready["pid"] != parent.pid
    assert out.startswith("cleveragents-sidecar listening on " + ready["address"])
    assert "parent process exited" in err
    assert port_is_free(ready["address"])
    # The live run was cancelled and its end flushed to the store before the exit.
    async with (
        cli_sidecar("--event-store", str(store), "--no-file-tools") as (process, address),
        AsyncSidecarClient(address) as client,
    ):
        last = (await watch_to_end(client, run_id))[-1].event
        process.send_signal(signal.SIGTERM)
    assert isinstance(last, RunCancelled)
    assert "shutting down" in last.reason


async def test_a_parent_pid_that_is_not_running_is_refused() -> None:
    process = await asyncio.create_subprocess_exec(
        CLI, "serve", "--listen", "127.0.0.1:0", "--parent-pid", str(2**22 + 1),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with asyncio.timeout(CLI_WAIT_S):
        out, err = await process.communicate()

    assert process.returncode == 2
    assert "parent_pid 4194305 is not a running process" in err.decode()
    assert not out


async def test_ready_file_holds_the_address_pid_and_version_as_json(tmp_path: Path) -> None:
    ready_file = tmp_path / "ready.json"
    async with cli_sidecar("--ready-file", str(ready_file), "--log-level", "warning") as (
        process,
        address,
    ):
        ready = json.loads(ready_file.read_text(encoding="utf-8"))
        process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(CLI_WAIT_S):
            await process.wait()

    assert ready == {
        "address": address, "pid": process.pid, "version": VERSION, "metrics_port": None,
        "console_url": None,
    }  # fmt: skip
    assert not ready_file.exists()  # a stale file would point the next parent at nobody


async def test_ready_file_never_writes_through_a_link_planted_at_a_name_it_might_use(
    tmp_path: Path,
) -> None:
    # The link sits where the sidecar used to write first, "<ready_file>.<pid>.partial":
    # the shell plants it knowing its own pid, which the sidecar then takes over (exec).
    victim = tmp_path / "victim"
    victim.write_text("precious\n", encoding="utf-8")
    ready_file = tmp_path / "ready.json"
    plant = f'ln -s {victim} {ready_file}."$$".partial && exec "$0" serve "$@"'
    process = await asyncio.create_subprocess_exec(
        "sh", "-c", plant, CLI, "--listen", "127.0.0.1:0", "--ready-file", str(ready_file),
        "--log-level", "warning", stdout=PIPE, stderr=PIPE,
    )  # fmt: skip
    assert process.stdout is not None
    try:
        async with asyncio.timeout(CLI_WAIT_S):
            listening = (await process.stdout.readline()).decode()
        ready = json.loads(ready_file.read_text(encoding="utf-8"))
        mode = stat.S_IMODE(os.stat(ready_file).st_mode)
    finally:
        process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(CLI_WAIT_S):
            await process.wait()
    umask = os.umask(0o022)
    os.umask(umask)

    assert listening.startswith("cleveragents-sidecar listening on "), listening
    assert ready["pid"] == process.pid
    assert mode == 0o666 & ~umask  # as a plain open() would have made it, not mkstemp's 0600
    assert victim.read_text(encoding="utf-8") == "precious\n"
    names = sorted(os.listdir(tmp_path))
    assert names == [f"ready.json.{process.pid}.partial", "victim"]  # the link, left alone


async def test_version_flag_prints_the_version() -> None:
    process = await asyncio.create_subprocess_exec(
        CLI, "--version", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    async with asyncio.timeout(CLI_WAIT_S):
        out, _ = await process.communicate()

    assert process.returncode == 0
    assert out.decode().strip() == f"cleveragents-sidecar {VERSION}"
    assert VERSION not in ("", "unknown")


async def test_a_second_sigint_cancels_the_live_runs_at_once() -> None:
    args = ("--shutdown-grace-s", "600", "--no-file-tools")
    async with (
        cli_sidecar(*args) as (process, address),
        AsyncSidecarClient(address) as client,
    ):
        script = [turn("", call("s1", "sleep", seconds=300)), turn("never")]
        stream = client.stream_tool_loop("go", script=script, detach=True)
        await until_tool_started(stream, "sleep")
        assert process.stderr is not None
        process.send_signal(signal.SIGINT)
        async with asyncio.timeout(CLI_WAIT_S):
            while b"sidecar stopping" not in await process.stderr.readline():
                pass  # the first SIGINT has begun the 600 s grace period
        process.send_signal(signal.SIGINT)
        async with asyncio.timeout(CLI_WAIT_S):
            rest = [event async for event in stream]
            code = await process.wait()

    assert code == 0
    last = rest[-1].event
    assert isinstance(last, RunCancelled)
    assert "shutting down" in last.reason


#: A multi-threaded runtime whose spawning thread ends while the process lives on (what a Go
#: program or a JVM may do): PR_SET_PDEATHSIG fires, and must not stop the sidecar.
THREADED_PARENT = """
import subprocess, sys, threading
def spawn():
    child = subprocess.Popen([sys.argv[1], "serve", *sys.argv[2:]], stdout=subprocess.PIPE)
    sys.stdout.buffer.write(child.stdout.readline())  # its ready line: it has armed the signal
    sys.stdout.flush()
spawner = threading.Thread(target=spawn)
spawner.start()
spawner.join()
threading.Event().wait()
"""


async def test_the_parent_thread_ending_does_not_stop_the_sidecar() -> None:
    parent = await asyncio.create_subprocess_exec(
        sys.executable, "-c", THREADED_PARENT, CLI, "--listen", "127.0.0.1:0",
        "--exit-with-parent", "--ready-fd", "1", "--no-file-tools",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert parent.stdout is not None
    assert parent.stderr is not None
    try:
        async with asyncio.timeout(CLI_WAIT_S):
            ready = json.loads(await parent.stdout.readline())
            while b"parent thread ended" not in await parent.stderr.readline():
                pass  # the death signal has come and been checked
        async with AsyncSidecarClient(ready["address"]) as client:
            result = await client.run_tool_loop("still there?", timeout=CLI_WAIT_S)
    finally:
        parent.kill()
        await parent.wait()
    await read_until_exit(parent)  # the parent's real death then stops it (stderr's end)

    assert result.content
    assert port_is_free(ready["address"])


@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "polling"])
async def test_a_watched_process_is_seen_to_exit(
    pidfd: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not pidfd:
        monkeypatch.delattr(os, "pidfd_open")  # a kernel or Python without pidfds
    watched = await asyncio.create_subprocess_exec(sys.executable, "-c", "input()", stdin=PIPE)
    watch = ParentWatch(watched.pid)
    gone = asyncio.create_task(watch.gone())
    assert watch.alive()

    assert watched.stdin is not None
    watched.stdin.close()  # it exits; the test reaps it, as its parent
    await watched.wait()
    async with asyncio.timeout(CLI_WAIT_S):
        await gone

    assert not watch.alive()

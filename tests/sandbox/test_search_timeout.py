"""``search_files``' own timeout over a real ``cleveragents-sidecar serve``: the call ends as a
timeout, and the worker thread left searching stops soon after, rather than walk on."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from cleveragents.client import AsyncSidecarClient
from cleveragents.tool import ErrorKind, ToolActorContext

CLI = str(Path(sys.executable).parent / "cleveragents-sidecar")
CLI_WAIT_S = 20.0
TIMEOUT_S = 0.3
#: The directories searched: about 25 s of RE2 work on a loaded 2-core machine, ~5 s on an
#: idle one; the thread must stop well within that.
DIRS = 2000
#: How soon after the call's timeout the thread must have let go of the tree (generous: the
#: thread checks its deadline between directories, each a few milliseconds of work).
STOPS_WITHIN_S = 3.0


def slow_tree(root: Path) -> None:
    """``DIRS`` directories, each holding a link to the same 1 MB text file of long lines."""
    big = root / "big.txt"
    big.write_bytes((b"a" * 1000 + b"\n") * 1000)
    for i in range(DIRS):
        folder = root / f"d{i:05}"
        folder.mkdir()
        os.link(big, folder / "f.txt")


def fds_into(pid: int, tree: Path) -> int:
    """How many of process ``pid``'s open descriptors point into ``tree``."""
    count = 0
    prefix = str(tree)
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue  # closed meanwhile
        count += target == prefix or target.startswith(prefix + os.sep)
    return count


@asynccontextmanager
async def serve(**env: str) -> AsyncIterator[tuple[int, str]]:
    process = await asyncio.create_subprocess_exec(
        CLI, "serve", "--listen", "127.0.0.1:0", "--log-level", "error",
        stdout=asyncio.subprocess.PIPE, env={**os.environ, **env},
    )  # fmt: skip
    try:
        assert process.stdout is not None
        async with asyncio.timeout(CLI_WAIT_S):
            line = (await process.stdout.readline()).decode().strip()
        yield process.pid, line.removeprefix("cleveragents-sidecar listening on ")
    finally:
        process.kill()
        await process.wait()


async def test_a_slow_search_ends_at_its_timeout_and_its_thread_stops(tmp_path: Path) -> None:
    slow_tree(tmp_path)
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "s1", "name": "search_files",
                         "arguments": {"pattern": "[ab]+c", "regex": True}}]},
        {"content": "done"},
    ]  # fmt: skip
    env = {"CLEVERAGENTS_SIDECAR_DEFAULT_TOOL_TIMEOUT_S": str(TIMEOUT_S)}
    async with serve(**env) as (pid, address), AsyncSidecarClient(address) as client:
        result = await client.run_tool_loop(
            "search", script=script, context=ToolActorContext(sandbox_root=str(tmp_path))
        )
        timed_out = time.monotonic()
        record = result.tool_call_history[0]
        assert (record.tool_name, record.error_kind) == ("search_files", ErrorKind.TIMEOUT)
        assert record.duration_ms < 10_000
        # The thread holds a descriptor of the directory it is in while it walks.
        while fds_into(pid, tmp_path):
            assert time.monotonic() - timed_out < STOPS_WITHIN_S, "the search thread walks on"
            await asyncio.sleep(0.02)  # polling the server's /proc: nothing to await instead
        # It stays stopped: nothing reopens the tree.
        assert fds_into(pid, tmp_path) == 0

"""WatchCursors whose client stopped reading (a SIGSTOPped process) cost a bounded number of bytes
each, are dropped with RESOURCE_EXHAUSTED and the sequence to resume from, and resume with no
gap. A FollowRun watcher's bound is the sidecar's own window; a WatchRun watcher's is the
HTTP/2 window its client grants."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from cleveragents.client import AsyncSidecarClient
from cleveragents.tool import ToolActorContext

if TYPE_CHECKING:
    from tests.conftest import ServedSidecar, ServeSidecar

#: Enough stalled watchers that what each costs shows above the server's noise; each also
#: reads the whole log back (26 MB) once it resumes, which is most of the test's time.
WATCHERS = 20
#: What one stalled WatchRun watcher may cost the server (README: "a watcher that stops
#: reading"). Usually 50-200 KiB; but what gRPC buffers is bounded by the flow-control window
#: the client granted, and a client that had been reading fast may have grown it to some 13 MB
#: (seen in about one run in seven), which the sidecar cannot see or limit from Python.
PER_WATCHER_BYTES = 16 * 1024 * 1024
#: What one stalled FollowRun watcher may cost: its window (the default 1 MiB, and at most
#: one message past it), plus what gRPC keeps for any stream.
PER_FOLLOWER_BYTES = 2 * 1024 * 1024
#: A log of about 26 MB of modest events: 400 reads of a 64 KiB file, each record carrying it.
#: Large enough that no watcher's socket buffers hold the whole of it (each one took up to
#: 12 MB before it stalled), so that every watcher stalls; and no event is large, so that
#: what a watcher costs is the flow control's doing, not one message's.
READS = 400
SCRIPT: list[dict[str, Any]] = [
    {"tool_calls": [{"id": f"c{i}", "name": "read_file", "arguments": {"path": "big.txt"}}]}
    for i in range(READS)
] + [{"content": "done"}]  # fmt: skip

#: The watchers' own process: it opens the streams, says "ready", is stopped, and once told
#: "go" reads every stream to its end, resumes each from the last sequence it received, and
#: prints what each saw.
WATCHER_PROCESS = r"""
import asyncio, json, sys
import grpc
from cleveragents.toolruntime.v1 import events_pb2, service_pb2, service_pb2_grpc

def sequences(message):
    events = list(message.events) or [message.event]
    return [event.sequence for event in events]

async def follow(channel, after):
    stub = service_pb2_grpc.ToolRuntimeServiceStub(channel)
    if MODE == "watch":
        return stub.WatchRun(service_pb2.WatchRunRequest(run_id="big", after_sequence=after,
                                                         batch_events=True))
    call = stub.FollowRun()
    start = service_pb2.FollowRunStart(run_id="big", after_sequence=after)
    await call.write(service_pb2.FollowRunRequest(start=start))
    return call

async def drain(call, until=None):
    seen = []
    try:
        while until is None or (until and (not seen or seen[-1] < until)):
            message = await call.read()
            if message is grpc.aio.EOF:
                break
            if MODE == "watch":
                seen += sequences(message)
                continue
            seen += [event.sequence for event in message.events]
            if message.ack_requested:
                ack = service_pb2.FollowRunAck(sequence=seen[-1])
                try:
                    await call.write(service_pb2.FollowRunRequest(ack=ack))
                except Exception:  # the call ended: reading on says how
                    pass
        return seen, "OK", ""
    except grpc.aio.AioRpcError as error:
        return seen, error.code().name, error.details()

async def main():
    address, count = sys.argv[1], int(sys.argv[2])
    # One connection each (gRPC would share one between channels to the same address).
    options = [("grpc.max_receive_message_length", 1 << 25), ("grpc.use_local_subchannel_pool", 1)]
    channels = [grpc.aio.insecure_channel(address, options=options) for _ in range(count)]
    calls = [await follow(channel, 0) for channel in channels]
    await asyncio.gather(*(call.initial_metadata() for call in calls))
    # Each reads up to a sequence first (0: none), then stops.
    firsts = await asyncio.gather(*(drain(call, until=int(sys.argv[4])) for call in calls))
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)

    # The rest of each stream at once (a dropped one waits a while for its last ack), then
    # each resumed in turn.
    rests = await asyncio.gather(*(drain(call) for call in calls))
    results = []
    for channel, (first, _, _), (rest, code, details) in zip(channels, firsts, rests):
        seen = first + rest
        resumed, resumed_code, _ = await drain(await follow(channel, seen[-1] if seen else 0))
        results.append({"seen": seen, "code": code, "details": details,
                        "resumed": resumed, "resumed_code": resumed_code})
    print(json.dumps(results), flush=True)

MODE = sys.argv[3]
asyncio.run(main())
"""


@pytest.fixture
def sidecar(serve_sidecar: ServeSidecar) -> ServedSidecar:
    """A sidecar that drops a watcher stuck in a write for a second; its log on a pipe."""
    return serve_sidecar(stderr=subprocess.PIPE, watcher_stall_s=1, file_tools="true")


@pytest.fixture
def sandbox(tmp_path: Path) -> ToolActorContext:
    """A sandbox holding ``big.txt``, 64 KiB."""
    (tmp_path / "big.txt").write_text("y" * (64 * 1024))
    return ToolActorContext(sandbox_root=str(tmp_path))


def _start_watchers(address: str, mode: str, read_first: int) -> subprocess.Popen[str]:
    command = [
        sys.executable, "-c", WATCHER_PROCESS, address, str(WATCHERS), mode, str(read_first)
    ]  # fmt: skip
    return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def _wait_for_drops(stderr: Any, count: int) -> None:
    """Read the server's log lines until it has dropped ``count`` watchers."""
    dropped = 0
    while dropped < count:
        line = stderr.readline()
        assert line, "the sidecar's log ended"
        if json.loads(line).get("event") == "watcher dropped":
            dropped += 1


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("mode", "bound"), [("follow", PER_FOLLOWER_BYTES), ("watch", PER_WATCHER_BYTES)]
)
async def test_stalled_watchers_cost_bounded_bytes_and_are_dropped_with_a_resume_point(
    sidecar: ServedSidecar, sandbox: ToolActorContext, mode: str, bound: int
) -> None:
    log = sidecar.process.stderr
    assert log is not None
    address = sidecar.address
    async with AsyncSidecarClient(address) as client:
        await client.run_tool_loop(
            "go", script=SCRIPT, max_iterations=READS + 1, context=sandbox, run_id="big"
        )
        total = (await client.get_run("big")).last_sequence
    before = sidecar.status_kib()

    # A follower reads half the log fast first (which grows the window its gRPC grants) and
    # is dropped all the same. A WatchRun watcher that did so might take in all the rest
    # before it stops (its window plus the socket buffers), and then nothing would drop it.
    watchers = _start_watchers(address, mode, total // 2 if mode == "follow" else 0)
    assert watchers.stdin is not None
    assert watchers.stdout is not None
    try:
        assert watchers.stdout.readline().strip() == "ready"
        watchers.send_signal(signal.SIGSTOP)  # the client stops reading its sockets
        await asyncio.to_thread(_wait_for_drops, log, WATCHERS)
        stalled = sidecar.status_kib()
        watchers.send_signal(signal.SIGCONT)
        watchers.stdin.write("go\n")
        watchers.stdin.flush()
        results = json.loads(await asyncio.to_thread(watchers.stdout.readline))
    finally:
        watchers.kill()
        watchers.wait(15)

    growth = (stalled - before) * 1024
    print(f"{WATCHERS} stalled {mode} watchers of a {total}-event log: +{growth / 1024 / 1024:.1f} "
          f"MiB server RSS, {growth / WATCHERS / 1024:.0f} KiB each")  # fmt: skip
    assert growth < WATCHERS * bound, growth
    for result in results:
        seen = result["seen"]
        assert result["code"] == "RESOURCE_EXHAUSTED", result["details"]
        point = int(result["details"].split("after_sequence=")[1].split()[0])
        assert point == len(seen)  # the status follows the last event gRPC took
        assert seen + result["resumed"] == list(range(1, total + 1))
        assert result["resumed_code"] == "OK"

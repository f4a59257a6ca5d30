"""`make bench-check`: the hot paths' cost in counted instructions, held to bench/baselines.json.

Wall-clock figures on these machines swing two-fold between runs, so a regression of a few per
cent lands unseen; instructions counted by callgrind (Debian's ``valgrind``) with
``PYTHONHASHSEED=0`` come out the same run after run, whatever else loads the machine.

Each path runs in a process of its own under callgrind, warmed up first; its counters are
zeroed before, and read after, a short run and a long one, and the difference over the
difference in units is one unit's cost: the process's start-up and each run's fixed cost
cancel. What is counted is the process's main thread, where its event loop and all of its
Python run; gRPC's own threads (its poller, its timers) spin for as long as the wall clock lets
them, so their count moves with the machine's load. The sidecar paths count the sidecar (this
process is their client, outside valgrind); the delta path reads a loopback OpenAI-shaped SSE
provider (in this process) that writes each answer in one piece, so that every run parses the
same reads. The ``session_client`` path is the session path the other way round: the Python
client hosting the tool is counted (in a process of its own), its sidecar runs outside valgrind.
An import is ``python -c STATEMENT`` less ``python -c "pass"``, all threads.

    python bench/check.py                  # compare with the baselines; exit 1 on a regression
    python bench/check.py --write          # take the figures as the new baselines
    python bench/check.py --paths session  # some paths only (names as in baselines.json)
    python bench/check.py --keep DIR       # keep callgrind's profile of each counted run
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cleveragents.client import AsyncSidecarClient

HERE = Path(__file__).resolve().parent
SCRIPT = str(HERE / "check.py")
BASELINES = HERE / "baselines.json"
#: The short and the long run of each path, in its units (iterations, deltas).
RUNS = {"in_process": (20, 420), "stream": (20, 220), "session": (20, 220), "delta": (20, 220)}
RUNS["session_client"] = RUNS["session"]
UNITS = {"in_process": "iteration", "stream": "iteration", "session": "iteration"}
UNITS["session_client"] = "iteration"
SIDECAR_PATHS = ("stream", "session", "delta")
#: The imports counted, each a path named for its statement. ``cleveragents.sidecar`` alone
#: loads none of the server (its names come on first use, so that ``--version`` is quick);
#: ``Sidecar`` from it is what a program that serves imports.
IMPORTS = (
    "import cleveragents.tool",
    "import cleveragents.sidecar",
    "from cleveragents.sidecar import Sidecar",
    "import cleveragents.client",
)
ALL_PATHS = ("in_process", *SIDECAR_PATHS, "session_client", *IMPORTS)
#: A path's tolerance when baselines.json gives none: counts repeat to within 0.1%.
DEFAULT_TOLERANCE = 0.02
#: How much slower than the wall's the counted processes' loop clocks run. A run that never
#: waits yields its loop every 2 ms of that clock (a fairness rule); under valgrind, some 50
#: times slower than at full speed, that would be at nearly every iteration or not, as the
#: machine's load decides, and with it how the sidecar batches what it writes. On a clock a
#: million times slower no counted run yields for time, so the counts hold whatever the load.
CLOCK_SLOWDOWN = 1_000_000


@dataclass(frozen=True)
class Counted:
    """One path's figure: instructions per unit."""

    path: str
    unit: str
    instructions: float


def slow_clock(base: type[asyncio.AbstractEventLoop]) -> type[asyncio.AbstractEventLoop]:
    """``base``, an event loop class, with a clock ``CLOCK_SLOWDOWN`` times slower."""

    class SlowClock(base):  # type: ignore[valid-type,misc]
        def time(self) -> float:
            return float(super().time()) / CLOCK_SLOWDOWN

    return SlowClock


class Callgrind:
    """Starts processes under callgrind and reads their counters (through vgdb)."""

    def __init__(self, directory: Path, python: str) -> None:
        self.directory = directory
        self.python = python

    def command(self, *args: str) -> list[str]:
        """``python args`` under callgrind, counting nothing until told (start-up runs at a
        few times the speed)."""
        return [
            "valgrind", "--tool=callgrind", f"--log-file={self.directory}/valgrind.%p.log",
            f"--callgrind-out-file={self.directory}/callgrind.%p.out", "--instr-atstart=no",
            self.python, *args,
        ]  # fmt: skip

    @staticmethod
    def env(**extra: str) -> dict[str, str]:
        """The counted processes' environment: a fixed hash seed, and .pyc files written
        (with ``PYTHONDONTWRITEBYTECODE`` an import compiles every module it loads, each time)."""
        env = dict(os.environ, PYTHONHASHSEED="0", **extra)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        return env

    async def control(self, pid: int, *args: str) -> str:
        process = await asyncio.create_subprocess_exec(
            "callgrind_control", *args, str(pid),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            out, _ = await asyncio.wait_for(process.communicate(), 120)
        except TimeoutError:
            process.kill()
            raise RuntimeError(
                f"callgrind_control {' '.join(args)} got no answer from process {pid}: vgdb "
                "must ptrace it (run as root, or with kernel.yama.ptrace_scope=0)"
            ) from None
        text = out.decode()
        if process.returncode != 0 or ("OK" not in text and "Totals" not in text):
            raise RuntimeError(f"callgrind_control {' '.join(args)} {pid}: {text.strip()}")
        return text

    async def main_thread(self, pid: int) -> int:
        """The instructions the main thread ran since the counters were last zeroed."""
        text = await self.control(pid, "-e", "Ir")
        found = re.search(r"^\s*Th\s+1\s+([\d,]+)\s*$", text, re.MULTILINE)
        if found is None:
            raise RuntimeError(f"no count in callgrind_control's answer: {text.strip()}")
        return int(found[1].replace(",", ""))

    def whole(self, *args: str) -> list[str]:
        """``python args`` counted whole: cachegrind counts the same instructions as callgrind,
        in half the time, but cannot be zeroed or read while the process runs."""
        return [
            "valgrind", "--tool=cachegrind", "--cache-sim=no", "--branch-sim=no",
            f"--log-file={self.directory}/valgrind.%p.log", "--cachegrind-out-file=/dev/null",
            self.python, *args,
        ]  # fmt: skip

    def sse_config(self, port: int) -> str:
        """A sidecar config file whose ``sse`` profile streams from ``port``."""
        path = self.directory / "sidecar.toml"
        path.write_text(
            f'[profiles.sse]\nkind = "openai"\nmodel = "sse-bench"\n'
            f'base_url = "http://127.0.0.1:{port}/v1"\napi_key_env = ""\nmax_retries = 0\n'
        )
        return str(path)

    def collected(self, pid: int) -> int:
        """A finished process's whole count, from valgrind's log."""
        text = (self.directory / f"valgrind.{pid}.log").read_text()
        found = re.search(r"I\s+refs:\s+([\d,]+)", text)
        if found is None:
            raise RuntimeError(f"no count in valgrind's log of {pid}:\n{text[-2000:]}")
        return int(found[1].replace(",", ""))

    async def per_unit(
        self, pid: int, path: str, run: Callable[[int], Awaitable[None]], keep: bool
    ) -> Counted:
        """``path``'s cost per unit in the warmed-up process ``pid``: (long - short) / units."""
        await self.control(pid, "--instr=on")
        short, long = RUNS[path]
        await run(short)  # warm-up: the caches, the interpreter's specialised code
        counts = []
        for units in (short, long):
            await self.control(pid, "--zero")
            await run(units)
            counts.append(await self.main_thread(pid))
            if keep:
                await self.control(pid, f"--dump={path}-{units}")
        return Counted(path, UNITS.get(path, path), (counts[1] - counts[0]) / (long - short))


# -- the in-process loop -------------------------------------------------------------------


def loop_worker() -> None:
    """Under callgrind: ``in_process(N)`` for each N read from stdin, answering ``done``."""
    sys.path.insert(0, str(HERE))
    if TYPE_CHECKING:
        from bench.in_process import in_process
    else:
        from in_process import in_process  # the core alone, nothing else

    loop = slow_clock(asyncio.SelectorEventLoop)()  # the loop asyncio.run makes on Linux
    print("ready", flush=True)
    for line in sys.stdin:
        loop.run_until_complete(in_process(int(line)))
        print("done", flush=True)


async def in_process_path(grind: Callgrind, keep: bool) -> list[Counted]:
    worker = grind.command(SCRIPT, "loop-worker")
    process = await asyncio.create_subprocess_exec(
        *worker, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=grind.env()
    )
    assert process.stdin is not None
    assert process.stdout is not None
    stdin, stdout = process.stdin, process.stdout

    async def run(iterations: int) -> None:
        stdin.write(f"{iterations}\n".encode())
        await stdin.drain()
        if (await stdout.readline()).strip() != b"done":
            raise RuntimeError("the in-process worker ended without finishing its run")

    try:
        if (await stdout.readline()).strip() != b"ready":
            raise RuntimeError("the in-process worker did not start")
        return [await grind.per_unit(process.pid, "in_process", run, keep)]
    finally:
        stdin.close()
        await process.wait()


# -- the sidecar paths ---------------------------------------------------------------------


def sidecar_worker(config_file: str) -> None:
    """Under callgrind: a sidecar embedded as any program may embed one (its settings from
    the environment and ``config_file``), on uvloop where installed as ``serve`` would be,
    with a slow clock; prints the address bound and serves until SIGTERM."""
    from cleveragents.sidecar import Sidecar, configure_logging, load_config

    config = load_config(config_file or None)
    configure_logging(config.log_format, config.log_level)
    try:
        import uvloop

        base: type[asyncio.AbstractEventLoop] = uvloop.Loop
    except ImportError:
        base = asyncio.SelectorEventLoop

    async def serve() -> None:
        sidecar = Sidecar(config)
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        print(await sidecar.start(), flush=True)
        await stop.wait()
        await sidecar.stop(0.0)

    with asyncio.Runner(loop_factory=slow_clock(base)) as runner:
        runner.run(serve())


@contextlib.asynccontextmanager
async def burst_provider() -> AsyncIterator[int]:
    """A loopback OpenAI Chat Completions endpoint answering each request in one write."""
    if TYPE_CHECKING:
        from bench import sse_server
    else:
        import sse_server

    server = await asyncio.start_server(
        lambda reader, writer: sse_server.serve(reader, writer, burst=True), "127.0.0.1", 0
    )
    async with server:
        yield server.sockets[0].getsockname()[1]


class Workloads:
    """The client side of each sidecar path: one run of N units."""

    def __init__(self, client: AsyncSidecarClient) -> None:
        from cleveragents.tool import ToolRegistry

        if TYPE_CHECKING:
            from bench.scenarios_load import noop_script
        else:
            from scenarios_load import noop_script

        self.client = client
        self.script = noop_script
        self.registry = ToolRegistry()

        @self.registry.tool
        async def client_noop() -> dict[str, Any]:
            """Do nothing, in the client."""
            return {}

    async def stream(self, iterations: int) -> None:
        """A StreamToolLoop run of the sidecar's own no-op tool."""
        script = self.script(iterations, "noop")
        events = self.client.stream_tool_loop(
            "go", script=script, max_iterations=iterations, tool_names=["noop"]
        )
        assert len([e async for e in events]) == 4 * iterations

    async def session(self, iterations: int) -> None:
        """A Session whose no-op tool the client hosts (the sidecar plays the script)."""
        events = self.client.session(
            "go", tools=self.registry, script=self.script(iterations),
            max_iterations=iterations, tool_names=[],
        )  # fmt: skip
        assert len([e async for e in events]) == 4 * iterations

    async def delta(self, count: int) -> None:
        """One streamed answer of ``count`` chunks from the burst provider."""
        from cleveragents.tool import LLMDelta

        text = ""
        async for streamed in self.client.stream_tool_loop(
            f"count={count} interval=0", profile="sse", max_iterations=1, stream_deltas=True
        ):
            if isinstance(streamed.event, LLMDelta):
                text += streamed.event.text
        assert text == "tok " * count, text


def sidecar_env(grind: Callgrind) -> dict[str, str]:
    """The environment of a counted path's sidecar: the bench's no-op tools, nothing built in,
    any free port, warnings only."""
    return grind.env(
        PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
        CLEVERAGENTS_SIDECAR_TOOL_MODULES="noop_tools:registry",
        CLEVERAGENTS_SIDECAR_BUILTIN_TOOLS="false",
        CLEVERAGENTS_SIDECAR_LISTEN="127.0.0.1:0",
        CLEVERAGENTS_SIDECAR_LOG_LEVEL="warning",
    )


async def sidecar_path(grind: Callgrind, path: str, keep: bool) -> list[Counted]:
    """``path`` counted in a sidecar of its own (what ran before in a process moves a count)."""
    from cleveragents.client import AsyncSidecarClient

    env = sidecar_env(grind)
    async with contextlib.AsyncExitStack() as stack:
        config = ""
        if path == "delta":
            port = await stack.enter_async_context(burst_provider())
            config = grind.sse_config(port)
        worker = grind.command(SCRIPT, "sidecar-worker", config)
        process = await asyncio.create_subprocess_exec(*worker, stdout=subprocess.PIPE, env=env)
        assert process.stdout is not None

        async def stop() -> None:
            if process.returncode is None:
                process.terminate()
                await process.wait()

        stack.push_async_callback(stop)
        address = (await process.stdout.readline()).decode().strip()
        if not address:
            raise RuntimeError(f"the sidecar did not start (its log: {grind.directory})")
        client = await stack.enter_async_context(AsyncSidecarClient(address))
        run = getattr(Workloads(client), path)
        return [await grind.per_unit(process.pid, path, run, keep)]


# -- the client's side of a session ----------------------------------------------------------


def client_worker(address: str) -> None:
    """Under callgrind: ``Workloads.session(N)`` against the sidecar at ``address`` for each N
    read from stdin, answering ``done``, on the loop ``asyncio.run`` makes, with a slow clock."""
    from cleveragents.client import AsyncSidecarClient

    async def serve() -> None:
        async with AsyncSidecarClient(address) as client:
            workloads = Workloads(client)
            print("ready", flush=True)
            reader = asyncio.StreamReader()
            loop = asyncio.get_running_loop()
            await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
            while line := await reader.readline():
                await workloads.session(int(line))
                print("done", flush=True)

    with asyncio.Runner(loop_factory=slow_clock(asyncio.SelectorEventLoop)) as runner:
        runner.run(serve())


async def session_client_path(grind: Callgrind, keep: bool) -> list[Counted]:
    """The session path's client counted, its sidecar native (outside valgrind)."""
    env = sidecar_env(grind)
    async with contextlib.AsyncExitStack() as stack:

        async def started(
            command: list[str], stdin: int | None = None
        ) -> asyncio.subprocess.Process:
            process = await asyncio.create_subprocess_exec(
                *command, stdin=stdin, stdout=subprocess.PIPE, env=env
            )

            async def stop() -> None:
                if process.returncode is None:
                    process.terminate()
                    await process.wait()

            stack.push_async_callback(stop)
            return process

        sidecar = await started([grind.python, SCRIPT, "sidecar-worker", ""])
        assert sidecar.stdout is not None
        address = (await sidecar.stdout.readline()).decode().strip()
        if not address:
            raise RuntimeError("the native sidecar did not start")
        client = await started(
            grind.command(SCRIPT, "client-worker", address), stdin=subprocess.PIPE
        )
        assert client.stdin is not None
        assert client.stdout is not None
        stdin, stdout = client.stdin, client.stdout

        async def run(iterations: int) -> None:
            stdin.write(f"{iterations}\n".encode())
            await stdin.drain()
            if (await stdout.readline()).strip() != b"done":
                raise RuntimeError(f"the client worker ended early (its log: {grind.directory})")

        if (await stdout.readline()).strip() != b"ready":
            raise RuntimeError(f"the client worker did not start (its log: {grind.directory})")
        try:
            return [await grind.per_unit(client.pid, "session_client", run, keep)]
        finally:
            stdin.close()
            await client.wait()


# -- imports -------------------------------------------------------------------------------


async def import_paths(grind: Callgrind, statements: list[str]) -> list[Counted]:
    """Each import's count: ``python -c STATEMENT`` less ``python -c "pass"``."""
    # Compiled once outside valgrind first, so that no count includes writing .pyc files.
    compiling = [grind.python, "-c", "; ".join(statements)]
    await asyncio.to_thread(subprocess.run, compiling, check=True, env=grind.env())

    async def total(code: str) -> int:
        process = await asyncio.create_subprocess_exec(*grind.whole("-c", code), env=grind.env())
        if await process.wait() != 0:
            raise RuntimeError(f"python -c {code!r} failed under valgrind")
        return grind.collected(process.pid)

    counts = await asyncio.gather(total("pass"), *(total(code) for code in statements))
    return [
        Counted(code, "import", count - counts[0])
        for code, count in zip(statements, counts[1:], strict=True)
    ]


# -- the gate ------------------------------------------------------------------------------


def measure(paths: list[str], python: str, keep: Path | None) -> list[Counted]:
    """Every path of ``paths`` counted, in processes run side by side."""
    sys.path.insert(0, str(HERE))
    with tempfile.TemporaryDirectory(prefix="bench-check-") as directory:
        grind = Callgrind(Path(directory), python)
        jobs: list[Awaitable[list[Counted]]] = []
        if "in_process" in paths:
            jobs.append(in_process_path(grind, keep is not None))
        jobs += [sidecar_path(grind, p, keep is not None) for p in SIDECAR_PATHS if p in paths]
        if "session_client" in paths:
            jobs.append(session_client_path(grind, keep is not None))
        if statements := [p for p in paths if p in IMPORTS]:
            jobs.append(import_paths(grind, statements))

        async def gathered() -> list[list[Counted]]:
            return list(await asyncio.gather(*jobs))

        figures = [figure for group in asyncio.run(gathered()) for figure in group]
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            for out in Path(directory).glob("callgrind.*.out.*"):
                shutil.copy(out, keep / out.name)
    return sorted(figures, key=lambda f: ALL_PATHS.index(f.path))


def compare(figures: list[Counted], baselines: dict[str, Any]) -> list[str]:
    """Print each figure beside its baseline; the paths over their tolerance."""
    print(f"{'path':40} {'per':>9} {'counted':>13} {'baseline':>13} {'change':>8} {'allowed':>8}")
    over_paths = []
    for figure in figures:
        base = baselines.get(figure.path)
        if base is None:
            print(f"{figure.path:40} {figure.unit:>9} {figure.instructions:13,.0f}  (no baseline)")
            continue
        tolerance = base.get("tolerance", DEFAULT_TOLERANCE)
        change = figure.instructions / base["instructions"] - 1
        over = change > tolerance
        if over:
            over_paths.append(figure.path)
        note = "  OVER" if over else "  lower: --write takes it" if change < -tolerance else ""
        print(
            f"{figure.path:40} {figure.unit:>9} {figure.instructions:13,.0f} "
            f"{base['instructions']:13,.0f} {change:+8.1%} {tolerance:+8.0%}{note}"
        )
    return over_paths


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("worker", nargs="*", help=argparse.SUPPRESS)
    parser.add_argument("--write", action="store_true", help="take the figures as baselines")
    parser.add_argument("--paths", default=",".join(ALL_PATHS), help="comma-separated paths")
    parser.add_argument("--python", default=sys.executable, help="the Python to count")
    parser.add_argument("--keep", type=Path, help="copy callgrind's profiles here")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if args.worker == ["loop-worker"]:
        loop_worker()
        return 0
    if args.worker[:1] == ["sidecar-worker"]:
        sidecar_worker(args.worker[1] if len(args.worker) > 1 else "")
        return 0
    if args.worker[:1] == ["client-worker"]:
        client_worker(args.worker[1])
        return 0
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("make bench-check needs valgrind (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    if unknown := set(paths) - set(ALL_PATHS):
        parser.error(f"unknown paths {sorted(unknown)}; known: {', '.join(ALL_PATHS)}")
    figures = measure(paths, args.python, args.keep)
    if args.json:
        args.json.write_text(json.dumps({f.path: f.instructions for f in figures}, indent=2))
    data = json.loads(BASELINES.read_text()) if BASELINES.exists() else {"paths": {}}
    if args.write:
        for figure in figures:
            entry = data["paths"].setdefault(figure.path, {"tolerance": DEFAULT_TOLERANCE})
            entry.update(unit=figure.unit, instructions=round(figure.instructions))
        known = sorted(data["paths"], key=lambda p: ALL_PATHS.index(p) if p in ALL_PATHS else 99)
        data["paths"] = {path: data["paths"][path] for path in known}  # in the table's order
        BASELINES.write_text(json.dumps(data, indent=2) + "\n")
    over = compare(figures, data["paths"])
    if args.write:
        print(f"baselines written to {BASELINES}")
        return 0
    if over:
        print(
            f"\nmake bench-check failed: {', '.join(over)} counted more instructions than "
            f"{BASELINES.name} allows. Find what the change added (--paths and --keep DIR keep "
            "callgrind's profiles), or, if the cost is wanted, say so in the commit and take "
            "new baselines with --write.",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`make bench`'s run-console figures: what the console costs a sidecar per iteration of its runs
when nobody looks, and when 20 pages follow 20 live runs (and when a runs list is open).

Each round starts a fresh ``serve`` process per scenario, in an order that turns each round:

- *off*: the console off (``console_listen`` unset);
- *idle*: the console on, no page open;
- *pages*: 20 run pages, one following each run (a process of their own reads the feeds as the
  page does: ``console_pages.py``);
- *list*: one runs list open, no run page.

In each, 20 detached runs are held at a gate (a call that asks approval), the pages open, then
every gate is approved and the runs go through ``ITERATIONS`` iterations each (one ``echo``
call a turn, the scripted profile streaming its deltas). The sidecar's CPU time (user + system,
from ``/proc``) over that phase, divided by the iterations, is the per-iteration cost; its RSS
is sampled through the phase (the peak, less the RSS before it). Medians over the rounds, and
the median of each round's ratio to *off* (paired: the same round, side by side).

Prints a table and writes JSON to bench/results/. ``BENCH_CONSOLE_ROUNDS`` sets the rounds (5).

With ``BENCH_CONSOLE_CALLGRIND=1`` (and Debian's ``valgrind``), it also counts the instructions
a sidecar spends per iteration with the console off and on (nobody looking): a sidecar under
callgrind serves ``K`` runs of ``N1`` iterations, another ``K`` runs of ``N2``; the difference
over ``K * (N2 - N1)`` iterations leaves start-up and per-run costs out. Wall-clock figures
swing on these loaded 2-core machines; instruction counts do not.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cleveragents.client import AsyncSidecarClient
from cleveragents.tool import ApprovalRequested

HERE = Path(__file__).resolve().parent
ROUNDS = int(os.environ.get("BENCH_CONSOLE_ROUNDS", "5"))
RUNS = 20
ITERATIONS = 400
SCENARIOS = ("off", "idle", "pages", "list")
TICK_S = os.sysconf("SC_CLK_TCK")
PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024


@dataclass
class Sample:
    """One scenario of one round."""

    cpu_us_per_iteration: float
    rss_before_kib: int
    rss_peak_kib: int
    wall_s: float
    page_messages: int = 0


@dataclass
class Figures:
    samples: dict[str, list[Sample]] = field(default_factory=lambda: {s: [] for s in SCENARIOS})


class Serve:
    """A ``serve`` process with the bench's tools and settings (and the console, ``on``)."""

    def __init__(self, *, console: bool) -> None:
        env = dict(
            os.environ,
            CLEVERAGENTS_SIDECAR_FILE_TOOLS="false",
            CLEVERAGENTS_SIDECAR_PYTHON_PATH=str(HERE),
            CLEVERAGENTS_SIDECAR_TOOL_MODULES="console_tools:tools",
            CLEVERAGENTS_SIDECAR_APPROVAL_TIMEOUT_UNATTENDED_S="600",
            CLEVERAGENTS_SIDECAR_APPROVAL_TIMEOUT_S="600",
        )
        if console:
            env["CLEVERAGENTS_SIDECAR_CONSOLE_LISTEN"] = "127.0.0.1:0"
        command = [
            sys.executable, "-m", "cleveragents.sidecar.cli", "serve", "--listen", "127.0.0.1:0",
            "--log-level", "error",
        ]  # fmt: skip
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
        assert self.process.stdout is not None
        self.address = self.process.stdout.readline().strip().rsplit(" ", 1)[1]
        self.url = self.process.stdout.readline().strip().split(" ", 2)[2] if console else ""

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK_S

    def rss_kib(self) -> int:
        return int(Path(f"/proc/{self.process.pid}/statm").read_text().split()[1]) * PAGE_KIB

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)


def script() -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "gate", "name": "gate", "arguments": {}}]}
    ]
    for n in range(ITERATIONS):
        turns.append({
            "content": f"step {n}: echoing",
            "usage": {"input_tokens": 100 + n, "output_tokens": 12},
            "tool_calls": [{"id": f"e{n}", "name": "echo", "arguments": {"text": f"payload {n}"}}],
        })  # fmt: skip
    turns.append({"content": "done"})
    return turns


class Peak:
    """The highest RSS a thread samples while the block runs."""

    def __init__(self, read: Callable[[], int]) -> None:
        self.read = read
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.read())
            self._stop.wait(0.02)

    def __enter__(self) -> Peak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.read())


async def scenario(name: str) -> Sample:
    serve = Serve(console=name != "off")
    pages: asyncio.subprocess.Process | None = None
    try:
        async with AsyncSidecarClient(serve.address) as client:
            run_ids = [f"run-{n}" for n in range(RUNS)]
            turns = script()

            async def held(run_id: str) -> None:
                calls = client.stream_tool_loop(
                    "bench", script=turns, run_id=run_id, detach=True,
                    max_iterations=ITERATIONS + 2,
                )  # fmt: skip
                async for streamed in calls:
                    if isinstance(streamed.event, ApprovalRequested):
                        return

            await asyncio.gather(*(held(r) for r in run_ids))
            if name in ("pages", "list"):
                readers = run_ids if name == "pages" else []
                flags = ["--list"] if name == "list" else []
                pages = await asyncio.create_subprocess_exec(
                    sys.executable, str(HERE / "console_pages.py"), serve.url, *flags, *readers,
                    stdout=subprocess.PIPE,
                )  # fmt: skip
                assert pages.stdout is not None
                assert (await pages.stdout.readline()).strip() == b"open"
            before_rss, before_cpu, started = serve.rss_kib(), serve.cpu_s(), time.perf_counter()
            with Peak(serve.rss_kib) as peak:
                await asyncio.gather(
                    *(client.decide_approval(r, "gate", approved=True) for r in run_ids)
                )
                while True:
                    listed = await client.list_runs(limit=RUNS)
                    if len(listed) == RUNS and all(s.state != "running" for s in listed):
                        assert {s.iterations for s in listed} == {ITERATIONS + 2}, listed
                        break
                    await asyncio.sleep(0.05)
                cpu = serve.cpu_s() - before_cpu
                wall = time.perf_counter() - started
            messages = 0
            if pages is not None and name == "pages":
                assert pages.stdout is not None
                messages = json.loads(await pages.stdout.readline())["messages"]
        iterations = RUNS * ITERATIONS
        return Sample(cpu * 1e6 / iterations, before_rss, peak.peak, wall, messages)
    finally:
        if pages is not None:
            if pages.returncode is None:
                pages.terminate()
            await pages.wait()
        serve.stop()


def instructions(console: bool, iterations: int, runs: int) -> int:
    """The instructions a sidecar under callgrind spends serving ``runs`` runs of
    ``iterations`` iterations (start-up and shutdown included)."""
    out = HERE / "results" / f"console.callgrind.{int(console)}.{iterations}.out"
    out.parent.mkdir(exist_ok=True)
    env = dict(os.environ, PYTHONHASHSEED="0", CLEVERAGENTS_SIDECAR_FILE_TOOLS="false")
    if console:
        env["CLEVERAGENTS_SIDECAR_CONSOLE_LISTEN"] = "127.0.0.1:0"
    command = [
        "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, "-m",
        "cleveragents.sidecar.cli", "serve", "--listen", "127.0.0.1:0", "--log-level", "error",
        "--event-loop", "asyncio",
    ]  # fmt: skip
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
    )
    assert process.stdout is not None
    address = process.stdout.readline().strip().rsplit(" ", 1)[1]
    turns = [
        {"tool_calls": [{"id": f"e{n}", "name": "echo", "arguments": {"text": f"p {n}"}}]}
        for n in range(iterations)
    ] + [{"content": "done"}]

    async def drive() -> None:
        async with AsyncSidecarClient(address) as client:
            for _ in range(runs):
                await client.run_tool_loop(
                    "bench", script=turns, max_iterations=iterations + 1, timeout=600
                )

    asyncio.run(drive())
    process.terminate()
    process.wait(600)
    for line in out.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {out}")


def callgrind(n1: int = 40, n2: int = 240, runs: int = 3) -> dict[str, float]:
    """Instructions per iteration, the console off and on (nobody looking)."""
    counts = {}
    for name, console in (("off", False), ("idle", True)):
        low, high = instructions(console, n1, runs), instructions(console, n2, runs)
        counts[name] = (high - low) / (runs * (n2 - n1))
        print(f"callgrind {name:5} {counts[name]:12.0f} instructions/iteration", flush=True)
    print(f"callgrind idle/off {counts['idle'] / counts['off']:.4f}")
    return counts


def main() -> None:
    figures = Figures()
    for round_ in range(ROUNDS):
        order = SCENARIOS[round_ % len(SCENARIOS) :] + SCENARIOS[: round_ % len(SCENARIOS)]
        for name in order:
            figures.samples[name].append(asyncio.run(scenario(name)))
    rows = []
    off = figures.samples["off"]
    for name in SCENARIOS:
        samples = figures.samples[name]
        ratios = [
            s.cpu_us_per_iteration / o.cpu_us_per_iteration
            for s, o in zip(samples, off, strict=True)
        ]
        growth = [s.rss_peak_kib - s.rss_before_kib for s in samples]
        rows.append({
            "scenario": name,
            "cpu_us_per_iteration": statistics.median(s.cpu_us_per_iteration for s in samples),
            "samples_us": [round(s.cpu_us_per_iteration, 1) for s in samples],
            "paired_ratio_to_off": statistics.median(ratios),
            "ratios": [round(r, 3) for r in ratios],
            "rss_before_mib": statistics.median(s.rss_before_kib for s in samples) / 1024,
            "rss_peak_mib": statistics.median(s.rss_peak_kib for s in samples) / 1024,
            "rss_growth_mib": statistics.median(growth) / 1024,
            "wall_s": statistics.median(s.wall_s for s in samples),
            "page_messages": statistics.median(s.page_messages for s in samples),
        })  # fmt: skip
    print(f"run console: {RUNS} runs x {ITERATIONS} iterations, {ROUNDS} rounds")
    print(f"{'scenario':8} {'CPU us/iter':>12} {'x off':>7} {'RSS before':>11} {'peak':>8} "
          f"{'growth':>8} {'wall s':>7}")  # fmt: skip
    for row in rows:
        print(
            f"{row['scenario']:8} {row['cpu_us_per_iteration']:12.1f} "
            f"{row['paired_ratio_to_off']:7.3f} {row['rss_before_mib']:9.1f}Mi "
            f"{row['rss_peak_mib']:6.1f}Mi {row['rss_growth_mib']:6.1f}Mi {row['wall_s']:7.2f}"
        )
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    counted = {}
    if os.environ.get("BENCH_CONSOLE_CALLGRIND") == "1":
        counted = callgrind()
    (results / "console.json").write_text(
        json.dumps({"rounds": ROUNDS, "rows": rows, "instructions": counted}, indent=2)
    )


if __name__ == "__main__":
    main()

"""Fixed-width tables of records, runs and results, and the ``runs`` command.

Every string a run carries is escaped (``text.py``); errors and reasons are cut to fit only
when ``cut`` (on a terminal): written to a file or a pipe they are whole.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

from cleveragents.sidecar.cli.text import inline, one_line, problem

if TYPE_CHECKING:  # the client is imported only by the commands that talk to a sidecar
    from cleveragents.client import RunInfo, RunSummary, SidecarClient
    from cleveragents.tool import ToolCallRecord, ToolCallRunResult

__all__ = [
    "failed_calls",
    "list_runs",
    "records_table",
    "result_summary",
    "runs_table",
    "show_runs",
    "summaries_table",
]


def _width(cut: bool, width: int) -> int | None:
    return width if cut else None


def records_table(records: Sequence[ToolCallRecord], *, cut: bool = True) -> str:
    """The records as a fixed-width table, in order (errors cut to fit when ``cut``)."""
    if not records:
        return "no tool calls"
    rows = [("#", "iter", "tool", "call id", "duration", "status", "error")]
    for index, r in enumerate(records, 1):
        status = "ok" if r.success else f"FAILED {r.error_kind or 'exception'}"
        rows.append(
            (
                str(index),
                str(r.iteration),
                inline(r.tool_name),
                inline(r.call_id),
                f"{r.duration_ms:.2f} ms",
                status,
                one_line(r.error or "", _width(cut, 60)),
            )
        )
    return _table(rows, right={0, 1, 4})


def _table(rows: Sequence[Sequence[str]], right: set[int]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def result_summary(
    state: str, result: ToolCallRunResult, detail: str = "", *, cut: bool = True
) -> str:
    """How a run ended, in two or three lines (its reason and answer cut when ``cut``)."""
    failed = sum(1 for r in result.tool_call_history if not r.success)
    lines = [
        f"{state}: stop_reason={result.stop_reason}, iterations={result.iterations}, "
        f"tool calls={len(result.tool_call_history)} ({failed} failed), "
        f"tokens in/out={result.usage.input_tokens}/{result.usage.output_tokens}"
    ]
    if detail:
        lines.append(f"reason: {one_line(detail, _width(cut, 200))}")
    if result.content:
        lines.append(f"answer: {one_line(result.content, _width(cut, 200))}")
    return "\n".join(lines)


def list_runs(client: SidecarClient, limit: int) -> list[RunSummary]:
    """The sidecar's most recent runs, newest first: live ones and the finished ones it keeps
    (the ``ListRuns`` RPC)."""
    return client.list_runs(limit=limit)


def show_runs(client: SidecarClient, run_ids: Sequence[str], limit: int, out: TextIO) -> int:
    """Print a table of runs: those named (``GetRun``), else the ``limit`` most recent
    (``ListRuns``); returns the exit status."""
    from cleveragents.client import SidecarRpcError

    cut = out.isatty()
    try:
        if not run_ids:
            summaries = list_runs(client, limit)
            out.write((summaries_table(summaries) if summaries else "no runs") + "\n")
            return 0
        infos: list[RunInfo] = []
        missing = 0
        for run_id in run_ids:
            try:
                infos.append(client.get_run(run_id))
            except SidecarRpcError as exc:
                if exc.code.name != "NOT_FOUND":
                    raise
                print(
                    f"cleveragents-sidecar: no run {inline(repr(run_id))} (unknown, or expired)",
                    file=sys.stderr,
                )
                missing += 1
    except SidecarRpcError as exc:
        print(f"cleveragents-sidecar: {problem(exc)}", file=sys.stderr)
        return 2
    if infos:
        out.write(runs_table(infos) + "\n")
        failures = failed_calls(infos, cut=cut)
        if failures:
            out.write("\n" + failures + "\n")
    return 1 if missing else 0


def failed_calls(infos: Sequence[RunInfo], *, cut: bool = True) -> str:
    """The failed tool calls of the finished runs among ``infos``: which tool, its error kind
    and message, cut to fit when ``cut`` (``runs RUN_ID`` shows them beneath the table);
    empty when none failed."""
    rows = [("run id", "#", "iter", "tool", "call id", "kind", "error")]
    for info in infos:
        history = info.result.tool_call_history if info.result is not None else ()
        for index, r in enumerate(history, 1):
            if not r.success:
                kind = str(r.error_kind) if r.error_kind is not None else "exception"
                rows.append(
                    (inline(info.run_id), str(index), str(r.iteration), inline(r.tool_name),
                     inline(r.call_id), kind, one_line(r.error or "", _width(cut, 100)))
                )  # fmt: skip
    if len(rows) == 1:
        return ""
    return f"failed tool calls ({len(rows) - 1}):\n" + _table(rows, right={1, 2})


def summaries_table(summaries: Sequence[RunSummary], now: float | None = None) -> str:
    """``ListRuns`` summaries as a fixed-width table: when each started (local time), how long
    it ran (or has been running) and the start of its prompt."""
    now = time.time() if now is None else now
    rows = [("run id", "state", "stop reason", "iterations", "tool calls", "started", "took",
             "prompt")]  # fmt: skip
    for run in summaries:
        started = time.localtime(run.started_at)
        same_day = time.localtime(now)[:3] == started[:3]
        took = (run.finished_at if run.finished_at is not None else now) - run.started_at
        rows.append(
            (
                inline(run.run_id),
                run.state,
                str(run.stop_reason) if run.stop_reason is not None else "",
                str(run.iterations),
                str(run.tool_calls),
                time.strftime("%H:%M:%S" if same_day else "%Y-%m-%d %H:%M", started),
                f"{max(0.0, took):.1f} s",
                one_line(run.prompt, 40),
            )
        )
    return _table(rows, right={3, 4, 6})


def runs_table(infos: Sequence[RunInfo]) -> str:
    """Runs as a fixed-width table."""
    rows = [("run id", "state", "stop reason", "iterations", "tool calls", "failed", "events")]
    for info in infos:
        result = info.result
        history = result.tool_call_history if result is not None else ()
        rows.append(
            (
                inline(info.run_id),
                info.state,
                str(result.stop_reason) if result is not None else "",
                str(result.iterations) if result is not None else "",
                str(len(history)) if result is not None else "",
                str(sum(1 for r in history if not r.success)) if result is not None else "",
                str(info.last_sequence),
            )
        )
    return _table(rows, right={3, 4, 5, 6})

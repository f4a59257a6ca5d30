"""``cleveragents-sidecar watch RUN_ID``: follow one run live in the terminal.

A line per tool call as its record arrives and per approval asked (with how to answer it) or
decided, the model's text as it streams (its deltas), a progress line kept up to date in
place (on a terminal), then a table of the records and the result. Every string of the run
is shown with its control characters as escapes (``text.py``), and cut to fit only on a
terminal.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TextIO, assert_never

from cleveragents.sidecar.cli.tables import records_table, result_summary
from cleveragents.sidecar.cli.text import inline, one_line, problem, visible
from cleveragents.tool import (
    ApprovalDecided,
    ApprovalRequested,
    IterationStarted,
    LLMDelta,
    LLMResponded,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunResumed,
    RunStarted,
    ToolCallCompleted,
    ToolCallProgress,
    ToolCallStarted,
)

if TYPE_CHECKING:  # the client is imported only by the commands that talk to a sidecar
    from cleveragents.client import SidecarClient, StreamedEvent
    from cleveragents.tool import ToolCallRecord, ToolCallRunResult

__all__ = ["WatchView", "show_stream", "watch"]


def watch(client: SidecarClient, run_id: str, after: int, out: TextIO) -> int:
    """Follow ``run_id`` with ``client``, drawing it on ``out``; returns the exit status."""
    events = client.watch(run_id, after_sequence=after, stream_deltas=True)
    return show_stream(events, out, f"watch run {inline(repr(run_id))}")


def show_stream(
    events: Iterable[StreamedEvent],
    out: TextIO,
    doing: str,
    interrupted: Callable[[WatchView], None] | None = None,
) -> int:
    """Draw a run's ``events`` on ``out`` as they come (``watch`` and ``run`` share it); the
    exit status: 0 the run completed, 1 it failed or was cancelled, 2 the stream failed (the
    message says ``cannot <doing>``), 130 interrupted (``interrupted`` says what became of
    the run)."""
    from cleveragents.client import SidecarRpcError

    view = WatchView(out, live=out.isatty())
    stop = threading.Event()
    if view.live:  # keep the clocks of the progress line moving between events
        threading.Thread(target=_tick, args=(view, stop), daemon=True).start()
    try:
        for streamed in events:
            view.show(streamed)
    except SidecarRpcError as exc:
        view.clear_progress()
        print(f"cleveragents-sidecar: cannot {doing}: {problem(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        view.clear_progress()
        if interrupted is not None:
            interrupted(view)
        return 130
    finally:
        stop.set()
        close = getattr(events, "close", None)
        if close is not None:
            close()  # ends the call at once (a run started without detach is cancelled)
    return view.finish()


def _tick(view: WatchView, stop: threading.Event) -> None:
    while not stop.wait(_TICK_S):
        view.redraw()


_TICK_S = 0.5
#: Calls in flight named on the progress line, at most.
_RUNNING_SHOWN = 3


class WatchView:
    """Draws a run's events as they arrive: a line per ended tool call, and (when ``live``,
    on a terminal) a progress line rewritten in place with ``\\r`` and ANSI erase-line; at the
    end a table of the records and the result. Thread-safe: a ticker may ``redraw``."""

    def __init__(self, out: TextIO, *, live: bool) -> None:
        self.out = out
        self.live = live
        self.run_id = ""
        self.max_iterations = 0
        self.iteration = 0
        #: Calls in flight: (call_id, iteration) -> (tool name, when it started, monotonic).
        self.running: dict[tuple[str, int], tuple[str, float]] = {}
        self.records: list[ToolCallRecord] = []
        self.failed = 0
        self.outcome = ""
        self.detail = ""
        self.result: ToolCallRunResult | None = None
        self._started = time.monotonic()
        self._progress_shown = False
        #: The model's streamed text is being written on the current line.
        self._text_open = False
        self._lock = threading.Lock()

    def show(self, streamed: StreamedEvent) -> None:
        """Take one event into account and redraw."""
        event = streamed.event
        # When the event happened, on this process's monotonic clock (by the sidecar's wall
        # clock, which is close enough): replayed events happened a while ago.
        at = time.monotonic() - max(0.0, time.time() - streamed.time)
        with self._lock:
            self.run_id = inline(streamed.run_id)
            match event:
                case RunStarted():
                    self.max_iterations = event.max_iterations
                    self._started = at
                    tools = ", ".join(map(inline, event.tool_names)) or "none"
                    self._line(
                        f"run {inline(event.run_id)}: up to {event.max_iterations} iterations, "
                        f"tools: {tools}"
                    )
                case IterationStarted():
                    self.iteration = event.iteration
                case ToolCallStarted():
                    self.iteration = max(self.iteration, event.iteration)
                    key = (event.call_id, event.iteration)
                    self.running[key] = (inline(event.tool_name), at)
                case ToolCallCompleted():
                    record = event.record
                    self.running.pop((record.call_id, record.iteration), None)
                    self.records.append(record)
                    self.failed += not record.success
                    self._line(_record_line(record, cut=self.live))
                case RunCompleted():
                    self._ended(event.result, "completed", "")
                case RunFailed():
                    self._ended(event.result, "failed", event.message)
                case RunCancelled():
                    self._ended(event.result, "cancelled", event.reason)
                case ApprovalRequested():
                    how = inline(event.how_to_answer)
                    self._line(
                        f"  approval? {inline(event.tool_name)} (call {inline(event.call_id)}): "
                        f"{inline(event.reason)}" + (f"\n            {how}" if how else "")
                    )
                case ApprovalDecided():
                    verdict = "approved" if event.approved else "DENIED"
                    why = f": {inline(event.reason)}" if event.reason else ""
                    who = f" ({inline(event.identity)})" if event.identity else ""
                    self._line(
                        f"  {verdict} (call {inline(event.call_id)}) by {inline(event.by)}"
                        f"{who}{why}"
                    )
                case RunResumed():
                    self.running.clear()  # each call in flight runs again or is closed
                    interrupted = ", ".join(map(inline, event.interrupted_call_ids))
                    self._line(
                        f"  resumed after event {event.after_sequence} ({inline(event.reason)})"
                        + (f"; interrupted: {interrupted}" if interrupted else "")
                    )
                case ToolCallProgress():
                    pass  # the progress line shows iterations and calls
                case LLMDelta():
                    self._text(event.text)
                case LLMResponded():
                    self._end_text()  # the progress line shows iterations and calls
                case _:  # pragma: no cover - mypy checks that every event type is handled
                    assert_never(event)
            self._progress()

    def _ended(self, result: ToolCallRunResult, outcome: str, detail: str) -> None:
        self.result = result
        self.running.clear()
        self.outcome, self.detail = outcome, detail

    def redraw(self) -> None:
        """Redraw the progress line (its clocks move on)."""
        with self._lock:
            if self._progress_shown:
                self._progress()

    def finish(self) -> int:
        """Print the table and the result; the exit status (0: the run completed)."""
        with self._lock:
            self._end_text()
            self._clear()
            records = list(self.result.tool_call_history) if self.result else self.records
            self.out.write("\n" + records_table(records, cut=self.live) + "\n")
            if self.result is None:
                self.out.write(f"\nrun {self.run_id}: the stream ended before the run did\n")
                self.out.flush()
                return 1
            summary = result_summary(self.outcome, self.result, self.detail, cut=self.live)
            self.out.write("\n" + summary + "\n")
            self.out.flush()
            return 0 if self.outcome == "completed" else 1

    def clear_progress(self) -> None:
        """Erase the progress line, if one is shown."""
        with self._lock:
            self._clear()

    def progress_text(self) -> str:
        """What the progress line says now."""
        now = time.monotonic()
        limit = f"/{self.max_iterations}" if self.max_iterations else ""
        text = (
            f"iteration {self.iteration}{limit} | {len(self.records)} tool calls, "
            f"{self.failed} failed | {now - self._started:.1f} s"
        )
        if self.running:
            calls = sorted(self.running.values(), key=lambda item: item[1])
            shown = ", ".join(
                f"{name} {now - since:.1f} s" for name, since in calls[:_RUNNING_SHOWN]
            )
            more = len(calls) - _RUNNING_SHOWN
            text += f" | running: {shown}" + (f" (+{more})" if more > 0 else "")
        return text

    def _clear(self) -> None:
        if self._progress_shown:
            self.out.write("\r\x1b[2K")
            self.out.flush()
            self._progress_shown = False

    def _line(self, text: str) -> None:
        self._end_text()
        self._clear()
        self.out.write(text + "\n")
        self.out.flush()

    def _text(self, text: str) -> None:
        """Write a piece of the model's text where the last one ended."""
        if not text:
            return
        if not self._text_open:
            self._clear()
            self.out.write("  model: ")
            self._text_open = True
        self.out.write(visible(text).replace("\n", "\n         "))
        self.out.flush()

    def _end_text(self) -> None:
        if self._text_open:
            self.out.write("\n")
            self.out.flush()
            self._text_open = False

    def _progress(self) -> None:
        if not self.live or self.result is not None or self._text_open:
            return
        self.out.write("\r\x1b[2K" + self.progress_text())
        self.out.flush()
        self._progress_shown = True


def _record_line(record: ToolCallRecord, *, cut: bool) -> str:
    status = "ok" if record.success else f"FAILED {record.error_kind or 'exception'}"
    iteration = f"[{record.iteration}]"
    name = inline(record.tool_name)
    line = f"  {iteration:<5} {name:<20} {record.duration_ms:>10.2f} ms  {status}"
    if record.error:
        line += f"  {one_line(record.error, 100 if cut else None)}"
    return line

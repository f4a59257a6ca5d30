"""``ToolBatch``: the tool calls of one LLM response, run and recorded as a unit.

The calls run concurrently in an ``asyncio.TaskGroup`` (one after another when the runtime or
the budget says so). Whatever interrupts them, each call ends with exactly one record:
``close`` gives the calls an interruption left open a ``cancelled`` record. The records come
back in the order the model asked for them, whatever order the calls finished in.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any

from cleveragents.tool.context import ToolActorContext
from cleveragents.tool.events import (
    Checkpoint,
    EventSink,
    ToolCallCompleted,
    ToolCallProgress,
    ToolCallStarted,
)
from cleveragents.tool.execution.runner import Gate, ToolRunner
from cleveragents.tool.jsontext import Encoder
from cleveragents.tool.messages import Message, Role, ToolCall
from cleveragents.tool.records import ErrorKind, ToolCallRecord
from cleveragents.tool.spec import ToolSpec

__all__ = ["ToolBatch", "feedback"]

#: Stands in for a concurrency cap when a response's calls have none.
_UNLIMITED = contextlib.nullcontext()
_encode = Encoder()


class ToolBatch:
    """The calls of one response: those from index ``allowed`` on are over the run's budget
    and are closed as denied without running, ``over_budget`` (which budget) their error.
    With a ``checkpoint``, each call that may run awaits it before it runs (after ``gate``)."""

    __slots__ = (
        "_checkpoint",
        "_context",
        "_emit",
        "_gate",
        "_runner",
        "allowed",
        "approved",
        "calls",
        "executed",
        "iteration",
        "logged_starts",
        "over_budget",
        "records",
        "run_id",
        "started",
    )

    def __init__(
        self,
        calls: Sequence[ToolCall],
        iteration: int,
        *,
        runner: ToolRunner,
        context: ToolActorContext,
        emit: EventSink,
        gate: Gate | None,
        allowed: int,
        over_budget: str = "",
        run_id: str = "",
        checkpoint: Checkpoint | None = None,
    ) -> None:
        self.calls = calls
        self.run_id = run_id
        self.iteration = iteration
        self.allowed = allowed
        self.over_budget = over_budget
        #: Calls that ran (or were refused by the gate) within the budget.
        self.executed = 0
        self.records: list[ToolCallRecord | None] = [None] * len(calls)
        #: Each started call's inputs and start time.
        self.started: list[tuple[Mapping[str, Any], float] | None] = [None] * len(calls)
        #: Calls whose ``ToolCallStarted`` an earlier life of the run logged (a resumed run's):
        #: not logged again when they run again; ``approved`` ones are not asked again.
        self.logged_starts: frozenset[str] = frozenset()
        self.approved: frozenset[str] = frozenset()
        self._runner = runner
        self._context = context
        self._emit = emit
        self._gate = gate
        self._checkpoint = checkpoint

    def resume(
        self,
        records: Mapping[str, ToolCallRecord],
        *,
        logged_starts: frozenset[str],
        approved: frozenset[str],
        interrupted: Sequence[str],
        reason: str,
    ) -> None:
        """Take what a resumed run's log holds of this batch: the calls that ended keep their
        ``records``; each ``interrupted`` call ends now, failed with ``reason``; ``run`` then
        runs the rest."""
        self.logged_starts, self.approved = logged_starts, approved
        for index, call in enumerate(self.calls):
            record = records.get(call.id)
            if record is None and call.id in interrupted:
                inputs = ToolRunner.thread_context(call.arguments, self._context)
                record = dataclasses.replace(
                    ToolRunner.cancelled_record(call, inputs, self.iteration, time.time(), ""),
                    error=reason, error_kind=ErrorKind.EXCEPTION, duration_ms=0.0,
                )  # fmt: skip
                self._emit(ToolCallCompleted(record))
            if record is not None:
                self.records[index] = record
                self.executed += index < self.allowed

    def run(self, *, parallel: bool, max_concurrent: int | None) -> Awaitable[None]:
        """Run every call; concurrently when ``parallel`` (at most ``max_concurrent`` at once).

        A lone call is awaited directly, with no wrapper around it: most responses ask for one.
        """
        count = len(self.calls)
        if count == 1:
            return self._run_call(0, None)
        if not parallel or max_concurrent == 1:
            return self._run_in_turn()
        return self._run_concurrently(max_concurrent)

    async def _run_in_turn(self) -> None:
        for index in range(len(self.calls)):
            await self._run_call(index, None)

    async def _run_concurrently(self, max_concurrent: int | None) -> None:
        limit = asyncio.Semaphore(max_concurrent) if max_concurrent is not None else None
        try:
            async with asyncio.TaskGroup() as group:
                for index in range(len(self.calls)):
                    group.create_task(self._run_call(index, limit))
        except BaseExceptionGroup as failure:
            # A bug, ours or a plug-in's (the runner records every tool failure): raise it as
            # the loop would have met it, the other calls already cancelled and awaited.
            raise failure.exceptions[0] from None

    def close(self, reason: str) -> None:
        """Give every call without a record a ``cancelled`` one (started first if need be)."""
        for index, call in enumerate(self.calls):
            if self.records[index] is not None:
                continue
            begun = self.started[index]
            if begun is None:
                inputs = ToolRunner.thread_context(call.arguments, self._context)
                begun = self.started[index] = (inputs, time.time())
                if call.id not in self.logged_starts:
                    self._emit(ToolCallStarted(call.id, call.name, inputs, self.iteration))
            record = ToolRunner.cancelled_record(call, begun[0], self.iteration, begun[1], reason)
            self.records[index] = record
            self._emit(ToolCallCompleted(record))

    def in_order(self) -> list[ToolCallRecord]:
        """The records so far, in the order the model asked for the calls."""
        return [r for r in self.records if r is not None]

    async def _run_call(self, index: int, limit: asyncio.Semaphore | None) -> None:
        if self.records[index] is not None:  # a resumed run's call that had ended
            return
        over_budget = index >= self.allowed
        gate = self._gate if self.calls[index].id not in self.approved else None
        if self._checkpoint is not None and not over_budget:
            gate = _checked(gate, self._checkpoint)

        def started(call: ToolCall, inputs: Mapping[str, Any]) -> None:
            self.started[index] = (inputs, time.time())
            if call.id not in self.logged_starts:
                self._emit(ToolCallStarted(call.id, call.name, inputs, self.iteration))

        def progress(call: ToolCall, done: float, total: float | None, message: str) -> None:
            if self.records[index] is None:  # a report after the call ended is dropped
                self._emit(
                    ToolCallProgress(call.id, call.name, done, total, message, self.iteration)
                )

        async def refuse(
            call: ToolCall, inputs: Mapping[str, Any], spec: ToolSpec, iteration: int
        ) -> str:
            return self.over_budget

        async with limit if limit is not None else _UNLIMITED:
            record = await self._runner.run(
                self.calls[index], iteration=self.iteration, context=self._context,
                on_started=started, gate=refuse if over_budget else gate,
                on_progress=progress, run_id=self.run_id,
            )  # fmt: skip
        if not over_budget:
            self.executed += 1
        self.records[index] = record
        self._emit(ToolCallCompleted(record))


def _checked(gate: Gate | None, checkpoint: Checkpoint) -> Gate:
    """``gate``, then, for a call it lets run, ``checkpoint``: the call runs once its start
    (and its approval) are on record."""

    async def checked(
        call: ToolCall, inputs: Mapping[str, Any], spec: ToolSpec, iteration: int
    ) -> str | None:
        if gate is not None:
            denial = await gate(call, inputs, spec, iteration)
            if denial is not None:
                return denial
        await checkpoint(spec)
        return None

    return checked


def feedback(record: ToolCallRecord) -> Message:
    """The ``tool`` message that gives the model a call's result: its output as JSON (the
    record's own text, made once), or ``{"error": ...}`` with ``is_error`` set."""
    if record.success:
        return Message(Role.TOOL, record.output_json(), tool_call_id=record.call_id)
    return Message(
        Role.TOOL, _encode({"error": record.error}), tool_call_id=record.call_id, is_error=True
    )

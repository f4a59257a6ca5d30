"""``ToolCallingRuntime``: the loop that alternates LLM calls and tool calls.

The loop is async at heart (:meth:`arun_tool_loop`); :meth:`run_tool_loop` blocks and
:meth:`stream_tool_loop` yields events. Tool execution lives in ``execution/runner.py``, one
response's calls in ``batch.py``, the per-run bookkeeping in ``loop_state.py`` and a log's
replay in ``resume.py``; a resumed run's loop is this one, entered where its log stops. Each
iteration costs the same however long the history: nothing here walks the conversation.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from cleveragents.tool.budget import RunBudget
from cleveragents.tool.context import ToolActorContext
from cleveragents.tool.errors import LLMCallError
from cleveragents.tool.events import (
    Checkpoint,
    EventSink,
    IterationStarted,
    LLMResponded,
    RunCancelled,
    RunCompleted,
    RunEvent,
    RunFailed,
    RunResumed,
    RunStarted,
)
from cleveragents.tool.execution.registry import ToolRegistry
from cleveragents.tool.execution.runner import ToolRunner
from cleveragents.tool.llm import LLMCaller
from cleveragents.tool.loop.batch import ToolBatch, feedback
from cleveragents.tool.loop.blocking import run_blocking
from cleveragents.tool.loop.checks import check_prompt
from cleveragents.tool.loop.event_channel import EventChannel
from cleveragents.tool.loop.final import final_answers, settle
from cleveragents.tool.loop.gate import CallGate
from cleveragents.tool.loop.llm_call import call_llm, run_limit
from cleveragents.tool.loop.loop_state import LoopState
from cleveragents.tool.loop.resume import INTERRUPTED, Resumption, replay
from cleveragents.tool.loop.summary import summarize
from cleveragents.tool.loop.yield_timer import YieldTimer
from cleveragents.tool.messages import LLMResponse, Message, Role, ToolCall
from cleveragents.tool.output import DEFAULT_MAX_OUTPUT_RETRIES, OutputSchema
from cleveragents.tool.policy import ApprovalRequest, Approver, AutomationProfile, Decision
from cleveragents.tool.records import StopReason, ToolCallRunResult
from cleveragents.tool.router import ToolCallRouter, route_call
from cleveragents.tool.spec import ToolSpec

__all__ = ["DEFAULT_MAX_ITERATIONS", "ToolCallingRuntime"]

DEFAULT_MAX_ITERATIONS = 25
#: A run that never suspends on its own still yields the event loop this often.
_YIELD_EVERY_S = 0.002
_TERMINAL = (RunCompleted, RunFailed, RunCancelled)


def _ignore(event: RunEvent) -> None:
    return None


class ToolCallingRuntime:
    """Runs the tool-calling loop: LLM, tools, results back to the LLM, until a final answer.

    ``parallel_tool_calls`` runs the calls of one LLM response concurrently (their records
    keep the order the model asked for them); ``system_prompt`` opens every conversation.
    ``profile`` (an :class:`AutomationProfile`) decides which tools run freely, which need
    ``approver``'s approval (waiting at most ``approval_timeout_s``; ``approval_help`` words
    the ``ApprovalRequested`` event's ``how_to_answer``) and which are not even offered;
    ``budget`` adds limits beyond ``max_iterations``. A response asking for more than
    ``max_calls_per_response`` calls fails the run (``LLMCallError``) before any of them runs.
    ``output`` asks for a final answer of JSON valid against it (``final.py``, ``output.py``).
    """

    def __init__(
        self,
        registry: ToolRegistry,
        runner: ToolRunner,
        llm_caller: LLMCaller,
        max_iterations: int = DEFAULT_MAX_ITERATIONS,
        router: ToolCallRouter | None = None,
        *,
        parallel_tool_calls: bool = True,
        system_prompt: str | None = None,
        profile: AutomationProfile | None = None,
        approver: Approver | None = None,
        approval_timeout_s: float = 300.0,
        approve_on_timeout: bool = False,
        approval_help: Callable[[ApprovalRequest], str] | None = None,
        budget: RunBudget | None = None,
        max_calls_per_response: int | None = None,
        output: OutputSchema | None = None,
        max_output_retries: int = DEFAULT_MAX_OUTPUT_RETRIES,
    ) -> None:
        if not isinstance(registry, ToolRegistry):
            raise TypeError(f"registry must be a ToolRegistry, got {type(registry).__name__}")
        if not isinstance(runner, ToolRunner):
            raise TypeError(f"runner must be a ToolRunner, got {type(runner).__name__}")
        if runner.registry is not registry:
            raise ValueError(
                "runner.registry is not the registry given to the runtime: the model would be "
                "offered one set of tools and the runner would execute another; build the "
                "runner with ToolRunner(registry)"
            )
        if not callable(getattr(llm_caller, "call", None)):
            raise TypeError("llm_caller must have a call(request) method (see LLMCaller)")
        if router is not None and not isinstance(router, ToolCallRouter):
            raise TypeError(f"router must be a ToolCallRouter, got {type(router).__name__}")
        if isinstance(max_iterations, bool) or not isinstance(max_iterations, int):
            raise TypeError("max_iterations must be an int")
        if max_iterations < 1:
            raise ValueError(f"max_iterations must be at least 1, got {max_iterations}")
        self.registry = registry
        self.runner = runner
        self.llm_caller = llm_caller
        self.max_iterations = max_iterations
        self.router = router
        self.parallel_tool_calls = parallel_tool_calls
        self.system_prompt = system_prompt
        self.profile = profile
        self.approver = approver
        self.approval_timeout_s = approval_timeout_s
        self.approve_on_timeout = approve_on_timeout
        self.approval_help = approval_help
        self.budget = budget if budget is not None else RunBudget()
        self.max_calls_per_response = max_calls_per_response
        self.answers = final_answers(output, max_output_retries)
        self.output = output
        self._llm_is_async = inspect.iscoroutinefunction(llm_caller.call)

    def offered_specs(self) -> list[ToolSpec]:
        """The tools the model is offered: the registry's, less those the automation profile
        forbids. ``RunStarted.tool_names`` names exactly these."""
        specs = self.registry.specs()
        if self.profile is None:
            return specs
        profile = self.profile
        return [s for s in specs if profile.decide(s) is not Decision.FORBID]

    # -- public entry points ---------------------------------------------------------------

    def run_tool_loop(
        self,
        prompt: str,
        context: ToolActorContext | None = None,
        *,
        run_id: str = "",
        timeout_s: float | None = None,
    ) -> ToolCallRunResult:
        """Run the loop to its end and return the result, blocking the calling thread.

        Works from any thread. Called where an event loop is already running, it runs the
        loop on a fresh event loop in a worker thread and blocks until it finishes.
        """
        check_prompt(prompt)
        coro = self.arun_tool_loop(prompt, context, run_id=run_id, timeout_s=timeout_s)
        return run_blocking(coro)

    async def arun_tool_loop(
        self,
        prompt: str,
        context: ToolActorContext | None = None,
        *,
        run_id: str = "",
        timeout_s: float | None = None,
        on_event: EventSink | None = None,
        resume: Resumption | None = None,
        checkpoint: Checkpoint | None = None,
        deltas_read: Callable[[], bool] | None = None,
    ) -> ToolCallRunResult:
        """Run the loop and return the result; ``on_event`` receives every event in order,
        and each tool call waits for ``checkpoint`` (if given) before it runs: once
        ``on_event``'s durable log holds its ``ToolCallStarted``. ``deltas_read``, when given,
        says whether ``on_event``'s consumer reads ``LLMDelta`` events at the moment: an LLM
        caller whose deltas cost work of their own may skip them while it says no
        (``deltas_read`` in ``messages.py``).

        With ``resume``, the run goes on from its logged events (``resume.py``): ``RunResumed``,
        then the loop where it stopped; its time limits count from the run's first start.

        ``timeout_s`` is the run's deadline: when it passes, calls in flight are closed as
        cancelled, ``RunCancelled`` ends the run and the partial result comes back with
        ``stop_reason=deadline``. The budget's ``max_wall_clock_s``, when it comes first, ends
        the run the same way but as a limit: ``RunCompleted``, ``wall_clock_budget``.
        Raises :class:`LLMCallError` when the LLM caller raises; cancelling the awaiting task
        closes calls in flight, emits ``RunCancelled`` and re-raises ``CancelledError``.
        """
        check_prompt(prompt)
        emit = on_event or _ignore
        return await self._execute(
            prompt, context, run_id, timeout_s, emit, resume, checkpoint, deltas_read
        )

    def stream_tool_loop(
        self,
        prompt: str,
        context: ToolActorContext | None = None,
        *,
        run_id: str = "",
        timeout_s: float | None = None,
    ) -> AsyncIterator[RunEvent]:
        """Yield the run's events as they happen, ending with its terminal event.

        A failed run ends with ``RunFailed`` (nothing is raised); closing the iterator early
        cancels the run.
        """
        check_prompt(prompt)
        return self._stream(prompt, context, run_id, timeout_s)

    # -- the loop --------------------------------------------------------------------------

    async def _stream(
        self,
        prompt: str,
        context: ToolActorContext | None,
        run_id: str,
        timeout_s: float | None,
    ) -> AsyncIterator[RunEvent]:
        channel = EventChannel()
        task = asyncio.create_task(self._execute(prompt, context, run_id, timeout_s, channel.put))
        try:
            while True:
                event = await channel.get()
                yield event
                if isinstance(event, _TERMINAL):
                    break
        finally:
            if not task.done():
                task.cancel()
            # The run's own outcome is already in its terminal event.
            await asyncio.gather(task, return_exceptions=True)

    async def _execute(
        self,
        prompt: str,
        context: ToolActorContext | None,
        run_id: str,
        timeout_s: float | None,
        emit: EventSink,
        resume: Resumption | None = None,
        checkpoint: Checkpoint | None = None,
        deltas_read: Callable[[], bool] | None = None,
    ) -> ToolCallRunResult:
        state = LoopState(run_id, context if context is not None else ToolActorContext())
        state.checkpoint = checkpoint
        state.deltas_read = deltas_read
        if self.profile is not None:
            state.gate = CallGate(
                self.profile,
                self.approver,
                emit,
                timeout_s=self.approval_timeout_s,
                on_timeout=self.approve_on_timeout,
                help=self.approval_help,
            )
        specs = self.offered_specs()
        tools = (
            self.router.tool_schemas(specs)
            if self.router is not None
            else [
                {"name": s.name, "description": s.description, "input_schema": s.input_schema}
                for s in specs
            ]
        )
        if self.system_prompt:
            state.messages.append(Message(Role.SYSTEM, self.system_prompt))
        state.messages.append(Message(Role.USER, prompt))
        if resume is None:
            emit(RunStarted(run_id, prompt, tuple(s.name for s in specs), self.max_iterations))
        limit_s, by_budget, stop_at, why = run_limit(self.budget, timeout_s)
        left_s = None if limit_s is None else limit_s - (resume.elapsed_s if resume else 0.0)
        try:
            if left_s is None:
                result = await self._body(state, tools, emit, resume)
            else:
                async with asyncio.timeout(left_s) as scope:
                    result = await self._body(state, tools, emit, resume, left_s)
        except TimeoutError:
            if limit_s is None or not scope.expired():
                raise
            reason = f"the run's {why} of {limit_s:g}s passed"
            self._close_batch(state, reason)
            result = state.result(stop_at)
            # A budget is a limit the run was given: it completes; a deadline cancels it.
            emit(RunCompleted(result) if by_budget else RunCancelled(reason, result))
            return result
        except asyncio.CancelledError as exc:
            stop = StopReason.CANCELLED
            reason = str(exc.args[0]) if exc.args and exc.args[0] else "cancelled"
            if limit_s is not None and scope.expired():
                # Cancelled from outside at the moment the limit passed: the limit's reason wins.
                stop, reason = stop_at, f"the run's {why} of {limit_s:g}s passed"
            self._close_batch(state, reason)
            emit(RunCancelled(reason, state.result(stop)))
            raise
        except LLMCallError as exc:
            emit(RunFailed(str(exc), exc.result, exc.__cause__ or exc))
            raise
        except Exception as exc:
            # A bug, ours or a plug-in's: still end the run with its terminal event.
            message = f"internal error: {type(exc).__name__}: {exc}"
            emit(RunFailed(message, state.result(StopReason.ERROR), exc))
            raise
        emit(RunCompleted(result))
        return result

    async def _body(
        self,
        state: LoopState,
        tools: Sequence[Mapping[str, Any]],
        emit: EventSink,
        resume: Resumption | None,
        left_s: float | None = None,
    ) -> ToolCallRunResult:
        """The loop, from its start or (``resume``) from where the run's log stops."""
        if resume is None:
            return await self._loop(state, tools, emit)
        return await self._resume(state, tools, emit, resume, left_s)

    async def _resume(
        self,
        state: LoopState,
        tools: Sequence[Mapping[str, Any]],
        emit: EventSink,
        resume: Resumption,
        left_s: float | None,
    ) -> ToolCallRunResult:
        """Rebuild ``state`` from ``resume``'s events, log ``RunResumed`` and finish the run;
        ``left_s`` is the time its limits leave it (negative: it ran out while the sidecar was
        down). A call in flight at the stop that never began executing (not started, or
        waiting for an approval) simply runs, asked again; one that may have been executing
        runs again only if its tool is idempotent, and otherwise ends with a failed record
        (``INTERRUPTED``) the model sees."""
        route = self.router.route if self.router is not None else route_call
        budget = self.budget
        at = replay(
            resume.events, state, route=route, budget=budget, max_iterations=self.max_iterations,
            answers=self.answers,
        )  # fmt: skip
        pending = at.batch
        interrupted = [] if pending is None else pending.interrupted(self.registry)
        rerun = [] if pending is None else [i for i in pending.in_flight() if i not in interrupted]
        emit(
            RunResumed(
                resume.after_sequence, state.iterations, resume.reason, tuple(rerun),
                tuple(interrupted),
            )
        )  # fmt: skip
        if left_s is not None and left_s <= 0:
            # The deadline or wall-clock budget passed while the sidecar was down: wait for
            # the timeout, already due, to end the run before anything runs again.
            await asyncio.Event().wait()
        if at.settled is not None:
            return at.settled
        if at.final is not None:
            return state.result(at.stop or StopReason.FINAL_ANSWER, content=at.final)
        if pending is not None:
            batch = state.batch = ToolBatch(
                pending.calls, pending.iteration, runner=self.runner, context=state.context,
                emit=emit, gate=state.gate, allowed=pending.allowed, over_budget=pending.refusal,
                run_id=state.run_id, checkpoint=state.checkpoint,
            )  # fmt: skip
            batch.resume(
                pending.records, logged_starts=frozenset(pending.started),
                approved=frozenset(pending.approved), interrupted=interrupted,
                reason=INTERRUPTED,
            )  # fmt: skip
            await batch.run(
                parallel=self.parallel_tool_calls, max_concurrent=budget.max_concurrent_tool_calls
            )
            self._finish_batch(state, batch)
            at.stop = pending.stop
        if at.stop is None:
            return await self._loop(state, tools, emit, state.iterations + 1)
        if budget.summarize_on_stop:
            return await self._summarize(state, at.stop, emit)
        return state.result(at.stop)

    async def _loop(
        self,
        state: LoopState,
        tools: Sequence[Mapping[str, Any]],
        emit: EventSink,
        first: int = 1,
    ) -> ToolCallRunResult:
        route = self.router.route if self.router is not None else route_call
        budget = self.budget
        loop = asyncio.get_running_loop()
        yield_timer = YieldTimer(loop, _YIELD_EVERY_S)
        stop = StopReason.MAX_ITERATIONS
        for iteration in range(first, self.max_iterations + 1):
            emit(IterationStarted(iteration))
            response = await self._call_llm(state, tools, iteration, emit)
            state.iterations = iteration
            state.add_response(response)
            emit(LLMResponded.of(iteration, response))
            if not response.tool_calls:
                if self.answers is None and response.refusal is None:
                    return state.result(StopReason.FINAL_ANSWER, content=response.content)
                if (final := settle(self.answers, state, response)) is not None:
                    return final
                continue
            calls = [route(call) for call in response.tool_calls]
            state.messages.append(response.turn(calls))
            over = budget.check(state.usage.total_tokens, state.tool_calls, len(calls))
            allowed = len(calls) if over is None else over.allowed
            refusal = "" if over is None else over.refusal
            if over is not None:
                stop = over.stop_reason
            await self._run_batch(state, calls, iteration, emit, allowed, refusal)
            if allowed < len(calls):
                break
            # Let other tasks run even when neither the LLM nor the tools ever suspend: a
            # scripted run must not hold the event loop (and its watchers) for its whole life.
            if yield_timer.due():
                await asyncio.sleep(0)
                yield_timer.arm()
        if budget.summarize_on_stop:
            return await self._summarize(state, stop, emit)
        return state.result(stop)

    async def _summarize(
        self, state: LoopState, stop: StopReason, emit: EventSink
    ) -> ToolCallRunResult:
        """One last LLM call, without tools, so the model can sum up what it has."""
        return await summarize(self._call_llm, state, stop, emit, self.answers)

    async def _call_llm(
        self, state: LoopState, tools: Sequence[Mapping[str, Any]], iteration: int, emit: EventSink
    ) -> LLMResponse:
        """One LLM call; its streamed deltas reach ``emit`` as ``LLMDelta`` events."""
        caller, max_calls = self.llm_caller, self.max_calls_per_response
        return await call_llm(
            caller, self._llm_is_async, state, tools, iteration, emit, max_calls, self.output
        )

    async def _run_batch(
        self,
        state: LoopState,
        calls: Sequence[ToolCall],
        iteration: int,
        emit: EventSink,
        allowed: int,
        refusal: str,
    ) -> None:
        """Run one response's calls; those from index ``allowed`` on are over budget and get
        ``refusal`` as their error."""
        batch = state.batch = ToolBatch(
            calls, iteration, runner=self.runner, context=state.context, emit=emit,
            gate=state.gate, allowed=allowed, over_budget=refusal, run_id=state.run_id,
            checkpoint=state.checkpoint,
        )  # fmt: skip
        await batch.run(
            parallel=self.parallel_tool_calls, max_concurrent=self.budget.max_concurrent_tool_calls
        )
        self._finish_batch(state, batch)

    def _finish_batch(self, state: LoopState, batch: ToolBatch) -> None:
        """Record the batch in request order and feed every result back to the model."""
        records = batch.in_order()
        state.add_records(records)
        messages = state.messages
        for record in records:
            messages.append(feedback(record))
        state.tool_calls += batch.executed
        state.batch = None

    def _close_batch(self, state: LoopState, reason: str) -> None:
        """Close every call of an interrupted batch with a ``cancelled`` record."""
        batch = state.batch
        if batch is not None:
            batch.close(reason)
            self._finish_batch(state, batch)

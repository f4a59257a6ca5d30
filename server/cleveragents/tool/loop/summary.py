"""The closing summary: with ``summarize_on_stop``, one last LLM call without tools after a
limit stopped the loop, so that the model can sum up what it has (kept out of ``runtime.py``).

With an output schema the summary is asked for as a structured answer too: when it validates
it is the result's output (it is not retried: the run has stopped).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from cleveragents.tool.events import EventSink, IterationStarted, LLMResponded
from cleveragents.tool.loop.final import FinalAnswers
from cleveragents.tool.loop.loop_state import LoopState
from cleveragents.tool.messages import LLMResponse, Message, Role
from cleveragents.tool.records import StopReason, ToolCallRunResult

__all__ = ["LLMCall", "summarize"]

#: Makes one LLM call of the run: its state, the tools offered, the iteration and the sink.
LLMCall = Callable[[LoopState, Sequence[Mapping[str, Any]], int, EventSink], Awaitable[LLMResponse]]


async def summarize(
    call: LLMCall,
    state: LoopState,
    stop: StopReason,
    emit: EventSink,
    answers: FinalAnswers | None = None,
) -> ToolCallRunResult:
    """One last LLM call, without tools, and the result it ends the run with (``stop``)."""
    iteration = state.iterations + 1
    state.messages.append(
        Message(
            Role.USER,
            f"The run has stopped ({stop.value.replace('_', ' ')}); no more tools can be "
            "called. Summarise what you found and what is left to do.",
        )
    )
    emit(IterationStarted(iteration))
    response = await call(state, (), iteration, emit)
    state.iterations = iteration
    state.add_response(response)
    emit(LLMResponded(iteration, response.content, (), response.usage, response.reasoning))
    output_json = "" if answers is None else answers.summary(response.content)
    return state.result(stop, content=response.content, output_json=output_json)

"""How the loop takes an answer without tool calls when the run asks more of it than text.

A refusal ends the run (``StopReason.REFUSAL``, its text as the content). With an output
schema, an answer ends the run only once it validates: one that does not goes back to the
model as the assistant's turn and a user message naming the error, and the loop makes
another LLM call, until ``max_output_retries`` invalid answers have been sent back; the next
invalid one ends the run (``StopReason.MAX_OUTPUT_RETRIES``, a limit) with its text and
error. The live loop and a run replayed from its log both go through :meth:`FinalAnswers.settle`,
so a resumed run counts its retries as the live one did.
"""

from __future__ import annotations

from cleveragents.tool.loop.loop_state import LoopState
from cleveragents.tool.messages import LLMResponse, Message, Role
from cleveragents.tool.output import OutputSchema
from cleveragents.tool.records import StopReason, ToolCallRunResult

__all__ = ["FinalAnswers", "final_answers", "refused", "settle"]


def refused(state: LoopState, response: LLMResponse) -> ToolCallRunResult:
    """The result of a run whose model refused to answer."""
    return state.result(StopReason.REFUSAL, content=response.refusal or "the model refused")


def final_answers(output: OutputSchema | None, max_retries: int) -> FinalAnswers | None:
    """The policy of a run with ``output`` (``None`` without one)."""
    if output is None:
        return None
    if not isinstance(output, OutputSchema):
        raise TypeError(f"output must be an OutputSchema, got {type(output).__name__}")
    return FinalAnswers(output, max_retries)


def settle(
    answers: FinalAnswers | None, state: LoopState, response: LLMResponse
) -> ToolCallRunResult | None:
    """How ``response`` (without tool calls) ends the run: ``answers.settle`` with an output
    schema, else a refusal or the final answer."""
    if answers is not None:
        return answers.settle(state, response)
    if response.refusal is not None:
        return refused(state, response)
    return state.result(StopReason.FINAL_ANSWER, content=response.content)


class FinalAnswers:
    """The answer a run with an output schema ends on (see the module docstring)."""

    __slots__ = ("max_retries", "output")

    def __init__(self, output: OutputSchema, max_retries: int) -> None:
        if isinstance(max_retries, bool) or not isinstance(max_retries, int):
            raise TypeError("max_output_retries must be an int")
        if max_retries < 0:
            raise ValueError(f"max_output_retries must be 0 or more, got {max_retries}")
        self.output = output.prepare()
        self.max_retries = max_retries

    def settle(self, state: LoopState, response: LLMResponse) -> ToolCallRunResult | None:
        """The run's result if ``response`` (without tool calls) ends it; ``None`` when it
        went back to the model, whose next answer the loop asks for."""
        if response.refusal is not None:
            return refused(state, response)
        check = self.output.check(response.content)
        if check.error is None:
            content = response.content
            return state.result(StopReason.FINAL_ANSWER, content=content, output_json=content)
        if state.output_retries >= self.max_retries:
            return state.result(
                StopReason.MAX_OUTPUT_RETRIES, content=response.content, output_error=check.error
            )
        state.output_retries += 1
        state.messages.append(response.turn(()))
        state.messages.append(Message(Role.USER, self.output.feedback(check.error)))
        return None

    def summary(self, text: str) -> str:
        """``text`` as the output of a closing summary, when it validates ("" otherwise)."""
        return text if self.output.check(text).error is None else ""

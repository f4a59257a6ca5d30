"""``run_tool_loop`` of both clients, typed by its ``output_type``: a ``TypedResult`` of the
type given, a plain ``ToolCallRunResult`` without one. Each client sends the spec
(``run_spec``); this builds it and parses the answer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, Unpack, overload

from cleveragents.client.exchange import RunOptions, run_spec
from cleveragents.client.output import OutputSpec, OutputType, TypedResult, output_type_of
from cleveragents.tool import OutputSchema, ToolCallRunResult
from cleveragents.toolruntime.v1 import types_pb2

__all__ = ["AsyncTypedRuns", "TypedRuns"]

T = TypeVar("T")
_ABOUT = """Run the loop with the sidecar's tools and LLM profile; return the result.

        With ``output_type`` (a dataclass, a ``TypedDict``, a pydantic model, a JSON Schema
        dict or an ``OutputSchema``) the final answer must be JSON of it: the result is then a
        ``TypedResult`` whose ``output`` is the answer as that type (a schema dict: as parsed
        JSON), ``None`` when the run ended without a valid one (see ``stop_reason``)."""


class TypedRuns:
    """``run_tool_loop`` of the blocking client."""

    @overload
    def run_tool_loop(
        self, prompt: str, *, output_type: type[T] | OutputType[T], detach: bool = False,
        timeout: float | None = None, **options: Unpack[RunOptions],
    ) -> TypedResult[T]: ...  # fmt: skip

    @overload
    def run_tool_loop(
        self, prompt: str, *, output_type: Mapping[str, Any] | OutputSchema, detach: bool = False,
        timeout: float | None = None, **options: Unpack[RunOptions],
    ) -> TypedResult[Any]: ...  # fmt: skip

    @overload
    def run_tool_loop(
        self, prompt: str, *, output_type: None = None, detach: bool = False,
        timeout: float | None = None, **options: Unpack[RunOptions],
    ) -> ToolCallRunResult: ...  # fmt: skip

    def run_tool_loop(
        self, prompt: str, *, output_type: OutputSpec | OutputType[Any] | None = None,
        detach: bool = False, timeout: float | None = None, **options: Unpack[RunOptions],
    ) -> ToolCallRunResult:  # fmt: skip
        output = output_type_of(output_type)
        spec = run_spec(prompt, detach=detach, output_type=output, **options)
        result = self._run_spec(spec, timeout)
        return result if output is None else output.result(result)

    run_tool_loop.__doc__ = _ABOUT

    def _run_spec(self, spec: types_pb2.RunSpec, timeout: float | None) -> ToolCallRunResult:
        raise NotImplementedError


class AsyncTypedRuns:
    """``run_tool_loop`` of the asyncio client."""

    @overload
    async def run_tool_loop(
        self, prompt: str, *, output_type: type[T] | OutputType[T], detach: bool = False,
        timeout: float | None = None, **options: Unpack[RunOptions],
    ) -> TypedResult[T]: ...  # fmt: skip

    @overload
    async def run_tool_loop(
        self, prompt: str, *, output_type: Mapping[str, Any] | OutputSchema, detach: bool = False,
        timeout: float | None = None, **options: Unpack[RunOptions],
    ) -> TypedResult[Any]: ...  # fmt: skip

    @overload
    async def run_tool_loop(
        self, prompt: str, *, output_type: None = None, detach: bool = False,
        timeout: float | None = None, **options: Unpack[RunOptions],
    ) -> ToolCallRunResult: ...  # fmt: skip

    async def run_tool_loop(
        self, prompt: str, *, output_type: OutputSpec | OutputType[Any] | None = None,
        detach: bool = False, timeout: float | None = None, **options: Unpack[RunOptions],
    ) -> ToolCallRunResult:  # fmt: skip
        output = output_type_of(output_type)
        spec = run_spec(prompt, detach=detach, output_type=output, **options)
        result = await self._run_spec(spec, timeout)
        return result if output is None else output.result(result)

    run_tool_loop.__doc__ = _ABOUT

    async def _run_spec(self, spec: types_pb2.RunSpec, timeout: float | None) -> ToolCallRunResult:
        raise NotImplementedError

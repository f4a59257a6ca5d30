"""``ToolRunner``: executes one tool call in four stages and always returns a record.

1. resolve the tool by name; 2. validate the model's arguments against the tool's schema and
thread the context keys in; 3. execute the handler (sync handlers in a worker thread) within
the tool's timeout; 4. record the outcome, normalising the output to a JSON object.
"""

from __future__ import annotations

import asyncio
import functools
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from cleveragents.tool.context import ToolActorContext
from cleveragents.tool.errors import ToolDeniedError, ToolError
from cleveragents.tool.execution.call_timer import CallTimer
from cleveragents.tool.execution.limits import ToolLimits
from cleveragents.tool.execution.registry import RegisteredTool, ToolRegistry, UnknownToolError
from cleveragents.tool.frozen import quick_init
from cleveragents.tool.jsontext import find_surrogate
from cleveragents.tool.messages import ToolCall
from cleveragents.tool.outputjson import OutputText, plain_output
from cleveragents.tool.records import ErrorKind, ToolCallRecord
from cleveragents.tool.spec import RESERVED_INPUT_KEYS, ToolSpec

__all__ = [
    "CallScope",
    "Gate",
    "ProgressCallback",
    "ProgressReport",
    "StartedCallback",
    "ToolRunner",
    "current_call",
]

#: Called once per call, after validation and before execution, with the inputs the tool gets.
StartedCallback = Callable[[ToolCall, Mapping[str, Any]], None]
#: Asked after the started callback whether the call may run: ``None`` lets it run, a string
#: denies it with that message (an automation profile or an approver said no).
Gate = Callable[[ToolCall, Mapping[str, Any], ToolSpec, int], Awaitable[str | None]]
#: Called (on the event loop's thread) with a call's progress: ``(progress, total, message)``.
ProgressReport = Callable[[float, float | None, str], None]
#: The runner's caller's view of it: the call as well.
ProgressCallback = Callable[[ToolCall, float, float | None, str], None]


def _no_report(progress: float, total: float | None, message: str) -> None:
    """What ``CallScope.progress`` is when nobody follows the call's progress."""


@quick_init
@dataclass(frozen=True, slots=True)
class CallScope:
    """The call a handler is executing, for handlers that need more than their inputs.

    ``idempotency_key`` (the run id and the call id) is the same each time the call runs,
    a run resumed after a restart included: a tool can use it to do its work only once.
    ``progress`` reports how far the call has got (a ``ToolCallProgress`` event); ``timer``
    is the call's timeout (``None``: it has none; a ``CallTimer``, as ``asyncio.timeout``
    gives one), which a handler may ``reschedule``, as an MCP server's progress may extend
    its call's timeout.
    """

    call: ToolCall
    iteration: int
    timeout_s: float | None
    progress: ProgressReport = _no_report
    timer: CallTimer | None = None
    run_id: str = ""

    @property
    def idempotency_key(self) -> str:
        """``RUN_ID:CALL_ID``, unique to this call of this run."""
        return f"{self.run_id}:{self.call.id}"


_current: ContextVar[CallScope | None] = ContextVar("cleveragents_tool_call", default=None)


def current_call() -> CallScope | None:
    """The tool call being executed by the calling handler, or ``None`` outside a handler."""
    return _current.get()


class ToolRunner:
    """Runs tool calls against a registry. Failures of any stage are records, never exceptions.

    ``default_timeout_s`` bounds tools whose spec sets no ``timeout_s`` (``None``: no bound).
    A sync handler that times out keeps running in its worker thread; its result is discarded.
    """

    __slots__ = ("default_timeout_s", "limits", "registry")

    def __init__(
        self,
        registry: ToolRegistry,
        *,
        default_timeout_s: float | None = None,
        limits: ToolLimits | None = None,
    ) -> None:
        if not isinstance(registry, ToolRegistry):
            raise TypeError(f"registry must be a ToolRegistry, got {type(registry).__name__}")
        if default_timeout_s is not None and not (
            math.isfinite(default_timeout_s) and default_timeout_s > 0
        ):
            raise ValueError("default_timeout_s must be a positive number of seconds or None")
        self.registry = registry
        self.default_timeout_s = default_timeout_s
        self.limits = limits

    async def run(
        self,
        call: ToolCall,
        *,
        iteration: int,
        context: ToolActorContext | None = None,
        on_started: StartedCallback | None = None,
        gate: Gate | None = None,
        on_progress: ProgressCallback | None = None,
        run_id: str = "",
    ) -> ToolCallRecord:
        """Run ``call`` and return its record; ``on_started`` sees the inputs before execution,
        then ``gate`` may deny the call; ``on_progress`` gets the progress its tool reports.
        ``run_id`` goes into the call's ``CallScope``."""
        started_at = time.time()
        entry = self.registry.get(call.name)
        if entry is None:
            inputs = self.thread_context(call.arguments, context)
            return self._early_failure(
                call, inputs, iteration, started_at, on_started, ErrorKind.UNKNOWN_TOOL,
                f"unknown tool {call.name!r}; available tools: {', '.join(self.registry.names())}",
            )  # fmt: skip
        if call.arguments_error is not None:
            inputs = self.thread_context({}, context)
            return self._early_failure(
                call, inputs, iteration, started_at, on_started, ErrorKind.INVALID_ARGUMENTS,
                f"invalid arguments for tool {call.name!r}: {call.arguments_error}",
            )  # fmt: skip
        # One copy of the arguments per call: validated as the model sent them (minus the
        # reserved keys), then the context's keys are added in place.
        inputs = _without_reserved(call.arguments)
        problem = _validation_problem(entry, inputs)
        if context is not None:
            inputs.update(context.threaded_inputs())
        if problem is not None:
            return self._early_failure(
                call, inputs, iteration, started_at, on_started, ErrorKind.INVALID_ARGUMENTS,
                f"invalid arguments for tool {call.name!r}: {problem}",
            )  # fmt: skip
        if on_started is not None:
            on_started(call, inputs)
        denial = None if gate is None else await gate(call, inputs, entry.spec, iteration)
        if denial is not None:
            return ToolCallRecord(
                call.name, inputs, {}, 0.0, False, denial, iteration, call.id, ErrorKind.DENIED,
                started_at,
            )  # fmt: skip
        return await self._execute(entry, call, inputs, iteration, started_at, on_progress, run_id)

    async def invoke(self, name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """Call a tool's handler with ``inputs`` exactly as given and normalise its output.

        No validation, no context threading, no timeout: for hosts that execute a call
        another runner has already prepared (a client answering the sidecar). Raises what
        the handler raises, and ``UnknownToolError`` for an unknown name.
        """
        entry = self.registry.get(name)
        if entry is None:
            raise UnknownToolError(f"unknown tool {name!r}")
        return _as_output(await _invoke(entry, dict(inputs)))[0]

    @staticmethod
    def thread_context(
        arguments: Mapping[str, Any], context: ToolActorContext | None
    ) -> dict[str, Any]:
        """The model's arguments with the context's keys added (and any model value replaced)."""
        inputs = _without_reserved(arguments)
        if context is not None:
            inputs.update(context.threaded_inputs())
        return inputs

    @staticmethod
    def cancelled_record(
        call: ToolCall, inputs: Mapping[str, Any], iteration: int, started_at: float, reason: str
    ) -> ToolCallRecord:
        """The record that closes a call still in flight when its run was cancelled."""
        return ToolCallRecord(
            tool_name=call.name,
            inputs=inputs,
            output={},
            duration_ms=max(0.0, (time.time() - started_at) * 1000.0),
            success=False,
            error=f"cancelled: {reason}" if reason else "cancelled",
            iteration=iteration,
            call_id=call.id,
            error_kind=ErrorKind.CANCELLED,
            started_at=started_at,
        )

    def _early_failure(
        self,
        call: ToolCall,
        inputs: Mapping[str, Any],
        iteration: int,
        started_at: float,
        on_started: StartedCallback | None,
        kind: ErrorKind,
        error: str,
    ) -> ToolCallRecord:
        if on_started is not None:
            on_started(call, inputs)
        return ToolCallRecord(
            call.name, inputs, {}, 0.0, False, error, iteration, call.id, kind, started_at
        )

    async def _execute(
        self,
        entry: RegisteredTool,
        call: ToolCall,
        inputs: dict[str, Any],
        iteration: int,
        started_at: float,
        on_progress: ProgressCallback | None = None,
        run_id: str = "",
    ) -> ToolCallRecord:
        timeout_s = entry.spec.timeout_s or self.default_timeout_s
        clock = time.perf_counter()
        kind: ErrorKind | None = None
        error: str | None = None
        output: dict[str, Any] = {}
        text: OutputText | None = None
        report = _no_report if on_progress is None else functools.partial(on_progress, call)
        # The timer is made before the call's scope, so that one scope carries it.
        scope = None if timeout_s is None else CallTimer(timeout_s)
        first_deadline = None if scope is None else scope.when()
        token = _current.set(CallScope(call, iteration, timeout_s, report, scope, run_id))
        try:
            if scope is None:
                raw = await self._invoke(entry, inputs)
            else:
                async with scope:
                    raw = await self._invoke(entry, inputs)
            output, text = _as_output(raw)
        except TimeoutError as exc:
            if scope is not None and scope.expired():
                kind = ErrorKind.TIMEOUT
                error = f"tool {call.name!r} timed out after {timeout_s:g}s"
                if (scope.when() or 0.0) > (first_deadline or 0.0):  # extended by its handler
                    waited = time.perf_counter() - clock
                    error += f", its timeout extended by progress ({waited:.3g}s in all)"
            else:
                kind, error = ErrorKind.EXCEPTION, _describe(exc)
        except ToolDeniedError as exc:
            kind, error = ErrorKind.DENIED, _describe(exc)
        except Exception as exc:
            kind, error = ErrorKind.EXCEPTION, _describe(exc)
        finally:
            _current.reset(token)
        duration_ms = (time.perf_counter() - clock) * 1000.0
        record = ToolCallRecord(
            call.name, inputs, output, duration_ms, kind is None, error, iteration, call.id, kind,
            started_at,
        )  # fmt: skip
        return record if text is None else record.with_text(text)

    async def _invoke(self, entry: RegisteredTool, inputs: dict[str, Any]) -> Any:
        if self.limits is None:
            return await _invoke(entry, inputs)
        async with self.limits.slot(entry.spec.name):
            return await _invoke(entry, inputs)


async def _invoke(entry: RegisteredTool, inputs: dict[str, Any]) -> Any:
    names = entry.keyword_names
    if names is None:
        args: tuple[Any, ...] = (inputs,)
        kwargs: dict[str, Any] = {}
    else:
        args = ()
        kwargs = inputs if "*" in names else {k: v for k, v in inputs.items() if k in names}
        for key, enum_type in entry.enum_params.items():
            if key in kwargs:
                kwargs[key] = enum_type(kwargs[key])
    if entry.is_async:
        return await entry.handler(*args, **kwargs)
    result = await asyncio.to_thread(entry.handler, *args, **kwargs)
    if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
        result = await result
    return result


def _without_reserved(arguments: Mapping[str, Any]) -> dict[str, Any]:
    if RESERVED_INPUT_KEYS.isdisjoint(arguments):
        return dict(arguments)
    return {k: v for k, v in arguments.items() if k not in RESERVED_INPUT_KEYS}


def _validation_problem(entry: RegisteredTool, arguments: dict[str, Any]) -> str | None:
    validator = entry.validator
    cap = entry.max_argument_values
    if cap is not None and _more_values_than(arguments, cap):
        return (
            f"the arguments hold more than {cap} JSON values, the most this tool's schema may "
            "be checked against in one call"
        )
    try:
        if validator.is_valid(arguments):
            return None
        error = next(iter(validator.iter_errors(arguments)))
    except ValueError as exc:  # a value that is not JSON (a set, an object...)
        return f"arguments are not JSON values: {exc}"
    path = "/".join(str(part) for part in error.instance_path)
    message = str(error.message)
    return f"at '{path}': {message}" if path else message


def _more_values_than(value: Any, cap: int) -> bool:
    """Whether ``value`` holds more than ``cap`` JSON values; stops counting past ``cap``."""
    count = 0
    stack = [value]
    while stack:
        item = stack.pop()
        count += 1
        if count > cap:
            return True
        if isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return False


def _describe(exc: BaseException) -> str:
    text = str(exc)
    if not text.isascii() and find_surrogate(text) is not None:  # no UTF-8 form: escape it
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(exc, ToolError):
        return text or "the tool failed"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _as_output(value: Any) -> tuple[dict[str, Any], OutputText]:
    """Normalise a handler's return value to a JSON object (non-objects become ``result``),
    with its JSON text: made once here, it serves the record's every later use."""
    return plain_output(value, _jsonable)


_SCALARS = (int, bool, type(None))


def _jsonable(value: Any) -> Any:
    """A plain JSON copy of ``value``; what JSON cannot carry is a ``TypeError`` or
    ``ValueError`` (a failed record), never text that breaks the record later."""
    if isinstance(value, str):
        if not value.isascii() and (lone := find_surrogate(value)) is not None:
            raise ValueError(
                f"tool output has a string with a lone surrogate \\u{ord(lone):04x} (half of "
                "a character, as when text is cut inside an emoji), which JSON cannot carry"
            )
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"tool output has the number {value!r}, which JSON cannot carry")
        return value
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"tool output has a non-string key {key!r}")
            out[_jsonable(key)] = _jsonable(item)
        return out
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    raise TypeError(f"tool output is not JSON-serialisable: {type(value).__name__}")

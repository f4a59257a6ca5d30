"""The in-process tool-calling runtime: registry, runner, router, LLM protocol and the loop."""

from cleveragents.tool.context import ToolActorContext
from cleveragents.tool.errors import (
    LLMCallError,
    ScriptExhaustedError,
    ToolDeniedError,
    ToolError,
    ToolRuntimeError,
)
from cleveragents.tool.events import (
    EventSink,
    IterationStarted,
    LLMResponded,
    RunCancelled,
    RunCompleted,
    RunEvent,
    RunFailed,
    RunStarted,
    TerminalEvent,
    ToolCallCompleted,
    ToolCallStarted,
)
from cleveragents.tool.llm import LLMCaller, ScriptedLLMCaller, response_from_dict
from cleveragents.tool.messages import LLMRequest, LLMResponse, Message, Role, ToolCall, Usage
from cleveragents.tool.records import ErrorKind, StopReason, ToolCallRecord, ToolCallRunResult
from cleveragents.tool.registry import ToolHandler, ToolRegistry, UnknownToolError
from cleveragents.tool.router import ToolCallRouter, ToolFormat
from cleveragents.tool.runner import ToolRunner
from cleveragents.tool.runtime import DEFAULT_MAX_ITERATIONS, ToolCallingRuntime
from cleveragents.tool.spec import ToolSpec

__all__ = [
    "DEFAULT_MAX_ITERATIONS",
    "ErrorKind",
    "EventSink",
    "IterationStarted",
    "LLMCallError",
    "LLMCaller",
    "LLMRequest",
    "LLMResponded",
    "LLMResponse",
    "Message",
    "Role",
    "RunCancelled",
    "RunCompleted",
    "RunEvent",
    "RunFailed",
    "RunStarted",
    "ScriptExhaustedError",
    "ScriptedLLMCaller",
    "StopReason",
    "TerminalEvent",
    "ToolActorContext",
    "ToolCall",
    "ToolCallCompleted",
    "ToolCallRecord",
    "ToolCallRouter",
    "ToolCallRunResult",
    "ToolCallStarted",
    "ToolCallingRuntime",
    "ToolDeniedError",
    "ToolError",
    "ToolFormat",
    "ToolHandler",
    "ToolRegistry",
    "ToolRunner",
    "ToolRuntimeError",
    "ToolSpec",
    "UnknownToolError",
    "Usage",
    "response_from_dict",
]

"""The in-process tool-calling runtime: registry, runner, router, LLM protocol and the loop."""

from cleveragents.tool.budget import RunBudget
from cleveragents.tool.context import ToolActorContext
from cleveragents.tool.errors import (
    LLMCallError,
    ScriptExhaustedError,
    ToolDeniedError,
    ToolError,
    ToolRuntimeError,
)
from cleveragents.tool.events import (
    ApprovalDecided,
    ApprovalRequested,
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
from cleveragents.tool.limits import ToolLimit, ToolLimits
from cleveragents.tool.llm import LLMCaller, ScriptedLLMCaller, response_from_dict
from cleveragents.tool.messages import LLMRequest, LLMResponse, Message, Role, ToolCall, Usage
from cleveragents.tool.policy import (
    BUILTIN_PROFILES,
    ApprovalDecision,
    ApprovalRequest,
    Approver,
    AutomationProfile,
    Decision,
)
from cleveragents.tool.records import ErrorKind, StopReason, ToolCallRecord, ToolCallRunResult
from cleveragents.tool.registry import ToolHandler, ToolRegistry, UnknownToolError
from cleveragents.tool.router import ToolCallRouter, ToolFormat
from cleveragents.tool.runner import ToolRunner
from cleveragents.tool.runtime import DEFAULT_MAX_ITERATIONS, ToolCallingRuntime
from cleveragents.tool.spec import ToolSpec

__all__ = [
    "BUILTIN_PROFILES",
    "DEFAULT_MAX_ITERATIONS",
    "ApprovalDecided",
    "ApprovalDecision",
    "ApprovalRequest",
    "ApprovalRequested",
    "Approver",
    "AutomationProfile",
    "Decision",
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
    "RunBudget",
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
    "ToolLimit",
    "ToolLimits",
    "ToolRegistry",
    "ToolRunner",
    "ToolRuntimeError",
    "ToolSpec",
    "UnknownToolError",
    "Usage",
    "response_from_dict",
]

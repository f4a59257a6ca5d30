"""The in-process tool-calling runtime: registry, runner, router, LLM protocol and the loop.

The public surface is ``__all__`` (a test pins it). The sub-packages are private: ``execution``
holds the registry and the runner that executes one call, ``loop`` the runtime, one
response's batch of calls and the run's bookkeeping.
"""

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
    LLMDelta,
    LLMRefused,
    LLMResponded,
    RunCancelled,
    RunCompleted,
    RunEvent,
    RunFailed,
    RunResumed,
    RunStarted,
    TerminalEvent,
    ToolCallCompleted,
    ToolCallProgress,
    ToolCallStarted,
)
from cleveragents.tool.execution.limits import ToolLimit, ToolLimits
from cleveragents.tool.execution.registry import ToolHandler, ToolRegistry, UnknownToolError
from cleveragents.tool.execution.runner import CallScope, ToolRunner, current_call
from cleveragents.tool.llm import (
    LLMCaller,
    RecordedRequest,
    Responder,
    ScriptedLLMCaller,
    response_from_dict,
)
from cleveragents.tool.loop.resume import Resumption
from cleveragents.tool.loop.runtime import DEFAULT_MAX_ITERATIONS, ToolCallingRuntime
from cleveragents.tool.messages import (
    DeltaSink,
    LLMRefusal,
    LLMRequest,
    LLMResponse,
    Message,
    Reasoning,
    ResponseDelta,
    Role,
    StructuredRequest,
    ToolCall,
    Usage,
)
from cleveragents.tool.output import DEFAULT_MAX_OUTPUT_RETRIES, OutputCheck, OutputSchema
from cleveragents.tool.policy import (
    BUILTIN_PROFILES,
    ApprovalDecision,
    ApprovalRequest,
    Approver,
    AutomationProfile,
    Decision,
)
from cleveragents.tool.records import ErrorKind, StopReason, ToolCallRecord, ToolCallRunResult
from cleveragents.tool.router import ToolCallRouter, ToolFormat, parse_call
from cleveragents.tool.spec import ToolSpec

__all__ = [
    "BUILTIN_PROFILES",
    "DEFAULT_MAX_ITERATIONS",
    "DEFAULT_MAX_OUTPUT_RETRIES",
    "ApprovalDecided",
    "ApprovalDecision",
    "ApprovalRequest",
    "ApprovalRequested",
    "Approver",
    "AutomationProfile",
    "CallScope",
    "Decision",
    "DeltaSink",
    "ErrorKind",
    "EventSink",
    "IterationStarted",
    "LLMCallError",
    "LLMCaller",
    "LLMDelta",
    "LLMRefusal",
    "LLMRefused",
    "LLMRequest",
    "LLMResponded",
    "LLMResponse",
    "Message",
    "OutputCheck",
    "OutputSchema",
    "Reasoning",
    "RecordedRequest",
    "Responder",
    "ResponseDelta",
    "Resumption",
    "Role",
    "RunBudget",
    "RunCancelled",
    "RunCompleted",
    "RunEvent",
    "RunFailed",
    "RunResumed",
    "RunStarted",
    "ScriptExhaustedError",
    "ScriptedLLMCaller",
    "StopReason",
    "StructuredRequest",
    "TerminalEvent",
    "ToolActorContext",
    "ToolCall",
    "ToolCallCompleted",
    "ToolCallProgress",
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
    "current_call",
    "parse_call",
    "response_from_dict",
]

"""The public surface of each package is its ``__all__``, pinned here; the client's layer
boundary holds in a fresh interpreter."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

SURFACES = {
    "cleveragents.tool": [
        "BUILTIN_PROFILES", "DEFAULT_MAX_ITERATIONS", "DEFAULT_MAX_OUTPUT_RETRIES",
        "ApprovalDecided", "ApprovalDecision",
        "ApprovalRequest", "ApprovalRequested", "Approver", "AutomationProfile", "CallScope",
        "Decision", "DeltaSink", "ErrorKind", "EventSink", "IterationStarted", "LLMCallError",
        "LLMCaller", "LLMDelta", "LLMRefusal", "LLMRefused", "LLMRequest", "LLMResponded",
        "LLMResponse", "Message",
        "OutputCheck", "OutputSchema", "Reasoning", "RecordedRequest",
        "Responder", "ResponseDelta", "Role", "RunBudget", "RunCancelled", "RunCompleted",
        "RunEvent", "RunFailed", "RunResumed", "Resumption",
        "RunStarted", "ScriptExhaustedError", "ScriptedLLMCaller", "StopReason",
        "StructuredRequest",
        "TerminalEvent", "ToolActorContext", "ToolCall", "ToolCallCompleted", "ToolCallProgress",
        "ToolCallRecord",
        "ToolCallRouter", "ToolCallRunResult", "ToolCallStarted", "ToolCallingRuntime",
        "ToolDeniedError", "ToolError", "ToolFormat", "ToolHandler", "ToolLimit", "ToolLimits",
        "ToolRegistry", "ToolRunner", "ToolRuntimeError", "ToolSpec", "UnknownToolError",
        "Usage", "current_call", "parse_call", "response_from_dict",
    ],
    "cleveragents.client": [
        "AsyncSidecarClient", "OutputType", "RunFailedError", "RunInfo", "RunSummary",
        "SidecarClient", "SidecarRpcError", "StreamedEvent", "TypedResult",
    ],
    "cleveragents.sidecar": [
        "ClientConfig", "ConfigError", "Policy", "ProfileConfig", "Sidecar", "SidecarConfig",
        "SidecarError",
        "configure_logging", "load_config",
    ],
}  # fmt: skip


@pytest.mark.parametrize("package", sorted(SURFACES))
def test_the_public_surface_is_pinned(package: str) -> None:
    module = importlib.import_module(package)
    assert sorted(module.__all__) == sorted(SURFACES[package])
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert not missing


def test_importing_the_client_loads_no_module_of_the_sidecar() -> None:
    probe = (
        "import json, sys; import cleveragents.client; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('cleveragents.'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], check=True, capture_output=True, text=True
    ).stdout
    loaded = json.loads(out)
    assert [m for m in loaded if m.startswith("cleveragents.sidecar")] == []
    assert "cleveragents.wire" in loaded  # it does convert through the shared wire package

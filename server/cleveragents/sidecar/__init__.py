"""The gRPC sidecar: serves ``cleveragents.toolruntime.v1.ToolRuntimeService``.

The public surface is ``__all__`` (a test pins it). Inside, each room holds one thing:
``transport`` (the gRPC server and its RPCs, the only part that touches protobuf),
``assembly`` (a request becomes a run), ``runs`` (runs, their logs, the manager and the
stores), ``hosted`` (tools and an LLM a Session's client hosts), ``config``, ``llm_profiles``,
``tool_sources`` and ``builtin_tools``, ``approvals``, ``status`` (exceptions to gRPC
statuses), ``observability`` (logs, traces, metrics) and ``cli``.
"""

from cleveragents.sidecar.config import (
    ClientConfig,
    Policy,
    ProfileConfig,
    SidecarConfig,
    load_config,
)
from cleveragents.sidecar.errors import ConfigError, SidecarError
from cleveragents.sidecar.observability.logs import configure_logging
from cleveragents.sidecar.transport.server import Sidecar

__all__ = [
    "ClientConfig",
    "ConfigError",
    "Policy",
    "ProfileConfig",
    "Sidecar",
    "SidecarConfig",
    "SidecarError",
    "configure_logging",
    "load_config",
]

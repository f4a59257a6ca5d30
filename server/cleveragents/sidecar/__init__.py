"""The gRPC sidecar: serves ``cleveragents.toolruntime.v1.ToolRuntimeService``."""

from cleveragents.sidecar.config import ProfileConfig, SidecarConfig, load_config
from cleveragents.sidecar.errors import ConfigError, SidecarError
from cleveragents.sidecar.logs import configure_logging
from cleveragents.sidecar.server import Sidecar

__all__ = [
    "ConfigError",
    "ProfileConfig",
    "Sidecar",
    "SidecarConfig",
    "SidecarError",
    "configure_logging",
    "load_config",
]

"""The gRPC sidecar: serves ``cleveragents.toolruntime.v1.ToolRuntimeService``.

The public surface is ``__all__`` (a test pins it). Inside, each room holds one thing:
``transport`` (the gRPC server and its RPCs, the only part that touches protobuf),
``assembly`` (a request becomes a run), ``runs`` (runs, their logs, the manager and the
stores), ``hosted`` (tools and an LLM a Session's client hosts), ``config``, ``llm_profiles``,
``tool_sources`` and ``builtin_tools``, ``approvals``, ``status`` (exceptions to gRPC
statuses), ``observability`` (logs, traces, metrics) and ``cli``. The public names are
imported when first used (see ``_HOMES``).
"""

from __future__ import annotations

import importlib

#: ``typing.TYPE_CHECKING``, without importing ``typing`` (which ``--version`` need not wait
#: for): type checkers take any name ``TYPE_CHECKING`` as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

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

#: Where each public name lives. They are imported on first use, not with the package: the
#: console script's ``--version`` (in ``cli``, inside this package) must not load the server.
_HOMES = {
    "ClientConfig": "cleveragents.sidecar.config",
    "Policy": "cleveragents.sidecar.config",
    "ProfileConfig": "cleveragents.sidecar.config",
    "SidecarConfig": "cleveragents.sidecar.config",
    "load_config": "cleveragents.sidecar.config",
    "ConfigError": "cleveragents.sidecar.errors",
    "SidecarError": "cleveragents.sidecar.errors",
    "configure_logging": "cleveragents.sidecar.observability.logs",
    "Sidecar": "cleveragents.sidecar.transport.server",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value

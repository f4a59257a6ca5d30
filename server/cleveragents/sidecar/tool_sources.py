"""Where the sidecar's own tools come from: the built-in ones, the sandboxed file tools, and
the ``ToolRegistry`` objects of configured ``tool_modules``."""

from __future__ import annotations

import importlib

from cleveragents.sandbox import file_tools
from cleveragents.sidecar.builtin_tools import builtin_registry
from cleveragents.sidecar.config import SidecarConfig
from cleveragents.sidecar.errors import ConfigError
from cleveragents.tool import ToolRegistry

__all__ = ["default_registry", "load_tool_module"]


def default_registry(config: SidecarConfig) -> ToolRegistry:
    """The built-in and file tools (unless disabled) and those of the configured modules."""
    registry = builtin_registry() if config.builtin_tools else ToolRegistry()
    if config.file_tools:
        registry.include(file_tools())
    for reference in config.tool_modules:
        try:
            registry.include(load_tool_module(reference))
        except ValueError as exc:
            raise ConfigError(f"tool module {reference!r}: {exc}") from None
    return registry


def load_tool_module(reference: str) -> ToolRegistry:
    """The ``ToolRegistry`` named by ``module:attribute`` (attribute defaults to ``registry``)."""
    module_name, _, attribute = reference.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"tool module {reference!r}: {exc}") from None
    registry = getattr(module, attribute or "registry", None)
    if not isinstance(registry, ToolRegistry):
        raise ConfigError(f"tool module {reference!r} does not name a ToolRegistry")
    return registry

"""Where the sidecar's own tools come from: the built-in ones, the sandboxed file tools, and
the ``ToolRegistry`` objects of configured ``tool_modules``."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence

from cleveragents.sidecar.builtin_tools import builtin_registry
from cleveragents.sidecar.config import SidecarConfig
from cleveragents.sidecar.errors import ConfigError
from cleveragents.tool import ToolRegistry

__all__ = ["default_registry", "load_tool_module"]


def default_registry(config: SidecarConfig) -> ToolRegistry:
    """The built-in and file tools (unless disabled) and those of the configured modules."""
    registry = builtin_registry() if config.builtin_tools else ToolRegistry()
    if config.file_tools:  # the sandbox (and RE2, for search_files) only when they are served
        from cleveragents.sandbox import file_tools

        registry.include(file_tools())
    for reference in config.tool_modules:
        try:
            registry.include(load_tool_module(reference, config.python_path))
        except ConfigError:
            raise
        except ValueError as exc:  # a name clash between registries
            raise ConfigError(f"tool module {reference!r}: {exc}") from None
    return registry


def load_tool_module(reference: str, python_path: Sequence[str] = ()) -> ToolRegistry:
    """The ``ToolRegistry`` named by ``module:attribute`` (attribute defaults to ``registry``).

    The module is looked up in ``python_path``, then the working directory, then ``sys.path``
    (the directories stay on ``sys.path``: the module's own imports need them later too).
    """
    module_name, _, attribute = reference.partition(":")
    # Once each: the config file's directory is often the working directory too.
    searched = list(dict.fromkeys(os.path.abspath(p) for p in (*python_path, os.getcwd())))
    for directory in reversed(searched):
        if directory not in sys.path:
            sys.path.insert(0, directory)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"tool module {reference!r}: {exc}; looked in {', '.join(searched)} and sys.path "
            "(add the directory that holds the package to python_path, or to PYTHONPATH)"
        ) from None
    attribute = attribute or "registry"
    registry = getattr(module, attribute, None)
    if isinstance(registry, ToolRegistry):
        return registry
    where = f"module {module_name!r} ({getattr(module, '__file__', None) or 'no file'})"
    if registry is None:
        found = sorted(n for n, v in vars(module).items() if isinstance(v, ToolRegistry))
        has = f"its ToolRegistry objects: {', '.join(found)}" if found else "it has no ToolRegistry"
        default = "" if ":" in reference else " (the attribute when none is given)"
        raise ConfigError(
            f"tool module {reference!r}: {where} has no attribute {attribute!r}{default}; "
            f"{has}; name one as 'module:attribute'"
        )
    raise ConfigError(
        f"tool module {reference!r}: {module_name}.{attribute} is a {type(registry).__name__}, "
        f"not a ToolRegistry ({where})"
    )

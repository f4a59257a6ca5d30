"""Sandboxed file tools: nothing they do leaves the run's ``sandbox_root``."""

from cleveragents.sandbox.paths import Sandbox
from cleveragents.sandbox.tools import file_tools

__all__ = ["Sandbox", "file_tools"]

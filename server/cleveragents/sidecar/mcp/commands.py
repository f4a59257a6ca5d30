"""Where a stdio MCP server's command is found: on ``PATH``, then in the sidecar's own
environment.

A bare ``command`` (``mcp-server-time``) is looked up on the ``PATH`` the server is given (its
``env`` may set one), then in the scripts directory of the Python environment the sidecar runs
from, where ``pip install`` beside the sidecar puts such commands: a sidecar started as
``.venv/bin/cleveragents-sidecar`` without ``.venv/bin`` on ``PATH`` still finds them. A
command with a ``/`` is a path, used as it is (the config made a relative one absolute, from
its own directory).
"""

from __future__ import annotations

import os
import shutil
import sysconfig

__all__ = ["CommandNotFoundError", "locate_command"]


class CommandNotFoundError(Exception):
    """The command is in none of the places looked in; the message names them."""


def locate_command(command: str, path: str | None = None) -> str:
    """The executable ``command`` names: ``path`` (a ``PATH`` value; ``None``: this
    process's), then the sidecar's own scripts directory."""
    if "/" in command:
        return command
    path = os.environ.get("PATH", os.defpath) if path is None else path
    if found := shutil.which(command, path=path):
        return found
    own = sysconfig.get_path("scripts")
    if found := shutil.which(command, path=own):
        return found
    raise CommandNotFoundError(
        f"{command!r} is not on PATH ({path}) nor in the sidecar's own environment ({own}): "
        "install it into one of them, or give the command's absolute path"
    )

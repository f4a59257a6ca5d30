"""The installed sidecar's version, read without importing anything of the sidecar: what
``--version`` prints and the ready announcement carries.

``importlib.metadata`` would take longer than the rest of ``--version`` together (it imports
the ``email`` package to parse the metadata); the version is in the name of the installed
distribution's ``.dist-info`` directory (``cleveragents_sidecar-0.1.0.dist-info``, as the
packaging specifications name it), so that is looked for first, on ``sys.path``.
"""

from __future__ import annotations

import os
import sys

__all__ = ["version"]

_PREFIX, _SUFFIX = "cleveragents_sidecar-", ".dist-info"
_found: list[str] = []  # once looked up (functools.cache would import collections)


def version() -> str:
    """The version of the installed ``cleveragents-sidecar`` distribution (``unknown`` when
    run from a source tree that was never installed)."""
    if not _found:
        _found.append(_look_up())
    return _found[0]


def _look_up() -> str:
    for directory in sys.path:
        try:
            names = os.listdir(directory or ".")
        except OSError:
            continue
        for name in names:
            if name.startswith(_PREFIX) and name.endswith(_SUFFIX):
                return name[len(_PREFIX) : -len(_SUFFIX)]
    import importlib.metadata  # an installation laid out otherwise (a zip, an egg)

    try:
        return importlib.metadata.version("cleveragents-sidecar")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"

"""Regular expressions that run in time linear in their input (RE2): what a client or a model
sends as a pattern is compiled here, so that no pattern can backtrack for minutes. RE2 is
imported with the first pattern: a sidecar whose schemas and runs have none never loads it."""

from __future__ import annotations

from typing import Any

__all__ = ["compile_linear"]


def compile_linear(pattern: str | bytes, *, max_mem: int, never_nl: bool = False) -> Any:
    """``pattern`` compiled by RE2 within ``max_mem`` bytes (``never_nl``: no match spans a
    line); ``ValueError`` with RE2's reason for one it cannot run (backreferences, lookaround,
    too large)."""
    import re2

    options = re2.Options()
    options.log_errors = False
    options.never_nl = never_nl
    options.max_mem = max_mem
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        detail = exc.args[0] if exc.args else exc
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        raise ValueError(str(detail)) from None

"""What the commands write about a run: its strings made safe to print, and errors a person
can act on.

Everything a run carries (its id, prompt, the model's text and tool names, errors, reasons,
identities) may hold control characters: a model, a client or a tool could move the cursor,
retitle the window or hide text with them. ``inline`` shows every control character (C0, DEL,
C1) and every bidirectional-text control as an escape (``\\e``, ``\\x07``, ``\\u202e``);
``visible`` keeps newlines and tabs, for the model's own text. Long texts are cut only on a
terminal: a file or a pipe gets them whole.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the client is imported only by the commands that talk to a sidecar
    from cleveragents.client import SidecarRpcError

__all__ = ["TOKEN_ENV", "inline", "one_line", "problem", "visible"]

TOKEN_ENV = "CLEVERAGENTS_SIDECAR_TOKEN"
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_CONTROL = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}]")
_CONTROL_BUT_LINES = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}]")
_NAMED = {"\r": "\\r", "\n": "\\n", "\t": "\\t", "\x1b": "\\e"}


def _escape(match: re.Match[str]) -> str:
    char = match[0]
    if named := _NAMED.get(char):
        return named
    return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"


def inline(text: str) -> str:
    """``text`` with every control character shown as an escape: one line, as it was sent."""
    return _CONTROL.sub(_escape, text)


def visible(text: str) -> str:
    """``text`` with each control character but a newline and a tab shown as an escape: the
    model's text reaches the terminal as text, on its own lines."""
    return _CONTROL_BUT_LINES.sub(_escape, text)


def one_line(text: str, width: int | None) -> str:
    """``text`` on one line (runs of white space as one space), escaped, and cut to ``width``
    characters with an ellipsis (``None``: whole)."""
    text = inline(" ".join(text.split()))
    return text if width is None or len(text) <= width else text[: width - 1] + "…"


def problem(exc: SidecarRpcError) -> str:
    """An RPC's failure as a line to print: the sidecar's words, escaped, and for a missing or
    wrong token how this command sends one."""
    text = inline(str(exc))
    if exc.code.name == "UNAUTHENTICATED":
        text += f" (this command sends the token given with --token, or in ${TOKEN_ENV})"
    return text

"""``ToolSpec``: a tool's name, description, input schema and timeout."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RESERVED_INPUT_KEYS", "TOOL_NAME_PATTERN", "ToolSpec"]

#: Names providers accept for tools.
TOOL_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")

#: Input keys the runtime fills from the context; the model can never set them.
RESERVED_INPUT_KEYS = frozenset({"sandbox_root", "resource_bindings"})


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as the model sees it, plus its execution timeout in seconds (``None``: default).

    ``side_effects`` marks tools that change something (files, services, money): automation
    profiles can ask before running them, or forbid them. ``idempotent`` marks tools that may
    safely run twice with the same inputs: a call in flight when its sidecar stopped runs
    again when the run resumes (any other gets an "interrupted" record instead). ``origin``
    is where a sidecar's tool comes from, as ``ListTools`` says (``mcp:NAME``: that MCP
    server); empty otherwise.
    """

    name: str
    description: str = ""
    input_schema: Mapping[str, Any] = field(default_factory=lambda: {"type": "object"})
    timeout_s: float | None = None
    side_effects: bool = False
    idempotent: bool = False
    origin: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not TOOL_NAME_PATTERN.fullmatch(self.name):
            raise ValueError(
                f"invalid tool name {self.name!r}: use 1-64 characters from a-z, A-Z, 0-9, _ and -"
            )
        if not isinstance(self.input_schema, Mapping):
            raise TypeError(f"tool {self.name!r}: input_schema must be a JSON Schema object")
        if (kind := self.input_schema.get("type", "object")) != "object":
            raise ValueError(
                f'tool {self.name!r}: input_schema must describe an object ("type": "object"), '
                f'not "type": {json.dumps(kind)}'
            )
        if self.timeout_s is not None and not (
            math.isfinite(self.timeout_s) and self.timeout_s > 0
        ):
            raise ValueError(f"tool {self.name!r}: timeout_s must be a positive number of seconds")

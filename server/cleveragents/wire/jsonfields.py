"""JSON values in protobuf string fields: compact text out, parsed objects in.

Every JSON value the API carries (tool inputs and outputs, schemas, context objects) travels as
UTF-8 JSON text. Parse failures raise ``ValueError`` naming the field, which the sidecar maps
to ``INVALID_ARGUMENT``.
"""

from __future__ import annotations

import json
from typing import Any

from cleveragents.tool import jsontext

__all__ = ["dumps", "parse_json", "parse_json_object"]

_encode = jsontext.Encoder(separators=(",", ":"))


def dumps(value: Any) -> str:
    """Compact JSON text, UTF-8 kept as is."""
    if type(value) is dict and not value:  # no arguments, or an empty output: no encoder
        return "{}"
    return _encode(value)


def parse_json(text: str, field: str) -> Any:
    """Parse JSON text from a request field; ``ValueError`` names the field on failure."""
    if text == "{}":  # an empty output, as a no-op tool answers: no parser
        return {}
    try:
        return jsontext.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{field} is not valid JSON ({exc.msg} at position {exc.pos})") from None
    except RecursionError:
        raise ValueError(f"{field} is nested too deeply") from None


def parse_json_object(text: str, field: str, *, empty: Any = None) -> dict[str, Any]:
    """Parse a field that must hold a JSON object; empty text gives ``empty`` (or ``{}``)."""
    if text == "{}":  # no arguments, or an empty output: common enough to skip the parser
        return {}
    if not text.strip():
        return dict(empty) if empty is not None else {}
    value = parse_json(text, field)
    if not isinstance(value, dict):
        raise ValueError(f"{field} must be a JSON object, got {type(value).__name__}")
    return value

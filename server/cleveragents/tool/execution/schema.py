"""Derive a tool's JSON Schema and description from a Python function's signature and
docstring, and a value's schema from a Python type (``schema_for_type``: what an output
schema given as a dataclass or a ``TypedDict`` becomes)."""

from __future__ import annotations

import dataclasses
import enum
import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from cleveragents.tool.spec import RESERVED_INPUT_KEYS

__all__ = ["describe_function", "schema_for_type"]

_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters|Params)\s*:\s*$")
_SECTION_HEADER = re.compile(r"^\s*[A-Z][A-Za-z ]*:\s*$")
_PARAM_LINE = re.compile(r"^\s*\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def describe_function(fn: Callable[..., Any]) -> tuple[str, dict[str, Any]]:
    """Return ``(description, input_schema)`` for ``fn``.

    The description is the docstring's text before any section; parameter descriptions come
    from a Google-style ``Args:`` section. Parameters named like context keys
    (``sandbox_root``, ``resource_bindings``) are filled by the runtime and left out.
    """
    summary, param_docs = _parse_docstring(inspect.getdoc(fn) or "")
    hints = get_type_hints(fn, include_extras=True)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or name in RESERVED_INPUT_KEYS:
            continue
        annotation = hints.get(name, Any)
        prop = _schema_for(annotation)
        if name in param_docs and "description" not in prop:
            prop["description"] = param_docs[name]
        if param.default is inspect.Parameter.empty:
            required.append(name)
        elif _is_json_literal(param.default):
            prop["default"] = param.default
        properties[name] = prop
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    schema["additionalProperties"] = False
    return summary, schema


def schema_for_type(tp: Any) -> dict[str, Any]:
    """The JSON Schema of values of ``tp``: scalars, ``Literal``, enums, unions, lists,
    tuples, dicts, ``TypedDict``s and dataclasses (an object of its fields, those without a
    default required, no others allowed), nested as the type nests. ``TypeError`` for a
    dataclass that contains itself: give such a schema by hand."""
    return _schema_for(tp)


def _dataclass_schema(tp: type[Any], seen: frozenset[type[Any]]) -> dict[str, Any]:
    if tp in seen:
        raise TypeError(
            f"dataclass {tp.__name__} contains itself: a recursive output type needs a "
            "schema written by hand"
        )
    hints = get_type_hints(tp, include_extras=True)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for f in dataclasses.fields(tp):
        properties[f.name] = _schema_for(hints.get(f.name, Any), seen | {tp})
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.append(f.name)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    schema["additionalProperties"] = False
    return schema


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    summary_lines: list[str] = []
    params: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    param_indent = -1
    for line in doc.splitlines():
        indent = len(line) - len(line.lstrip())
        if _ARGS_HEADER.match(line):
            section, current, param_indent = "args", None, -1
        elif indent == 0 and _SECTION_HEADER.match(line):
            section, current = "other", None
        elif section is None:
            summary_lines.append(line)
        elif section == "args" and line.strip():
            match = _PARAM_LINE.match(line)
            if match and (param_indent < 0 or indent <= param_indent):
                param_indent = indent
                current = match.group(1)
                params[current] = match.group(2).strip()
            elif current is not None:
                params[current] = f"{params[current]} {line.strip()}".strip()
    return "\n".join(summary_lines).strip(), params


def _is_json_literal(value: object) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


_SCALARS: dict[type, str] = {str: "string", bool: "boolean", int: "integer", float: "number"}


def _schema_for(tp: Any, seen: frozenset[type[Any]] = frozenset()) -> dict[str, Any]:
    """Map a type annotation to a JSON Schema fragment; unknown types accept anything.
    ``seen`` holds the dataclasses being described, to refuse one that contains itself."""
    if tp is Any or tp is object:
        return {}
    if tp is type(None):
        return {"type": "null"}
    if tp in _SCALARS:
        return {"type": _SCALARS[tp]}
    origin = get_origin(tp)
    args = get_args(tp)
    if origin is typing.Annotated:
        inner = _schema_for(args[0], seen)
        for extra in args[1:]:
            if isinstance(extra, str):
                inner["description"] = extra
        return inner
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (Union, types.UnionType):
        options = [_schema_for(arg, seen) for arg in args]
        return options[0] if len(options) == 1 else {"anyOf": options}
    if inspect.isclass(tp) and issubclass(tp, enum.Enum):
        return {"enum": [member.value for member in tp]}
    if tp in (list, tuple, set, frozenset) or origin in (list, set, frozenset, Sequence):
        schema: dict[str, Any] = {"type": "array"}
        if args:
            schema["items"] = _schema_for(args[0], seen)
        return schema
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": _schema_for(args[0], seen)}
        return {
            "type": "array",
            "prefixItems": [_schema_for(a, seen) for a in args],
            "minItems": len(args),
            "maxItems": len(args),
        }
    if tp is dict or origin in (dict, Mapping):
        schema = {"type": "object"}
        if len(args) == 2:
            schema["additionalProperties"] = _schema_for(args[1], seen)
        return schema
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _dataclass_schema(tp, seen)
    if typing.is_typeddict(tp):
        hints = get_type_hints(tp, include_extras=True)
        required_keys = getattr(tp, "__required_keys__", frozenset(hints))
        return {
            "type": "object",
            "properties": {key: _schema_for(value, seen) for key, value in hints.items()},
            "required": [key for key in hints if key in required_keys],
        }
    return {}

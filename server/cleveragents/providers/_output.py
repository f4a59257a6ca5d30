"""How each provider API is asked for a structured answer (a run's output schema).

- OpenAI Chat Completions: ``response_format: {"type": "json_schema", "json_schema": {name,
  description, schema, strict}}``; Responses API: ``text.format: {"type": "json_schema", name,
  description, schema, strict}``. ``strict`` (constrained decoding) is set when the schema
  meets OpenAI's strict-mode rules (:func:`strict_problem`); when it does not, the schema goes
  without ``strict`` and the sidecar logs which rule it breaks, since a strict request with
  such a schema is refused by the API (HTTP 400).
- Anthropic Messages, on a model that has structured outputs: ``output_config.format:
  {"type": "json_schema", schema}``, the schema adjusted as Anthropic's own SDKs do
  (:func:`anthropic_schema`: ``additionalProperties: false`` on every object, the numeric,
  string-length and array-size constraints it does not take left out). Otherwise (an older
  model, a recursive schema, or ``structured_output = "tool"``) a forced answer tool whose
  input is the schema (:func:`answer_tool`), whose input becomes the answer's text.

Whatever the model was told, the loop validates the answer against the run's whole schema, so
a constraint left out here is still enforced: an answer that breaks it goes back to the model.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from cleveragents.tool import OutputSchema

__all__ = [
    "ANSWER_TOOL",
    "answer_tool",
    "answer_tool_name",
    "anthropic_has_structured_outputs",
    "anthropic_schema",
    "chat_response_format",
    "responses_text_format",
    "strict_problem",
]

#: The forced answer tool's name, unless a run's own tool has it.
ANSWER_TOOL = "answer"

#: Keywords OpenAI's strict mode takes (its "supported schemas"); any other breaks it.
_STRICT_KEYWORDS = frozenset(
    {
        "type", "properties", "required", "additionalProperties", "items", "enum", "const",
        "anyOf", "$ref", "$defs", "definitions", "description", "title", "pattern", "format",
        "multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum", "minItems",
        "maxItems", "$schema", "$comment",
    }
)  # fmt: skip
#: OpenAI's limits on a strict schema.
_STRICT_MAX_DEPTH = 10
_STRICT_MAX_PROPERTIES = 5000
_STRICT_MAX_ENUM_VALUES = 1000
#: Constraints Anthropic's structured outputs do not take (its SDKs move them out).
_ANTHROPIC_DROPPED = frozenset(
    {
        "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
        "minLength", "maxLength", "maxItems", "uniqueItems", "minProperties", "maxProperties",
    }
)  # fmt: skip
_CLAUDE_VERSION = re.compile(r"claude-(?:opus|sonnet|haiku)-(\d+)(?:-(\d{1,2}))?(?:-|$)")


def chat_response_format(output: OutputSchema, strict: bool) -> dict[str, Any]:
    """The Chat Completions ``response_format`` asking for ``output``."""
    spec: dict[str, Any] = {"name": output.name}
    if output.description:
        spec["description"] = output.description
    spec["schema"] = dict(output.schema)
    spec["strict"] = strict
    return {"type": "json_schema", "json_schema": spec}


def responses_text_format(output: OutputSchema, strict: bool) -> dict[str, Any]:
    """The Responses API ``text.format`` asking for ``output``."""
    spec: dict[str, Any] = {"type": "json_schema", "name": output.name}
    if output.description:
        spec["description"] = output.description
    spec["schema"] = dict(output.schema)
    spec["strict"] = strict
    return spec


def strict_problem(schema: Mapping[str, Any]) -> str | None:
    """Which of OpenAI's strict-mode rules ``schema`` breaks (``None``: it meets them all):
    every object lists all its properties as required and sets ``additionalProperties:
    false``, only the supported keywords appear, the root is an object, objects nest at most
    10 deep, with at most 5000 properties and 1000 enum values in all."""
    if schema.get("type") != "object" or "anyOf" in schema:
        return "the root must be an object schema, not a union"
    properties = enums = 0
    for path, node, depth in _nodes(schema):
        unknown = sorted(set(node) - _STRICT_KEYWORDS)
        if unknown:
            return f"{_where(path)} uses {unknown[0]!r}, which strict mode does not take"
        if depth > _STRICT_MAX_DEPTH:
            return f"{_where(path)} nests objects deeper than {_STRICT_MAX_DEPTH} levels"
        enums += len(node["enum"]) if isinstance(node.get("enum"), list) else 0
        if not _is_object(node):
            continue
        names = node.get("properties") or {}
        properties += len(names)
        if node.get("additionalProperties") is not False:
            return f"{_where(path)} does not set additionalProperties to false"
        missing = [n for n in names if n not in (node.get("required") or ())]
        if missing:
            return (
                f"{_where(path)} does not list {missing[0]!r} as required (strict mode wants "
                "every property required: make an optional one nullable instead)"
            )
    if properties > _STRICT_MAX_PROPERTIES:
        return f"it has {properties} properties, more than strict mode's {_STRICT_MAX_PROPERTIES}"
    if enums > _STRICT_MAX_ENUM_VALUES:
        return f"it has {enums} enum values, more than strict mode's {_STRICT_MAX_ENUM_VALUES}"
    return None


def anthropic_has_structured_outputs(model: str) -> bool:
    """Whether an Anthropic model takes ``output_config.format``: Claude Opus, Sonnet and
    Haiku from 4.5 on."""
    match = _CLAUDE_VERSION.search(model)
    if match is None:
        return False
    major, minor = int(match.group(1)), int(match.group(2) or 0)
    return (major, minor) >= (4, 5)


def anthropic_schema(schema: Mapping[str, Any]) -> dict[str, Any] | None:
    """``schema`` as Anthropic's structured outputs take it, or ``None`` when they cannot:
    a recursive schema (a reference back to the root, or a definition that reaches itself),
    or an object with open keys (a map: ``additionalProperties`` other than false,
    ``patternProperties``), which would have to be closed."""
    if _recursive(schema):
        return None
    for _, node, _ in _nodes(schema):
        extra = node.get("additionalProperties", False)
        if "patternProperties" in node or (_is_object(node) and "properties" not in node):
            return None
        if extra is not False and "additionalProperties" in node:
            return None
    relaxed: dict[str, Any] = _relaxed(schema)
    return relaxed


def answer_tool_name(tools: Sequence[Mapping[str, Any]]) -> str:
    """The answer tool's name: ``answer``, or the first of ``answer_1``, ``answer_2``… that
    no tool of the run has."""
    taken = {str(t.get("name", "")) for t in tools}
    name, number = ANSWER_TOOL, 0
    while name in taken:
        number += 1
        name = f"{ANSWER_TOOL}_{number}"
    return name


def answer_tool(output: OutputSchema, name: str) -> dict[str, Any]:
    """The Anthropic tool whose input is the run's answer."""
    about = f" The answer: {output.description}" if output.description else ""
    return {
        "name": name,
        "description": (
            f"Give your final answer ({output.name}): call this tool once, when you are done, "
            f"with the answer as its input.{about}"
        ),
        "input_schema": dict(output.schema),
    }


# -- walking a schema ---------------------------------------------------------------------------


def _nodes(schema: Any) -> Iterator[tuple[tuple[str, ...], dict[str, Any], int]]:
    """Every subschema with its path and how many objects nest down to it (the root: 1)."""
    stack: list[tuple[tuple[str, ...], Any, int]] = [((), schema, 1)]
    while stack:
        path, node, depth = stack.pop()
        if not isinstance(node, dict):
            continue
        yield path, node, depth
        inner = depth + 1 if _is_object(node) else depth
        for name, child in (node.get("properties") or {}).items():
            stack.append(((*path, "properties", name), child, inner))
        for key in ("$defs", "definitions"):
            for name, child in (node.get(key) or {}).items():
                stack.append(((*path, key, name), child, depth))
        if isinstance(node.get("items"), dict):
            stack.append(((*path, "items"), node["items"], depth))
        if isinstance(node.get("additionalProperties"), dict):
            stack.append(((*path, "additionalProperties"), node["additionalProperties"], inner))
        for key in ("anyOf", "allOf", "oneOf", "prefixItems"):
            for index, child in enumerate(node.get(key) or ()):
                stack.append(((*path, key, str(index)), child, depth))


def _is_object(node: Mapping[str, Any]) -> bool:
    kind = node.get("type")
    return kind == "object" or (isinstance(kind, list) and "object" in kind)


def _where(path: tuple[str, ...]) -> str:
    return "the root" if not path else "'/" + "/".join(path) + "'"


def _recursive(schema: Mapping[str, Any]) -> bool:
    """Whether a reference leads back into its own ancestry (the root, or a definition that
    refers to itself through others)."""
    defs: dict[str, Any] = {}
    for key in ("$defs", "definitions"):
        for name, child in (schema.get(key) or {}).items():
            defs[f"#/{key}/{name}"] = child
    graph: dict[str, set[str]] = {"#": _refs(schema, skip_defs=True)}
    for ref, child in defs.items():
        graph[ref] = _refs(child, skip_defs=False)
    # A cycle in the graph of references (the root is "#").
    state: dict[str, int] = {}

    def visit(node: str) -> bool:
        state[node] = 1
        for target in graph.get(node, ()):
            if state.get(target) == 1 or (state.get(target) is None and visit(target)):
                return True
        state[node] = 2
        return False

    return any(state.get(node) is None and visit(node) for node in graph)


def _refs(node: Any, *, skip_defs: bool) -> set[str]:
    found: set[str] = set()
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            ref = item.get("$ref")
            if isinstance(ref, str):
                found.add(ref if ref != "#/" else "#")
            for key, value in item.items():
                if not (skip_defs and item is node and key in ("$defs", "definitions")):
                    stack.append(value)
        elif isinstance(item, list):
            stack.extend(item)
    return found


def _relaxed(node: Any) -> Any:
    """A copy of ``node`` without the constraints Anthropic does not take, every object
    closed (``additionalProperties: false``) and ``minItems`` above 1 lowered to 1."""
    if isinstance(node, list):
        return [_relaxed(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _ANTHROPIC_DROPPED:
            continue
        if key in ("properties", "$defs", "definitions") and isinstance(value, dict):
            out[key] = {name: _relaxed(child) for name, child in value.items()}
        elif key == "minItems" and isinstance(value, int) and value > 1:
            out[key] = 1
        elif key in ("enum", "const", "default", "examples"):
            out[key] = value
        else:
            out[key] = _relaxed(value)
    if _is_object(out):
        out["additionalProperties"] = False
    return out

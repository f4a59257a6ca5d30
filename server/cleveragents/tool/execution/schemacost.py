"""What a JSON Schema may cost before it is compiled: nesting depth, references, expansion.

A schema that is small as text can be huge to validate: ``$ref``/``allOf`` chains that double
at each level make a 2 KB schema apply 2^31 subschemas to one value, and the validator
(jsonschema_rs, which holds the GIL while it works) then stalls every other run on the event
loop. So a schema from outside is measured first, statically, in time linear in its size:

- ``depth``: how deeply its objects and arrays nest;
- ``$ref``, ``$dynamicRef`` and ``$recursiveRef`` must point inside the schema (a JSON pointer
  ``#/...``, a ``#anchor``, or the root's own ``$id``): the validator would otherwise fetch a
  URL over the network, while every run waits;
- ``pattern`` and ``patternProperties`` regular expressions must be RE2 syntax (no lookaround,
  no backreferences): the validator's regex engine backtracks through those, up to about
  50 ms for each string it checks, and then gives up;
- ``expansion``: how many schema nodes validating one value can visit, counted on the
  reference graph as if every reference were copied in place (shared definitions count once
  per use, which is what makes doubling visible). A reference back into its own ancestry
  (a recursive schema, such as a tree) counts once: its cost follows the value's depth, which
  the value's size bounds.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from cleveragents.tool.execution.linear_regex import compile_linear

__all__ = ["SchemaCost", "SchemaCostError", "measure_schema"]

_REF_KEYS = ("$ref", "$dynamicRef", "$recursiveRef")
#: Keywords whose value maps names (not keywords) to subschemas.
_NAME_MAPS = frozenset(
    {"properties", "patternProperties", "dependentSchemas", "dependencies", "$defs", "definitions"}
)
#: Where definitions live: applied to a value only through a reference to them.
_DEFINITIONS = frozenset({"$defs", "definitions"})
_ANCHOR_KEYS = ("$anchor", "$dynamicAnchor")
#: RE2's memory for one pattern: far more than any sane pattern needs.
_PATTERN_MAX_MEM = 8 << 20


class SchemaCostError(ValueError):
    """A schema over a cost limit, or with a reference the validator would have to fetch;
    ``limit`` names the limit (``None`` for a bad reference)."""

    def __init__(self, message: str, limit: str | None = None) -> None:
        super().__init__(message)
        self.limit = limit


@dataclass(frozen=True, slots=True)
class SchemaCost:
    """A schema's measured cost: its nesting depth and its expansion (see the module)."""

    depth: int
    expansion: int


def measure_schema(schema: Mapping[str, Any], *, max_depth: int, max_expansion: int) -> SchemaCost:
    """Measure ``schema``; ``SchemaCostError`` if it nests deeper than ``max_depth``, expands
    to more than ``max_expansion`` nodes, or refers outside itself.

    The walk stops as soon as a limit is passed, so measuring costs at most the schema's size
    plus ``max_expansion`` steps.
    """
    depth, anchors, referring = _walk(schema, max_depth)
    resolver = _Resolver(schema, anchors)
    for node in referring:  # every reference, used or not: the validator resolves them all
        resolver.targets(node)
    expansion = _expansion(schema, resolver, max_expansion)
    if expansion > max_expansion:
        raise SchemaCostError(
            f"expands to more than {max_expansion} subschemas when its references are followed",
            "max_schema_expansion",
        )
    return SchemaCost(depth, expansion)


def _walk(schema: Any, max_depth: int) -> tuple[int, dict[str, list[Any]], list[Any]]:
    """The nesting depth (``SchemaCostError`` past ``max_depth``), the named anchors, and the
    objects holding a reference."""
    anchors: dict[str, list[Any]] = {}
    referring: list[Any] = []
    deepest = 0
    stack: list[tuple[Any, int]] = [(schema, 1)]
    while stack:
        node, level = stack.pop()
        if level > max_depth:
            raise SchemaCostError(
                f"nests more than {max_depth} levels deep",
                "max_schema_depth",
            )
        deepest = max(deepest, level)
        if isinstance(node, dict):
            for key in _ANCHOR_KEYS:
                if isinstance(name := node.get(key), str):
                    anchors.setdefault(name, []).append(node)
            if any(isinstance(node.get(key), str) for key in _REF_KEYS):
                referring.append(node)
            if isinstance(pattern := node.get("pattern"), str):
                _check_pattern(pattern)
            if isinstance(patterns := node.get("patternProperties"), dict):
                for pattern in patterns:
                    _check_pattern(pattern)
            if node is not schema and isinstance(node.get("$id"), str):
                raise SchemaCostError(
                    f"has an embedded resource ($id {_short(node['$id'])!r}); only the root "
                    "may have an $id"
                )
        for child in _containers(node):
            stack.append((child, level + 1))
    return deepest, anchors, referring


def _check_pattern(pattern: str) -> None:
    """Refuse a regular expression that only a backtracking engine can run."""
    try:
        compile_linear(pattern, max_mem=_PATTERN_MAX_MEM)
    except ValueError as exc:
        raise SchemaCostError(
            f"has a pattern {_short(pattern)!r} that is not RE2 syntax ({exc}); patterns "
            "with lookaround or backreferences make the validator backtrack, up to 50 ms per "
            "string"
        ) from None


def _containers(node: Any) -> Iterator[Any]:
    values = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
    return (v for v in values if isinstance(v, dict | list))


class _Resolver:
    """Finds what a reference points at inside the schema, or says why it cannot."""

    def __init__(self, root: Mapping[str, Any], anchors: dict[str, list[Any]]) -> None:
        self.root = root
        self.anchors = anchors
        own_id = root.get("$id")
        self.base = own_id.split("#", 1)[0] if isinstance(own_id, str) else None

    def targets(self, node: dict[str, Any]) -> list[Any]:
        """Every node the references of ``node`` may lead to."""
        found: list[Any] = []
        for key in _REF_KEYS:
            ref = node.get(key)
            if isinstance(ref, str):
                found.extend(self._resolve(key, ref))
        return found

    def _resolve(self, key: str, ref: str) -> list[Any]:
        base, _, fragment = ref.partition("#")
        if base and base != self.base:
            raise SchemaCostError(
                f"has a {key} {_short(ref)!r} that points outside the schema; only references "
                "inside it ('#/$defs/...', '#anchor') are allowed"
            )
        fragment = urllib.parse.unquote(fragment)
        if not fragment:
            return [self.root]
        if not fragment.startswith("/"):
            named = self.anchors.get(fragment)
            if not named:
                raise SchemaCostError(f"has a {key} {_short(ref)!r} to an anchor it lacks")
            return named if key == "$dynamicRef" else named[:1]
        node: Any = self.root
        for part in fragment[1:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise SchemaCostError(f"has a {key} {_short(ref)!r} that points at nothing")
        return [node]


def _expansion(root: Any, resolver: _Resolver, cap: int) -> int:
    """Nodes visited with every reference followed, counted up to ``cap + 1`` at most.

    A depth-first walk with memoised totals: each node's total is itself plus its children's
    and its reference targets'; a node still on the walk's path (a cycle) adds one.
    """
    memo: dict[int, int] = {}
    on_path: set[int] = {id(root)}
    # Each frame: the node, an iterator over what it leads to, and its running total.
    stack: list[list[Any]] = [[root, _edges(root, False, resolver), 1]]
    while stack:
        frame = stack[-1]
        for child, names in frame[1]:
            key = id(child)
            if key in memo:
                frame[2] += memo[key]
            elif key in on_path:
                frame[2] += 1
            else:
                on_path.add(key)
                stack.append([child, _edges(child, names, resolver), 1])
                break
            if frame[2] > cap:
                return cap + 1
        else:
            stack.pop()
            on_path.discard(id(frame[0]))
            total: int = min(frame[2], cap + 1)
            memo[id(frame[0])] = total
            if not stack:
                return total
            stack[-1][2] += total
            if stack[-1][2] > cap:
                return cap + 1
    return 1  # pragma: no cover - the loop returns when the root is done


def _edges(node: Any, names: bool, resolver: _Resolver) -> Iterator[tuple[Any, bool]]:
    """What validating against ``node`` may visit, each with whether its keys are names (the
    value of ``properties`` and the like) rather than keywords. Definitions are left out:
    they are visited through the references to them."""
    if isinstance(node, list):
        yield from ((item, False) for item in node if isinstance(item, dict | list))
    elif isinstance(node, dict):
        for key, value in node.items():
            if isinstance(value, dict | list) and (names or key not in _DEFINITIONS):
                yield value, not names and key in _NAME_MAPS
        if not names:
            yield from ((target, False) for target in resolver.targets(node))


def _short(text: str) -> str:
    return text if len(text) <= 80 else text[:80] + "…"

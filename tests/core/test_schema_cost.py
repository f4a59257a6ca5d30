"""The static cost of a JSON Schema: depth, references kept inside it, and expansion."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from cleveragents.tool.execution.schemacost import SchemaCost, SchemaCostError, measure_schema

LIMITS = {"max_depth": 64, "max_expansion": 10_000}


def doubling(levels: int) -> dict[str, Any]:
    """Each definition is all of the previous one, twice: 2 KB of text at 31 levels."""
    defs: dict[str, Any] = {"a0": {"type": "string"}}
    for i in range(1, levels + 1):
        defs[f"a{i}"] = {"allOf": [{"$ref": f"#/$defs/a{i - 1}"}, {"$ref": f"#/$defs/a{i - 1}"}]}
    return {"type": "object", "properties": {"x": {"$ref": f"#/$defs/a{levels}"}}, "$defs": defs}


def test_a_plain_schema_costs_its_nodes() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}

    assert measure_schema(schema, **LIMITS) == SchemaCost(depth=3, expansion=4)


def test_a_shared_definition_counts_once_per_use() -> None:
    one = {"$defs": {"p": {"type": "object", "properties": {"q": {}}}}}
    uses = {f"f{i}": {"$ref": "#/$defs/p"} for i in range(5)}

    lone = measure_schema(one, **LIMITS).expansion
    used = measure_schema({**one, "properties": uses}, **LIMITS).expansion

    assert used > lone + 5 * 3  # each use brings the definition's three nodes along


def test_the_31_level_doubling_schema_is_refused_for_its_expansion() -> None:
    with pytest.raises(SchemaCostError, match="expands to more than 10000 subschemas") as caught:
        measure_schema(doubling(31), **LIMITS)
    assert caught.value.limit == "max_schema_expansion"


def test_expansion_grows_with_each_doubling_until_the_limit() -> None:
    costs = [measure_schema(doubling(n), **LIMITS).expansion for n in range(1, 11)]

    assert all(later > 1.9 * earlier for earlier, later in itertools.pairwise(costs))
    assert costs[-1] == 5119
    with pytest.raises(SchemaCostError):
        measure_schema(doubling(11), **LIMITS)


def test_a_recursive_schema_counts_its_cycle_once() -> None:
    tree = {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
            }
        },
        "$ref": "#/$defs/node",
    }

    assert measure_schema(tree, **LIMITS).expansion < 20
    assert measure_schema({"properties": {"self": {"$ref": "#"}}}, **LIMITS).expansion == 4


def test_a_long_reference_chain_is_measured_without_recursion() -> None:
    defs: dict[str, Any] = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(5000)}
    defs["d5000"] = {"type": "string"}

    cost = measure_schema({"$ref": "#/$defs/d0", "$defs": defs}, **LIMITS)

    assert cost.expansion == 5002  # the root, then each link of the chain once


def test_unused_definitions_cost_nothing_but_their_references_are_checked() -> None:
    unused = {"$defs": doubling(12)["$defs"]}

    assert measure_schema(unused, **LIMITS).expansion == 1
    with pytest.raises(SchemaCostError, match="points outside the schema"):
        measure_schema({"$defs": {"d": {"$ref": "https://example.com/x"}}}, **LIMITS)


def test_a_property_named_like_a_keyword_is_still_counted() -> None:
    hidden = {
        "properties": {"$defs": doubling(12)["properties"]["x"]},
        "$defs": doubling(12)["$defs"],
    }

    with pytest.raises(SchemaCostError, match="expands to more than"):
        measure_schema(hidden, **LIMITS)


def test_nesting_deeper_than_the_limit_is_refused() -> None:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(70):
        schema = {"items": schema}

    with pytest.raises(SchemaCostError, match="nests more than 64 levels deep") as caught:
        measure_schema(schema, **LIMITS)
    assert caught.value.limit == "max_schema_depth"


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        ({"$ref": "https://example.com/s.json"}, "points outside the schema"),
        ({"$ref": "other.json#/x"}, "points outside the schema"),
        ({"properties": {"a": {"$ref": "#/$defs/missing"}}}, "points at nothing"),
        ({"items": {"$ref": "#/items/7"}}, "points at nothing"),
        ({"$ref": "#there"}, "to an anchor it lacks"),
        ({"properties": {"a": {"$id": "https://x/y", "type": "string"}}}, "embedded resource"),
    ],
)
def test_a_reference_the_validator_would_fetch_or_miss_is_refused(
    schema: dict[str, Any], problem: str
) -> None:
    with pytest.raises(SchemaCostError, match=problem) as caught:
        measure_schema(schema, **LIMITS)
    assert caught.value.limit is None


def test_references_inside_the_schema_resolve() -> None:
    schema = {
        "$id": "https://example.com/tool.json",
        "$defs": {"a/b": {"type": "string"}, "n": {"$anchor": "name", "type": "integer"}},
        "properties": {
            "x": {"$ref": "#/$defs/a~1b"},
            "y": {"$ref": "#name"},
            "z": {"$ref": "https://example.com/tool.json#/$defs/n"},
            "w": {"$ref": "#/properties/x"},
        },
    }

    assert measure_schema(schema, **LIMITS).expansion > 8


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "pattern": "^(a|a)+(?=b)$"},
        {"items": {"pattern": "(?<!x)y"}},
        {"patternProperties": {"^(\\w+)\\1$": {}}},
        {"propertyNames": {"pattern": "^(?!admin)"}},
    ],
)
def test_a_pattern_only_a_backtracking_engine_runs_is_refused(schema: dict[str, Any]) -> None:
    with pytest.raises(SchemaCostError, match="that is not RE2 syntax") as caught:
        measure_schema(schema, **LIMITS)
    assert caught.value.limit is None


def test_patterns_in_re2_syntax_pass_and_a_property_named_pattern_is_a_schema() -> None:
    schema = {
        "properties": {"pattern": {"type": "string", "pattern": "^[a-z]{2,5}\\d+$"}},
        "patternProperties": {"^x-\\p{L}+$": {"type": "integer"}},
    }

    assert measure_schema(schema, **LIMITS).expansion == 5

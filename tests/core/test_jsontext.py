"""The hot-path JSON helpers give exactly what the stdlib gives: the same text, the same errors."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cleveragents.tool.jsontext import Encoder, loads

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=12,
)
spaced = Encoder()
compact = Encoder(separators=(",", ":"))


def _outcome(parse: Any, text: str) -> tuple[Any, ...]:
    try:
        value = parse(text)
    except json.JSONDecodeError as exc:
        return ("error", exc.msg, exc.pos)
    return ("value", json.dumps(value))


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_encoding_matches_json_dumps(value: Any) -> None:
    assert spaced(value) == json.dumps(value, ensure_ascii=False)
    assert compact(value) == json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@settings(max_examples=300, deadline=None)
@given(st.one_of(json_values.map(json.dumps), st.text(max_size=12)))
def test_parsing_matches_json_loads(text: str) -> None:
    assert _outcome(loads, text) == _outcome(json.loads, text)


@pytest.mark.parametrize("text", ["", "  ", " {} ", "{} x", "{", '{"a": }', "nul", "\n[1]\n"])
def test_parsing_edge_cases_match_json_loads(text: str) -> None:
    assert _outcome(loads, text) == _outcome(json.loads, text)


def test_a_failed_encoding_does_not_poison_the_next_one() -> None:
    loop: list[Any] = []
    loop.append(loop)
    for _ in range(2):  # a stale circular-reference marker would fail the second clean value
        with pytest.raises(ValueError, match="Circular reference"):
            spaced({"x": loop})
        assert spaced({"x": [1]}) == '{"x": [1]}'
    with pytest.raises(TypeError, match="not JSON serializable"):
        spaced({"x": {1, 2}})
    assert spaced({"x": [1]}) == '{"x": [1]}'


def test_the_same_object_twice_in_one_value_is_not_a_cycle() -> None:
    shared = {"k": 1}
    assert compact([shared, shared]) == '[{"k":1},{"k":1}]'

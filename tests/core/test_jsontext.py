"""The hot-path JSON helpers give what the stdlib gives for standard JSON (the same text, the
same errors) and refuse what is not standard JSON: NaN, infinities, huge numbers, lone
surrogates."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cleveragents.tool.jsontext import Encoder, loads

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
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
    assert spaced(value) == json.dumps(value, ensure_ascii=False, allow_nan=False)
    assert compact(value) == json.dumps(
        value, ensure_ascii=False, separators=(",", ":"), allow_nan=False
    )


@settings(max_examples=300, deadline=None)
@given(st.one_of(json_values.map(json.dumps), st.text(max_size=12)))
def test_parsing_matches_json_loads(text: str) -> None:
    expected = _outcome(json.loads, text)
    if expected[0] == "value" and not _standard(json.loads(text)):
        assert _outcome(loads, text)[0] == "error"  # NaN, Infinity or a lone surrogate
    else:
        assert _outcome(loads, text) == expected


def _standard(value: Any) -> bool:
    """Whether a value ``json.loads`` gave is standard JSON (no NaN, infinity, surrogate)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, str):
        return not any("\ud800" <= c <= "\udfff" for c in value)
    if isinstance(value, dict):
        return all(_standard(k) and _standard(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_standard(v) for v in value)
    return True


@pytest.mark.parametrize("text", ["", "  ", " {} ", "{} x", "{", '{"a": }', "nul", "\n[1]\n"])
def test_parsing_edge_cases_match_json_loads(text: str) -> None:
    assert _outcome(loads, text) == _outcome(json.loads, text)


@pytest.mark.parametrize(
    ("text", "message", "position"),
    [
        ("NaN", "NaN is not a JSON number", 0),
        ('{"a": [1, Infinity]}', "Infinity is not a JSON number", 10),
        ('{"a": -Infinity}', "-Infinity is not a JSON number", 6),
        ('{"n": 1e400}', "the number 1e400 is out of range for a 64-bit float", 6),
        ('{"n": ' + "7" * 5000 + "}", "an integer has more than 4300 digits", 6),
        ('{"s": "\\ud83d"}', "a string holds a lone surrogate \\ud83d", 7),
        ('["ok", "\\ude42 tail"]', "a string holds a lone surrogate \\ude42", 8),
        ('{"\\ud800": 1}', "a string holds a lone surrogate \\ud800", 2),
    ],
)
def test_what_is_not_standard_json_is_a_decode_error_saying_what_and_where(
    text: str, message: str, position: int
) -> None:
    with pytest.raises(json.JSONDecodeError) as caught:
        loads(text)
    assert caught.value.msg.startswith(message)
    assert caught.value.pos == position


def test_surrogate_pairs_and_escaped_backslashes_are_standard_json() -> None:
    assert loads('"\\ud83d\\ude42"') == "\U0001f642"
    assert loads('"\\\\ud83d"') == "\\ud83d"  # a backslash, then the letters "ud83d"
    assert loads("[" + "7" * 4300 + "]") == [int("7" * 4300)]


def test_bytes_are_parsed_as_utf8_and_refused_otherwise() -> None:
    assert loads(b'{"a": "\xc3\xa9"}') == {"a": "\u00e9"}
    with pytest.raises(json.JSONDecodeError, match="not UTF-8"):
        loads(b'{"a": "\xff"}')


@pytest.mark.parametrize("value", [float("nan"), float("inf"), {"x": [float("-inf")]}])
def test_encoding_refuses_numbers_json_has_no_text_for(value: Any) -> None:
    with pytest.raises(ValueError, match="not JSON compliant"):
        spaced(value)
    assert spaced({"x": 1.5}) == '{"x": 1.5}'  # and the encoder still works


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

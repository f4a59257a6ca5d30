"""A record's output text: the forms ``json.dumps`` writes, made once, and the copy it keeps."""

from __future__ import annotations

import dataclasses
import enum
import json
import types
from typing import Any

import pytest

from cleveragents.tool import (
    ErrorKind,
    ToolCall,
    ToolCallRecord,
    ToolRegistry,
    ToolRunner,
    ToolSpec,
)

OUTPUTS = [
    {},
    {"result": ""},
    {"result": 'a, b: "c" \n\t\\ \u2028 é ✓ 🙂', "n": -0.0, "big": 10**40, "f": 1e-7, "t": True},
    {"é, ✓": None, "": 1.5, "k: v": False},
    {"rows": [{"a": [1, {"b": "x, y: z"}]}, []], "s": "top", "n": 3},
    {"deep": [[[["x"]]]], "e": {}},
]


def _forms(value: Any) -> tuple[str, str]:
    return (
        json.dumps(value, ensure_ascii=False),
        json.dumps(value, ensure_ascii=False, separators=(",", ":")),
    )


async def _record_of(output: Any) -> ToolCallRecord:
    registry = ToolRegistry()
    registry.register(ToolSpec("give", "", {"type": "object"}), lambda inputs: output)
    return await ToolRunner(registry).run(ToolCall("c1", "give", {}), iteration=1)


@pytest.mark.parametrize("output", OUTPUTS)
async def test_a_records_texts_are_what_json_dumps_writes_in_either_form(output: Any) -> None:
    made = await _record_of(output)
    built = ToolCallRecord("give", {}, output, 0.0, True, None, 1)

    for record in (made, built):
        assert (record.output_json(), record.output_json_compact()) == _forms(output)
        assert record.output_json() is record.output_json()  # made once, kept


async def test_a_record_made_with_another_output_has_its_own_text() -> None:
    record = await _record_of({"result": "first"})
    record.output_json()

    other = dataclasses.replace(record, output={"result": "second"})

    assert (other.output_json(), other.output_json_compact()) == _forms({"result": "second"})
    assert other == dataclasses.replace(record, output={"result": "second"})


class Colour(enum.StrEnum):
    RED = "red"


@pytest.mark.parametrize(
    ("returned", "kept"),
    [
        ({"t": (1, (2, "x"))}, {"t": [1, [2, "x"]]}),
        (types.MappingProxyType({"a": {"b": 1}}), {"a": {"b": 1}}),
        ({"c": Colour.RED, "l": [Colour.RED]}, {"c": "red", "l": ["red"]}),
        ([1, "two"], {"result": [1, "two"]}),
        ("text", {"result": "text"}),
    ],
)
async def test_a_handlers_value_is_kept_as_a_plain_json_copy(returned: Any, kept: Any) -> None:
    record = await _record_of(returned)

    assert record.success, record.error
    assert record.output == kept
    assert json.dumps(record.output) == json.dumps(kept)
    assert (record.output_json(), record.output_json_compact()) == _forms(kept)


async def test_the_record_keeps_a_copy_the_tool_cannot_change_afterwards() -> None:
    returned: dict[str, Any] = {"rows": [{"a": 1}], "s": "x"}
    record = await _record_of(returned)

    returned["rows"][0]["a"] = 2
    returned["s"] = "changed"

    assert record.output == {"rows": [{"a": 1}], "s": "x"}
    assert record.output_json() == json.dumps({"rows": [{"a": 1}], "s": "x"})


@pytest.mark.parametrize("returned", [{1: "a"}, {"x": {2: "b"}}, {"s": {1, 2}}])
async def test_an_output_with_a_key_or_value_json_cannot_carry_is_a_failed_record(
    returned: Any,
) -> None:
    record = await _record_of(returned)

    assert not record.success
    assert record.error_kind is ErrorKind.EXCEPTION
    assert (record.error or "").startswith("TypeError: tool output")
    assert record.output == {}

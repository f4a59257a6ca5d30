"""The decorator derives a tool's input schema and description from type hints and docstring."""

import enum
from collections.abc import Callable
from typing import Annotated, Any, Literal, Optional, TypedDict

from cleveragents.tool import ToolRegistry, ToolSpec


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Point(TypedDict):
    x: int
    y: int


def spec_of(fn: Callable[..., Any]) -> ToolSpec:
    registry = ToolRegistry()
    registry.tool(fn)
    (spec,) = registry.specs()
    return spec


def properties_of(fn: Callable[..., Any]) -> dict[str, Any]:
    return dict(spec_of(fn).input_schema["properties"])


def test_scalar_hints_map_to_json_types() -> None:
    def scalars(s: str, i: int, f: float, b: bool) -> None:
        pass

    assert properties_of(scalars) == {
        "s": {"type": "string"},
        "i": {"type": "integer"},
        "f": {"type": "number"},
        "b": {"type": "boolean"},
    }


def test_list_of_str_is_an_array_of_strings() -> None:
    def tags(values: list[str]) -> None:
        pass

    assert properties_of(tags)["values"] == {"type": "array", "items": {"type": "string"}}


def test_dict_of_str_to_int_is_an_object_with_integer_values() -> None:
    def counts(by_name: dict[str, int]) -> None:
        pass

    assert properties_of(counts)["by_name"] == {
        "type": "object",
        "additionalProperties": {"type": "integer"},
    }


def test_optional_allows_null() -> None:
    def maybe(limit: Optional[int]) -> None:  # noqa: UP045 - the typing spelling is under test
        pass

    def maybe_pipe(limit: int | None) -> None:
        pass

    expected = {"anyOf": [{"type": "integer"}, {"type": "null"}]}
    assert properties_of(maybe)["limit"] == expected
    assert properties_of(maybe_pipe)["limit"] == expected


def test_literal_becomes_an_enum_of_its_values() -> None:
    def pick(mode: Literal["fast", "slow"]) -> None:
        pass

    assert properties_of(pick)["mode"] == {"enum": ["fast", "slow"]}


def test_enum_becomes_an_enum_of_member_values() -> None:
    def paint(color: Color) -> None:
        pass

    assert properties_of(paint)["color"] == {"enum": ["red", "green"]}


def test_typed_dict_becomes_an_object_with_required_keys() -> None:
    def move(to: Point) -> None:
        pass

    assert properties_of(move)["to"] == {
        "type": "object",
        "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
        "required": ["x", "y"],
    }


def test_parameters_without_defaults_are_required_in_signature_order() -> None:
    def f(b: int, a: int, c: int = 3) -> None:
        pass

    assert spec_of(f).input_schema["required"] == ["b", "a"]


def test_parameters_with_defaults_are_optional_and_carry_the_default() -> None:
    def f(path: str = ".", depth: int = 2, limit: int | None = None) -> None:
        pass

    schema = spec_of(f).input_schema
    assert "required" not in schema
    assert schema["properties"]["path"] == {"type": "string", "default": "."}
    assert schema["properties"]["depth"] == {"type": "integer", "default": 2}
    assert schema["properties"]["limit"]["default"] is None


def test_non_json_default_is_left_out_of_the_schema() -> None:
    def f(items: tuple[int, ...] = (1, 2)) -> None:
        pass

    assert properties_of(f)["items"] == {"type": "array", "items": {"type": "integer"}}


def test_unannotated_parameter_accepts_anything() -> None:
    def f(anything):  # type: ignore[no-untyped-def]
        pass

    assert properties_of(f) == {"anything": {}}


def test_schema_is_an_object_that_forbids_additional_properties() -> None:
    def f(a: int) -> None:
        pass

    schema = spec_of(f).input_schema
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False


def test_annotated_string_becomes_the_property_description() -> None:
    def f(path: Annotated[str, "Where to look."]) -> None:
        pass

    assert properties_of(f)["path"] == {"type": "string", "description": "Where to look."}


def test_annotated_description_wins_over_the_docstring() -> None:
    def f(path: Annotated[str, "From the annotation."]) -> None:
        """Do it.

        Args:
            path: From the docstring.
        """

    assert properties_of(f)["path"]["description"] == "From the annotation."


def test_google_style_args_become_property_descriptions() -> None:
    def search(query: str, limit: int = 10) -> list[str]:
        """Search the index.

        Args:
            query (str): What to look for.
            limit: How many hits to return,
                at most.

        Returns:
            The matching documents.
        """
        return []

    props = properties_of(search)
    assert props["query"]["description"] == "What to look for."
    assert props["limit"]["description"] == "How many hits to return, at most."


def test_docstring_summary_before_any_section_is_the_description() -> None:
    def search(query: str) -> None:
        """Search the index for documents.

        Uses the inverted index.

        Args:
            query: What to look for.

        Raises:
            KeyError: never.
        """

    assert spec_of(search).description == (
        "Search the index for documents.\n\nUses the inverted index."
    )


def test_function_without_docstring_has_an_empty_description() -> None:
    def bare(a: int) -> None:
        pass

    assert spec_of(bare).description == ""


def test_context_parameters_and_var_keywords_are_left_out_of_the_schema() -> None:
    def f(
        path: str,
        sandbox_root: str | None = None,
        resource_bindings: dict[str, Any] | None = None,
        **extra: Any,
    ) -> None:
        pass

    schema = spec_of(f).input_schema
    assert list(schema["properties"]) == ["path"]
    assert schema["required"] == ["path"]

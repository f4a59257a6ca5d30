"""Structured output in Python terms: a type becomes a run's output schema, and the run's
validated JSON answer becomes a value of that type.

An output type is a dataclass, a ``TypedDict``, a pydantic model (when the caller has
pydantic: this client never imports it, it only calls the model's own
``model_json_schema`` and ``model_validate_json``), a JSON Schema ``dict``, or an
``OutputSchema`` as it is. :class:`TypedResult` is a run's result with ``output``, the answer
as that type (``None`` when the run ended without a valid one: see ``stop_reason``).
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import json
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from cleveragents.tool import OutputSchema, ToolCallRunResult
from cleveragents.tool.execution.schema import schema_for_type

__all__ = ["OutputType", "TypedResult", "output_type_of"]

T = TypeVar("T")

#: What a caller may give as an output type.
OutputSpec = type | Mapping[str, Any] | OutputSchema


@dataclass(frozen=True, slots=True)
class TypedResult(ToolCallRunResult, Generic[T]):
    """A run's result whose answer is parsed as its output type: ``output`` (``None`` when
    the run ended without a valid answer), beside ``output_json``, the answer's JSON text."""

    output: T | None = None


class OutputType(Generic[T]):
    """An output type, its schema (``schema``: the ``OutputSchema`` a run sends) and the
    parser of its answers. ``name`` and ``description`` default to the type's name and
    docstring (``"output"`` and none for a schema dict)."""

    __slots__ = ("_parse", "schema")

    def __init__(
        self, tp: type[T] | Mapping[str, Any] | OutputSchema, *, name: str = "",
        description: str | None = None,
    ) -> None:  # fmt: skip
        schema, parse, default_name, doc = _describe(tp)
        if isinstance(tp, OutputSchema) and not name and description is None:
            self.schema = tp
        else:
            self.schema = OutputSchema(
                name or _safe_name(default_name),
                schema,
                doc if description is None else description,
            )
        self._parse: Callable[[str], Any] = parse

    def parse(self, text: str) -> T:
        """The answer's JSON text as a value of the type (``ValueError``/``TypeError`` when it
        does not fit it: the sidecar validated it against the schema already)."""
        return typing.cast(T, self._parse(text))

    def result(self, result: ToolCallRunResult) -> TypedResult[T]:
        """``result`` with its ``output`` parsed (``None`` when it has no valid answer)."""
        output = self.parse(result.output_json) if result.output_json else None
        if isinstance(result, TypedResult):
            return dataclasses.replace(result, output=output)
        fields = {f.name: getattr(result, f.name) for f in dataclasses.fields(result)}
        return TypedResult(**fields, output=output)


def output_type_of(spec: OutputSpec | OutputType[Any] | None) -> OutputType[Any] | None:
    """``spec`` as an :class:`OutputType` (``None`` stays ``None``)."""
    if spec is None or isinstance(spec, OutputType):
        return spec
    return OutputType(spec)


def _describe(tp: Any) -> tuple[Mapping[str, Any], Callable[[str], Any], str, str]:
    """The schema, answer parser, default name and description of an output type."""
    if isinstance(tp, OutputSchema):
        return tp.schema, json.loads, tp.name, tp.description
    if isinstance(tp, Mapping):
        return tp, json.loads, "output", str(tp.get("description", ""))
    if not isinstance(tp, type):
        raise TypeError(
            "an output type is a dataclass, a TypedDict, a pydantic model, a JSON Schema dict "
            f"or an OutputSchema, not {type(tp).__name__}"
        )
    doc = _own_doc(tp)
    validate = getattr(tp, "model_validate_json", None)
    make_schema = getattr(tp, "model_json_schema", None)
    if callable(validate) and callable(make_schema):  # a pydantic model
        schema = dict(make_schema())
        return schema, validate, tp.__name__, str(schema.pop("description", doc))
    if not (dataclasses.is_dataclass(tp) or typing.is_typeddict(tp)):
        raise TypeError(
            f"{tp.__name__} is not a dataclass, a TypedDict or a pydantic model: give its "
            "JSON Schema as a dict instead"
        )
    schema = schema_for_type(tp)
    return schema, lambda text: _value_as(tp, json.loads(text)), tp.__name__, doc


def _own_doc(tp: type) -> str:
    doc = tp.__doc__ or ""
    if dataclasses.is_dataclass(tp) and doc.startswith(f"{tp.__name__}("):
        return ""  # the signature dataclasses writes when a class has no docstring
    return inspect.cleandoc(doc)


def _safe_name(name: str) -> str:
    cleaned = "".join(ch if ch.isalnum() or ch in "_-" else "_" for ch in name)[:64]
    return cleaned or "output"


def _value_as(tp: Any, value: Any) -> Any:
    """``value`` (parsed JSON that matches ``tp``'s schema) as a value of ``tp``."""
    origin, args = get_origin(tp), get_args(tp)
    if origin is typing.Annotated:
        return _value_as(args[0], value)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        hints = get_type_hints(tp)
        known = {f.name for f in dataclasses.fields(tp)}
        return tp(**{k: _value_as(hints.get(k, Any), v) for k, v in value.items() if k in known})
    if typing.is_typeddict(tp):
        hints = get_type_hints(tp)
        return {k: _value_as(hints.get(k, Any), v) for k, v in value.items()}
    if inspect.isclass(tp) and issubclass(tp, enum.Enum):
        return tp(value)
    if origin in (Union, types.UnionType):
        return _union_value(args, value)
    if origin in (list, set, frozenset) and isinstance(value, list):
        items = [_value_as(args[0], v) for v in value] if args else value
        return origin(items) if origin is not list else items
    if origin is tuple and isinstance(value, list):
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_value_as(args[0], v) for v in value)
        return tuple(_value_as(a, v) for a, v in zip(args, value, strict=False))
    if origin in (dict, Mapping) and isinstance(value, dict) and len(args) == 2:
        return {k: _value_as(args[1], v) for k, v in value.items()}
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def _union_value(options: tuple[Any, ...], value: Any) -> Any:
    """The value of the first option of a union that ``value`` fits."""
    if value is None and type(None) in options:
        return None
    for option in options:
        if option is type(None):
            continue
        if _fits(option, value):
            return _value_as(option, value)
    return value


def _fits(tp: Any, value: Any) -> bool:
    """Whether parsed JSON ``value`` has the JSON shape ``tp`` describes (roughly: enough to
    pick a union's member)."""
    origin = get_origin(tp)
    if origin is typing.Annotated:
        return _fits(get_args(tp)[0], value)
    if origin is Literal:
        return value in get_args(tp)
    if dataclasses.is_dataclass(tp) or typing.is_typeddict(tp) or origin in (dict, Mapping):
        return isinstance(value, dict)
    if origin in (list, tuple, set, frozenset) or tp in (list, tuple):
        return isinstance(value, list)
    if inspect.isclass(tp) and issubclass(tp, enum.Enum):
        return value in {member.value for member in tp}
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    return True

"""``OutputSchema``: a run's request for its final answer as JSON matching a JSON Schema.

A run with an output schema ends on a final answer (a response without tool calls) only when
that answer's text parses as standard JSON and validates against the schema (jsonschema_rs,
the validator of tool arguments). An answer that does not is sent back to the model with the
error, up to the run's ``max_output_retries``; past them the run ends with
``StopReason.MAX_OUTPUT_RETRIES`` and the last invalid text. How each provider is asked for
such an answer (``response_format``, ``text.format``, a forced answer tool) is the provider
adapter's business: whatever it did, the answer is checked here.

The schema is compiled once (:meth:`OutputSchema.prepare`); a schema from outside must be
measured first (``execution.schemacost``), as a tool's is, which also gives the bound on how
many JSON values an answer may hold before it is validated (``max_values``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import jsonschema_rs

from cleveragents.tool.jsontext import loads
from cleveragents.tool.spec import TOOL_NAME_PATTERN

__all__ = ["DEFAULT_MAX_OUTPUT_RETRIES", "OutputCheck", "OutputSchema"]

#: How many invalid answers a run may correct unless it says otherwise.
DEFAULT_MAX_OUTPUT_RETRIES = 2


@dataclass(frozen=True, slots=True)
class OutputCheck:
    """The verdict on one answer: its parsed ``value`` when valid, else the ``error`` the
    model is shown."""

    value: Any = None
    error: str | None = None

    @property
    def valid(self) -> bool:
        """Whether the answer parsed and validated."""
        return self.error is None


@dataclass(frozen=True, slots=True)
class OutputSchema:
    """The JSON an answer must be: a ``name`` (as providers want one, like a tool name), a
    JSON Schema whose root describes an object, and a ``description`` shown to the model.

    ``ValueError`` for a bad name or a root that is not an object schema; :meth:`prepare`
    (or the first :meth:`check`) compiles the schema, ``ValueError`` when it is not a valid
    JSON Schema.
    """

    name: str
    schema: Mapping[str, Any]
    description: str = ""
    _validator: Any = field(default=None, init=False, repr=False, compare=False)
    _max_values: int | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not TOOL_NAME_PATTERN.fullmatch(self.name):
            raise ValueError(
                f"invalid output schema name {self.name!r}: use 1-64 characters from a-z, "
                "A-Z, 0-9, _ and -"
            )
        if not isinstance(self.schema, Mapping) or self.schema.get("type") != "object":
            raise ValueError(
                f"output schema {self.name!r} must be a JSON Schema object whose root has "
                '"type": "object" (wrap another value in a property)'
            )
        if not isinstance(self.description, str):
            raise TypeError("the output schema's description must be a string")

    def prepare(self, max_values: int | None = None) -> OutputSchema:
        """Compile the schema (once) and bound the JSON values one answer may hold before it
        is validated (``None``: any number); returns ``self``."""
        if self._validator is None:
            try:
                validator = jsonschema_rs.validator_for(_plain(self.schema))
            except (jsonschema_rs.ValidationError, ValueError) as exc:
                first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise ValueError(
                    f"output schema {self.name!r} is not a valid JSON Schema: {first_line}"
                ) from None
            object.__setattr__(self, "_validator", validator)
        if max_values is not None:
            object.__setattr__(self, "_max_values", max_values)
        return self

    @property
    def prepared(self) -> bool:
        """Whether the schema has been compiled (by :meth:`prepare`)."""
        return self._validator is not None

    @property
    def max_values(self) -> int | None:
        """How many JSON values an answer may hold before it is validated (``None``: any)."""
        return self._max_values

    def check(self, text: str) -> OutputCheck:
        """Parse ``text`` as standard JSON and validate it; never raises."""
        if not text.strip():
            return OutputCheck(error="the answer is empty: it must be a JSON object")
        try:
            value = loads(text)
        except json.JSONDecodeError as exc:
            return OutputCheck(error=f"the answer is not JSON ({exc.msg} at position {exc.pos})")
        except RecursionError:
            return OutputCheck(error="the answer is nested too deeply")
        cap = self._max_values
        if cap is not None and _more_values_than(value, cap):
            return OutputCheck(
                error=f"the answer holds more than {cap} JSON values, the most this output "
                "schema may be checked against"
            )
        validator = self.prepare()._validator
        if validator.is_valid(value):
            return OutputCheck(value=value)
        error = next(iter(validator.iter_errors(value)))
        path = "/".join(str(part) for part in error.instance_path)
        message = str(error.message)
        return OutputCheck(error=f"at '/{path}': {message}" if path else message)

    def feedback(self, error: str) -> str:
        """The message that sends an invalid answer back to the model."""
        return (
            f"Your answer does not match the output schema {self.name!r}: {error}. Answer "
            "again with only a JSON object that matches the schema."
        )


def _more_values_than(value: Any, cap: int) -> bool:
    """Whether ``value`` holds more than ``cap`` JSON values; stops counting past ``cap``."""
    count = 0
    stack = [value]
    while stack:
        item = stack.pop()
        count += 1
        if count > cap:
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _plain(value: Any) -> Any:
    """Mappings as dicts and sequences as lists: the validator takes built-in containers."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value

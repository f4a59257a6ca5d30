"""A tool output's JSON text, encoded once per record and shared by everything that needs it.

A run needs a record's output as JSON several times: the model's tool message and the secret
scan (``", "`` and ``": "`` between items, as ``json.dumps`` writes), the record in events,
results and stores (compact, as the wire writes). Each pass over a large output (tens of MiB)
costs a tenth of a second and holds the GIL, so :class:`OutputText` keeps the text the first
pass made. When every top-level value is a string, number, boolean or null (a tool's
``{"result": "..."}``) and the output is large, the compact text is cut from the spaced one
instead of encoded again; a small one is encoded by the C encoder each way (cheaper than the
cutting), and an empty one shares a text made once.

:func:`plain_output` checks and copies a handler's return value with the C encoder and
scanner where it can (a round trip compared with ``==``), instead of a Python walk over every
value, and hands its text on to the record.
"""

from __future__ import annotations

import json
import json.encoder
import math
from collections.abc import Callable, Mapping
from typing import Any

from cleveragents.tool.jsontext import Encoder, find_surrogate, is_object

__all__ = ["OutputText", "plain_output"]

#: The model's form (and the secret scan's): ``json.dumps(value, ensure_ascii=False)``.
spaced_json = Encoder()
#: The wire's form: ``cleveragents.wire.jsonfields.dumps``.
compact_json = Encoder(separators=(",", ":"))
_encode_key: Callable[[str], str] = json.encoder.encode_basestring
_FLAT = (str, int, bool, type(None))
_decode = json.JSONDecoder().decode
#: A flat output whose keys and string values hold fewer characters than this is encoded
#: whole (twice at most, in C): cutting spans in Python costs more than that below it.
_SMALL_CHARS = 4096


class OutputText:
    """An output object's JSON text in the model's (spaced) form, and the compact form on
    demand: cut from it when ``spans`` says where each top-level item's key and value are
    (nothing more is kept: the output is mostly that text), else encoded once and kept (a
    nested output's objects take several times its text's memory)."""

    __slots__ = ("_compact", "spaced", "spans")

    def __init__(self, spaced: str, spans: tuple[tuple[int, int, int], ...] | None) -> None:
        self.spaced = spaced
        #: Per top-level item: where its key starts, where its value starts and ends.
        self.spans = spans
        self._compact: str | None = None

    @classmethod
    def of(cls, output: Mapping[str, Any]) -> OutputText:
        """The text of ``output``; raises what the JSON encoder raises for a value it refuses."""
        if isinstance(output, dict) and _is_flat(output):
            return cls._flat(output)
        return cls(spaced_json(output), None)

    @classmethod
    def _flat(cls, output: dict[str, Any]) -> OutputText:
        parts = ["{"]
        spans = []
        at = 1
        for index, (key, value) in enumerate(output.items()):
            if index:
                parts.append(", ")
                at += 2
            key_text, value_text = _encode_key(key), compact_json(value)
            parts += (key_text, ": ", value_text)
            start = at + len(key_text) + 2
            spans.append((at, start, start + len(value_text)))
            at = start + len(value_text)
        parts.append("}")
        return cls("".join(parts), tuple(spans))

    def compact_length(self) -> int | None:
        """The compact text's length in characters, when known without making it."""
        if self.spans is not None:  # one character less per separator, two a top-level item
            return len(self.spaced) - max(2 * len(self.spans) - 1, 0)
        return None if self._compact is None else len(self._compact)

    def compact(self, output: Mapping[str, Any]) -> str:
        """The compact text of ``output`` (the value this text was made from)."""
        spans = self.spans
        if spans is None:
            if self._compact is None:
                self._compact = compact_json(output)
            return self._compact
        spaced = self.spaced
        parts = ["{"]
        for index, (key_at, value_at, end) in enumerate(spans):
            if index:
                parts.append(",")
            parts += (spaced[key_at : value_at - 2], ":", spaced[value_at:end])
        parts.append("}")
        return "".join(parts)


def _is_flat(output: dict[Any, Any]) -> bool:
    """Whether every key is a ``str`` and every value a string, a number, a boolean or null
    (each encodes the same in either form), exactly those types, the floats finite."""
    return _flat_chars(output) is not None


def _flat_chars(output: dict[Any, Any]) -> int | None:
    """How many characters a flat output's keys and string values hold (``None``: the output
    is not flat, see :func:`_is_flat`)."""
    chars = 0
    for key, value in output.items():
        if type(key) is not str:
            return None
        kind = type(value)
        if kind is str:
            chars += len(value)
        elif kind is float:
            if not math.isfinite(value):
                return None
        elif kind not in _FLAT:
            return None
        chars += len(key)
    return chars


#: The text of every empty output, shared (the compact form is the same two characters).
EMPTY = OutputText("{}", ())


def _lone_surrogate(item: tuple[str, Any]) -> bool:
    """Whether a flat item's key or string value holds a lone surrogate (no UTF-8 form)."""
    key, value = item
    if not key.isascii() and find_surrogate(key) is not None:
        return True
    return type(value) is str and not value.isascii() and find_surrogate(value) is not None


def plain_output(value: Any, walk: Callable[[Any], Any]) -> tuple[dict[str, Any], OutputText]:
    """A handler's return value as a plain JSON object (a non-object becomes ``result``) and
    its text. ``walk`` is the exact check and copy, used where the fast one cannot say: it
    raises ``TypeError`` or ``ValueError`` for what JSON cannot carry."""
    if not is_object(value):
        value = {"result": value}
    if isinstance(value, dict):
        if not value:
            return {}, EMPTY
        chars = _flat_chars(value)
        if chars is not None and chars < _SMALL_CHARS:
            spaced = spaced_json(value)
            if spaced.isascii() or find_surrogate(spaced) is None:
                return dict(value), OutputText(spaced, None)
        elif chars is not None and not any(map(_lone_surrogate, value.items())):
            return dict(value), OutputText._flat(value)
        try:
            spaced = spaced_json(value)
        except (TypeError, ValueError, RecursionError):
            pass  # the walk says what (or accepts a value the encoder does not take)
        else:
            # The copy is the text read back: equal to the value unless the value held what
            # the text cannot say (tuples, keys that are not strings), which the walk decides.
            if spaced.isascii() or find_surrogate(spaced) is None:
                copy = _decode(spaced)
                if copy == value:
                    return copy, OutputText(spaced, None)
    plain = walk(value)
    return plain, OutputText.of(plain)

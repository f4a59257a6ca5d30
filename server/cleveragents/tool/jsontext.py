"""Strict JSON on the hot path: the stdlib's own C encoder and scanner, set up once.

``json.JSONEncoder.encode`` builds a new C encoder for every value and ``json.loads`` goes
through two Python layers before the C scanner; a tool-loop iteration encodes or parses JSON
about eight times, and that set-up was most of the cost for small values.

Every JSON text a client, a model or a provider sends is parsed here, and only standard JSON
(RFC 8259, with I-JSON's string rule) is accepted: ``NaN``, ``Infinity``, a number too large
for a float (``1e400``), an integer of more than 4300 digits, and a string holding a lone UTF-16
surrogate (``"\\ud83d"``, half an emoji) are each a ``json.JSONDecodeError`` saying what and
where, instead of a value that later breaks an encoder, a protobuf field or a record.
Encoding refuses ``NaN`` and infinities (``ValueError``) rather than writing non-JSON text.
"""

from __future__ import annotations

import json
import json.encoder
import math
import re
import sys
from collections.abc import Callable, Mapping
from typing import Any, TypeGuard

__all__ = ["MAX_INT_DIGITS", "Encoder", "find_surrogate", "is_object", "loads"]

#: None where the C accelerator is missing (not on CPython).
_c_make_encoder: Callable[..., Any] | None = vars(json.encoder).get("c_make_encoder")
#: The longest integer literal accepted: the interpreter's own int-from-text limit.
MAX_INT_DIGITS: int = sys.get_int_max_str_digits() or 4300


class _NotJson(Exception):
    """Raised inside the scanner by a hook; turned into a ``JSONDecodeError`` by :func:`loads`."""

    def __init__(self, token: str, why: str) -> None:
        super().__init__(token)
        self.token, self.why = token, why


def _constant(name: str) -> Any:
    raise _NotJson(name, f"{name} is not a JSON number (JSON has no NaN or Infinity)")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotJson(text, f"the number {text[:40]} is out of range for a 64-bit float")
    return value


_decoder = json.JSONDecoder(parse_constant=_constant, parse_float=_float)
#: The C scanner the strict decoder set up in its constructor.
_scan: Callable[[str, int], tuple[Any, int]] = vars(_decoder)["scan_once"]
#: An escape of a surrogate: a hint that a text may hold a lone one.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_LONE_ESCAPE = re.compile(
    r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])|(?<![0-9a-fA-F]{4})\\u[dD][c-fC-F]"
    r"|[\ud800-\udfff]"
)
_LONG_INT = re.compile(rf"\d{{{MAX_INT_DIGITS + 1}}}")


class Encoder:
    """``json.dumps(value, ensure_ascii=False, separators=separators, allow_nan=allow_nan)``,
    faster (``allow_nan`` is False unless asked: the project writes no NaN).

    One C encoder serves every call. Its circular-reference markers are empty again after a
    successful call; after a failure they may not be, so a fresh encoder replaces it.
    """

    __slots__ = ("_encode", "_make", "_stdlib")

    def __init__(
        self, separators: tuple[str, str] = (", ", ": "), *, allow_nan: bool = False
    ) -> None:
        self._stdlib = json.JSONEncoder(
            ensure_ascii=False, separators=separators, allow_nan=allow_nan
        )
        self._make: Callable[[], Any] | None = None
        if _c_make_encoder is not None:
            stdlib, (item_separator, key_separator) = self._stdlib, separators
            self._make = lambda: _c_make_encoder(
                {}, stdlib.default, json.encoder.encode_basestring, None,
                key_separator, item_separator, False, False, allow_nan,
            )  # fmt: skip
            self._encode = self._make()

    def __call__(self, value: Any) -> str:
        if self._make is None:  # pragma: no cover - see the import above
            return self._stdlib.encode(value)
        try:
            return "".join(self._encode(value, 0))
        except BaseException:
            self._encode = self._make()
            raise


def loads(text: str | bytes) -> Any:
    """The value of a strict JSON text; ``json.JSONDecodeError`` says what is wrong and where.

    Bytes must be UTF-8. Standard JSON parses to exactly what ``json.loads`` gives.
    """
    if isinstance(text, bytes | bytearray):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise json.JSONDecodeError("the text is not UTF-8", "", exc.start) from None
    try:
        value = _parse(text)
    except _NotJson as exc:
        raise json.JSONDecodeError(exc.why, text, _position(text, exc.token)) from None
    except ValueError as exc:
        if isinstance(exc, json.JSONDecodeError) or "integer string conversion" not in str(exc):
            raise
        found = _LONG_INT.search(text)
        why = f"an integer has more than {MAX_INT_DIGITS} digits"
        raise json.JSONDecodeError(why, text, found.start() if found else 0) from None
    if _may_hold_surrogate(text):
        lone = find_surrogate(value)
        if lone is not None:
            found = _LONE_ESCAPE.search(text)
            why = (
                f"a string holds a lone surrogate \\u{ord(lone):04x} (half of a character, "
                "as when text is cut inside an emoji), which JSON text may not carry"
            )
            raise json.JSONDecodeError(why, text, found.start() if found else 0)
    return value


def find_surrogate(value: Any) -> str | None:
    """The first lone UTF-16 surrogate in any string (or key) of ``value``, or ``None``.

    Such a string has no UTF-8 form: protobuf, a record store or a client cannot carry it.
    """
    if isinstance(value, str):
        if value.isascii():
            return None
        found = _SURROGATE.search(value)
        return found.group() if found else None
    if isinstance(value, dict):
        for key, item in value.items():
            if (lone := find_surrogate(key)) is not None or (
                lone := find_surrogate(item)
            ) is not None:
                return lone
    elif isinstance(value, list | tuple):
        for item in value:
            if (lone := find_surrogate(item)) is not None:
                return lone
    return None


def _may_hold_surrogate(text: str) -> bool:
    """Whether ``text`` has a surrogate's escape or a raw surrogate (cheap tests first)."""
    if "\\u" in text and _SURROGATE_ESCAPE.search(text) is not None:
        return True
    if text.isascii():
        return False
    try:  # a raw surrogate (only a Python caller can pass one) has no UTF-8 form
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _parse(text: str) -> Any:
    try:
        value, end = _scan(text, 0)
    except StopIteration:  # leading whitespace, or no JSON value at all: let json decide
        return _decoder.decode(text)
    if end != len(text):  # trailing whitespace or extra data
        return _decoder.decode(text)
    return value


def _position(text: str, token: str) -> int:
    """Where ``token`` (a constant or a number the scanner refused) first appears."""
    found = re.search(r"(?<![\w.+-])" + re.escape(token) + r"(?![\w.])", text)
    return found.start() if found else max(0, text.find(token))


def is_object(value: object) -> TypeGuard[Mapping[Any, Any]]:
    """Whether ``value`` stands for a JSON object: a ``Mapping``. A ``dict`` (what parsed JSON
    gives) is told by its type first: the ``Mapping`` ABC's ``isinstance`` costs some 2k
    instructions, and the loop asks this several times an iteration."""
    return type(value) is dict or isinstance(value, Mapping)

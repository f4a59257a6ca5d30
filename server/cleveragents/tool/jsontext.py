"""JSON on the hot path: the stdlib's own C encoder and scanner, set up once instead of per call.

``json.JSONEncoder.encode`` builds a new C encoder for every value and ``json.loads`` goes
through two Python layers before the C scanner; a tool-loop iteration encodes or parses JSON
about eight times, and that set-up was most of the cost for small values. The text and the
errors are the stdlib's exactly: anything unusual falls back to it.
"""

from __future__ import annotations

import json
import json.encoder
from collections.abc import Callable
from typing import Any

__all__ = ["Encoder", "loads"]

#: None where the C accelerator is missing (not on CPython).
_c_make_encoder: Callable[..., Any] | None = vars(json.encoder).get("c_make_encoder")
#: The C scanner a decoder sets up in its constructor (what ``json.loads`` ends up calling).
_scan: Callable[[str, int], tuple[Any, int]] = vars(json.JSONDecoder())["scan_once"]


class Encoder:
    """``json.dumps(value, ensure_ascii=False, separators=separators)``, faster.

    One C encoder serves every call. Its circular-reference markers are empty again after a
    successful call; after a failure they may not be, so a fresh encoder replaces it.
    """

    __slots__ = ("_encode", "_make", "_stdlib")

    def __init__(self, separators: tuple[str, str] = (", ", ": ")) -> None:
        self._stdlib = json.JSONEncoder(ensure_ascii=False, separators=separators)
        self._make: Callable[[], Any] | None = None
        if _c_make_encoder is not None:
            stdlib, (item_separator, key_separator) = self._stdlib, separators
            self._make = lambda: _c_make_encoder(
                {}, stdlib.default, json.encoder.encode_basestring, None,
                key_separator, item_separator, False, False, True,
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


def loads(text: str) -> Any:
    """``json.loads(text)`` for a ``str``: the same value, or the same error."""
    try:
        value, end = _scan(text, 0)
    except StopIteration:  # leading whitespace, or no JSON value at all: let json decide
        return json.loads(text)
    if end != len(text):  # trailing whitespace or extra data
        return json.loads(text)
    return value

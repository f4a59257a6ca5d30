"""Splitting a whole ``LLMResponse`` into the ``ResponseDelta``s a streaming provider sends.

``ScriptedLLMCaller(stream=True)`` plays its turns through this, so that tests and the demo
see text and tool-argument deltas without a provider.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from cleveragents.tool.messages import LLMResponse, ResponseDelta

__all__ = ["split_response"]

#: A word with the spaces after it, or a run of spaces: the size of a provider's text delta.
_WORD = re.compile(r"\S+\s*|\s+")
#: How many characters of a tool call's arguments JSON one delta carries, at least.
_ARGUMENT_CHUNK = 12
#: At most this many text deltas, and this many per tool call, whatever the answer's size:
#: a long scripted answer streams in larger pieces rather than in more of them.
_MAX_TEXT_DELTAS = 48
_MAX_ARGUMENT_DELTAS = 8
#: A tool call's arguments as compact JSON text (one encoder: ``json.dumps`` with options
#: makes a new one each call, which was most of a small answer's cost).
_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def split_response(response: LLMResponse) -> Iterator[ResponseDelta]:
    """The deltas of ``response`` in the order a provider streams them: text word by word,
    then each tool call (id and name first) with its arguments' JSON text in small pieces;
    the usage rides on the last delta. Concatenated, they give the response back."""
    # Built as argument tuples first, so that the usage joins the last one without a copy.
    pieces: list[tuple[str, int | None, str, str, str]] = []
    if response.content:
        words = _WORD.findall(response.content)
        per = max(1, -(-len(words) // _MAX_TEXT_DELTAS))  # words per delta, rounded up
        pieces += [
            ("".join(words[i : i + per]), None, "", "", "") for i in range(0, len(words), per)
        ]
    for index, call in enumerate(response.tool_calls):
        text = _ENCODE(dict(call.arguments))
        size = max(_ARGUMENT_CHUNK, -(-len(text) // _MAX_ARGUMENT_DELTAS))
        parts = [text[i : i + size] for i in range(0, len(text), size)] or [""]
        pieces.append(("", index, call.id, call.name, parts[0]))
        pieces += [("", index, "", "", part) for part in parts[1:]]
    usage = response.usage
    if usage is not None and not pieces:
        pieces.append(("", None, "", "", ""))
    last = len(pieces) - 1
    for number, (piece, position, call_id, name, arguments) in enumerate(pieces):
        yield ResponseDelta(
            piece, position, call_id, name, arguments, usage if number == last else None
        )

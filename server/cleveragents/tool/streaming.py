"""Splitting a whole ``LLMResponse`` into the ``ResponseDelta``s a streaming provider sends.

``ScriptedLLMCaller(stream=True)`` plays its turns through this, so that tests and the demo
see text and tool-argument deltas without a provider.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from cleveragents.tool.jsontext import Encoder
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
#: A tool call's arguments as compact JSON text (one C encoder for every call:
#: ``json.JSONEncoder.encode`` makes a new one each time, most of a small answer's cost).
_ENCODE = Encoder(separators=(",", ":"), allow_nan=True)


def split_response(response: LLMResponse) -> Iterator[ResponseDelta]:
    """The deltas of ``response`` in the order a provider streams them: text word by word,
    then each tool call (id and name first) with its arguments' JSON text in small pieces;
    the usage rides on the last delta. Concatenated, they give the response back."""
    # Built as argument tuples first, so that the usage joins the last one without a copy.
    pieces: list[tuple[str, int | None, str, str, str]] = []
    content = response.content
    if content:
        words = _WORD.findall(content)
        per = -(-len(words) // _MAX_TEXT_DELTAS)  # words per delta, rounded up (content: 1+)
        if per == 1:
            pieces += [(word, None, "", "", "") for word in words]
        else:
            pieces += [
                ("".join(words[i : i + per]), None, "", "", "") for i in range(0, len(words), per)
            ]
    for index, call in enumerate(response.tool_calls):
        arguments = call.arguments
        if not arguments:
            text = "{}"
        else:
            text = _ENCODE(arguments if type(arguments) is dict else dict(arguments))
        size = max(_ARGUMENT_CHUNK, -(-len(text) // _MAX_ARGUMENT_DELTAS))
        if len(text) <= size:
            pieces.append(("", index, call.id, call.name, text))
            continue
        pieces.append(("", index, call.id, call.name, text[:size]))
        pieces += [("", index, "", "", text[i : i + size]) for i in range(size, len(text), size)]
    usage = response.usage
    if not pieces:
        return iter(() if usage is None else (ResponseDelta(usage=usage),))
    if len(pieces) == 1:  # most tool-call turns
        return iter((ResponseDelta(*pieces[0], usage),))
    *rest, last = pieces
    deltas = [ResponseDelta(*piece) for piece in rest]
    deltas.append(ResponseDelta(*last, usage))
    return iter(deltas)

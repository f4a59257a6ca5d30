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


def split_response(response: LLMResponse) -> Iterator[ResponseDelta]:
    """The deltas of ``response`` in the order a provider streams them: text word by word,
    then each tool call (id and name first) with its arguments' JSON text in small pieces;
    the usage rides on the last delta. Concatenated, they give the response back."""
    words = [m.group() for m in _WORD.finditer(response.content)]
    per = max(1, -(-len(words) // _MAX_TEXT_DELTAS))  # words per delta, rounded up
    deltas = [ResponseDelta(text="".join(words[i : i + per])) for i in range(0, len(words), per)]
    for index, call in enumerate(response.tool_calls):
        text = json.dumps(dict(call.arguments), separators=(",", ":"), ensure_ascii=False)
        size = max(_ARGUMENT_CHUNK, -(-len(text) // _MAX_ARGUMENT_DELTAS))
        pieces = [text[i : i + size] for i in range(0, len(text), size)]
        deltas.append(
            ResponseDelta(
                tool_call_index=index, tool_call_id=call.id, tool_name=call.name,
                arguments=pieces[0] if pieces else "",
            )
        )  # fmt: skip
        deltas.extend(ResponseDelta(tool_call_index=index, arguments=p) for p in pieces[1:])
    if response.usage is not None:
        if deltas:
            last = deltas.pop()
            deltas.append(
                ResponseDelta(
                    last.text, last.tool_call_index, last.tool_call_id, last.tool_name,
                    last.arguments, response.usage,
                )
            )  # fmt: skip
        else:
            deltas.append(ResponseDelta(usage=response.usage))
    yield from deltas

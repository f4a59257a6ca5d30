"""Scripts: JSON arrays of LLM turns that a ``scripted`` profile plays instead of a model.

One parser serves a profile's ``script_file`` and ``script`` and a run's own ``llm.script``.
A turn looks like ``{"content": "...", "tool_calls": [{"id", "name", "arguments"}], "usage":
{"input_tokens", "output_tokens"}}``, every key optional.
"""

from __future__ import annotations

import json

from cleveragents.tool import LLMResponse, response_from_dict
from cleveragents.tool.jsontext import loads

__all__ = ["DEFAULT_SCRIPT", "MAX_SCRIPT_TURNS", "parse_script"]

MAX_SCRIPT_TURNS = 10_000


def parse_script(text: str, where: str, *, max_calls: int | None = None) -> tuple[LLMResponse, ...]:
    """The turns of a script, each checked and converted once.

    ``ValueError`` names ``where`` (a file, a setting or ``llm.script``) and what is wrong,
    a turn asking for more than ``max_calls`` tool calls included.
    """
    try:
        turns = loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where} is not valid JSON ({exc.msg} at position {exc.pos})") from None
    except RecursionError:
        raise ValueError(f"{where} is nested too deeply") from None
    if not isinstance(turns, list):
        raise ValueError(f"{where} must be a JSON array of LLM turns")
    if len(turns) > MAX_SCRIPT_TURNS:
        raise ValueError(f"{where} has more than {MAX_SCRIPT_TURNS} turns")
    responses = []
    for index, turn in enumerate(turns):
        calls = turn.get("tool_calls") if isinstance(turn, dict) else None
        if max_calls is not None and isinstance(calls, list) and len(calls) > max_calls:
            raise ValueError(
                f"{where}[{index}] asks for {len(calls)} tool calls, more than this sidecar's "
                f"max_calls_per_response of {max_calls}"
            )
        try:
            responses.append(response_from_dict(turn, turn_number=index + 1))
        except ValueError as exc:
            raise ValueError(f"{where}[{index}]: {exc}") from None
    return tuple(responses)


#: What the embedded ``scripted`` profile answers when a run brings no script of its own:
#: one call to the built-in ``echo`` tool, then a final answer.
DEFAULT_SCRIPT = (
    response_from_dict(
        {
            "content": "Let me echo a greeting.",
            "tool_calls": [
                {"id": "call_echo", "name": "echo", "arguments": {"text": "hello from the sidecar"}}
            ],
        }
    ),
    response_from_dict(
        {"content": "Done: the echo tool answered. Pass llm.script to script your own dry run."},
        turn_number=2,
    ),
)

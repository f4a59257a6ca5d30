"""Resolve a run's ``LlmSelection`` to a configured profile and an ``LLMCaller``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from cleveragents.sidecar.config import ProfileConfig, SidecarConfig
from cleveragents.sidecar.errors import SidecarError
from cleveragents.tool import LLMCaller, ScriptedLLMCaller, response_from_dict
from cleveragents.toolruntime.v1 import types_pb2

__all__ = ["DEFAULT_SCRIPT", "MAX_SCRIPT_TURNS", "resolve_llm"]

#: What the embedded ``scripted`` profile answers when a run brings no script of its own:
#: one call to the built-in ``echo`` tool, then a final answer.
DEFAULT_SCRIPT: tuple[Mapping[str, Any], ...] = (
    {
        "content": "Let me echo a greeting.",
        "tool_calls": [
            {"id": "call_echo", "name": "echo", "arguments": {"text": "hello from the sidecar"}}
        ],
    },
    {"content": "Done: the echo tool answered. Pass llm.script to script your own dry run."},
)
MAX_SCRIPT_TURNS = 10_000


def resolve_llm(
    selection: types_pb2.LlmSelection, config: SidecarConfig, *, client_llm: bool
) -> tuple[ProfileConfig, LLMCaller | None]:
    """The profile a run uses and its caller (``None`` when the client hosts the LLM).

    Raises ``SidecarError``: ``NOT_FOUND`` for an unknown profile, ``INVALID_ARGUMENT`` for a
    bad inline script or a profile that does not fit the RPC.
    """
    profiles = config.all_profiles()
    name = selection.profile or ("client" if client_llm else config.default_profile)
    profile = profiles.get(name)
    if profile is None:
        known = ", ".join(sorted(profiles))
        raise SidecarError.not_found(f"unknown LLM profile {name!r}; configured: {known}")
    if client_llm:
        if profile.kind != "client":
            raise SidecarError.invalid(
                f"client_llm is set but profile {name!r} is of kind {profile.kind!r}; "
                "leave llm.profile empty or name a profile of kind 'client'"
            )
        return profile, None
    if profile.kind == "client":
        raise SidecarError.invalid(
            f"profile {name!r} is client-hosted: start a Session with client_llm=true"
        )
    if selection.script:
        return profile, ScriptedLLMCaller(_inline_script(selection.script))
    script = profile.script if profile.script is not None else DEFAULT_SCRIPT
    return profile, ScriptedLLMCaller(script)


def _inline_script(text: str) -> list[Mapping[str, Any]]:
    try:
        turns = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SidecarError.invalid(
            f"llm.script is not valid JSON ({exc.msg} at position {exc.pos})"
        ) from None
    except RecursionError:
        raise SidecarError.invalid("llm.script is nested too deeply") from None
    if not isinstance(turns, list):
        raise SidecarError.invalid("llm.script must be a JSON array of LLM turns")
    if len(turns) > MAX_SCRIPT_TURNS:
        raise SidecarError.invalid(f"llm.script has more than {MAX_SCRIPT_TURNS} turns")
    for index, turn in enumerate(turns):
        try:
            response_from_dict(turn)
        except ValueError as exc:
            raise SidecarError.invalid(f"llm.script[{index}]: {exc}") from None
    return turns

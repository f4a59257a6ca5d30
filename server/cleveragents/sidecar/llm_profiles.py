"""Resolve a run's ``LlmChoice`` to a configured profile, an ``LLMCaller`` and a router.

Provider profiles (``openai``, ``openai_responses``, ``anthropic``) read their API key from the
environment each time a run uses them, so a rotated key takes effect without a restart, and
share one ``aiohttp.ClientSession`` per profile (and event loop) across runs, so that runs reuse
pooled connections. ``aiohttp`` is imported only when such a profile is first used.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import grpc

from cleveragents.sidecar.config import ProfileConfig, SidecarConfig
from cleveragents.sidecar.config.scripts import DEFAULT_SCRIPT, parse_script
from cleveragents.sidecar.errors import SidecarError
from cleveragents.tool import LLMCaller, LLMResponse, ScriptedLLMCaller, ToolCallRouter
from cleveragents.wire import LlmChoice

if TYPE_CHECKING:
    import aiohttp

    from cleveragents.providers import HTTPCaller

__all__ = ["DEFAULT_API_KEY_ENV", "close_provider_clients", "profile_name", "resolve_llm"]

#: Where a provider profile without ``api_key_env`` finds its key.
DEFAULT_API_KEY_ENV = {
    "openai": "OPENAI_API_KEY",
    "openai_responses": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
}


def resolve_llm(
    selection: LlmChoice, config: SidecarConfig, *, client_llm: bool
) -> tuple[ProfileConfig, LLMCaller | None, ToolCallRouter | None]:
    """The profile a run uses, its caller (``None`` when the client hosts the LLM) and the
    router that puts tool schemas in the caller's format (``None``: the neutral format).

    Raises ``SidecarError``: ``NOT_FOUND`` for an unknown profile, ``INVALID_ARGUMENT`` for a
    bad inline script, a missing model or a profile that does not fit the RPC,
    ``FAILED_PRECONDITION`` when a provider profile's API key variable is not set.
    """
    profiles = config.all_profiles()
    name = profile_name(selection, config, client_llm=client_llm)
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
        return profile, None, None
    if profile.kind == "client":
        raise SidecarError.invalid(
            f"profile {name!r} is client-hosted: start a Session with client_llm=true"
        )
    if profile.kind in DEFAULT_API_KEY_ENV:
        if selection.script:
            raise SidecarError.invalid(
                f"llm.script is honoured only by scripted profiles; {name!r} is {profile.kind!r}"
            )
        caller = _provider_caller(profile, selection.model, config.limits.max_message_bytes)
        return profile, caller, caller.router
    if selection.script:
        try:
            turns = parse_script(
                selection.script, "llm.script", max_calls=config.limits.max_calls_per_response
            )
        except ValueError as exc:
            raise SidecarError.invalid(str(exc)) from None
        return profile, _scripted(turns, profile), None
    script = profile.script if profile.script is not None else DEFAULT_SCRIPT
    return profile, _scripted(script, profile), None


def _scripted(turns: Sequence[LLMResponse], profile: ProfileConfig) -> ScriptedLLMCaller:
    """A scripted caller playing ``turns``, streaming them as ``profile`` says."""
    delay = profile.stream_delay_s
    return ScriptedLLMCaller(turns, stream=delay is not None, delta_delay_s=delay or 0.0)


def profile_name(selection: LlmChoice, config: SidecarConfig, *, client_llm: bool) -> str:
    """The name of the profile a run uses: the one it names, else the default for its RPC."""
    return selection.profile or ("client" if client_llm else config.default_profile)


async def close_provider_clients() -> None:
    """Close the provider profiles' HTTP clients of the running event loop (at shutdown)."""
    await _CLIENTS.aclose()


def _provider_caller(
    profile: ProfileConfig, model_override: str, max_answer_chars: int
) -> HTTPCaller:
    """The profile's caller; a streamed answer may hold ``max_answer_chars`` (the sidecar's
    ``max_message_bytes``: one that could not fit in its ``llm_responded`` event is refused
    as it streams, not read to its end)."""
    from cleveragents.providers import (
        AnthropicMessagesCaller,
        OpenAIChatCaller,
        OpenAIResponsesCaller,
    )

    model = model_override or profile.model
    if not model:
        raise SidecarError.invalid(
            f"profile {profile.name!r} names no model: set its 'model' or llm.model"
        )
    env = profile.api_key_env
    if env is None:
        env = DEFAULT_API_KEY_ENV[profile.kind]
    api_key = os.environ.get(env, "") if env else ""
    if env and not api_key:
        raise SidecarError(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"profile {profile.name!r} reads its API key from ${env}, which is not set "
            "in the sidecar's environment",
        )
    extra: dict[str, Any] = {"strict_tools": profile.strict_tools}
    if profile.kind == "anthropic":
        cls: type[HTTPCaller] = AnthropicMessagesCaller
        extra["cache_prompt"] = profile.cache_prompt
        extra["structured_output"] = profile.structured_output
    else:
        cls = OpenAIChatCaller if profile.kind == "openai" else OpenAIResponsesCaller
        if profile.kind == "openai":
            extra["stream_usage"] = profile.stream_usage
    try:
        return cls(
            model,
            stream=profile.stream,
            **extra,
            base_url=profile.base_url or None,
            api_key=api_key,
            timeout_s=profile.timeout_s,
            max_retries=profile.max_retries,
            params=profile.params,
            client=_CLIENTS.get(profile),
            profile=profile.name,
            max_answer_chars=max_answer_chars,
            max_answer_setting="max_message_bytes",
        )
    except ValueError as exc:  # the messages never quote the key
        raise SidecarError(
            grpc.StatusCode.FAILED_PRECONDITION, f"profile {profile.name!r} (${env}): {exc}"
        ) from None


class _ClientPool:
    """One ``aiohttp.ClientSession`` per (event loop, profile), created on first use.

    Keyed by loop because an async client's connections belong to the loop that opened them.
    """

    def __init__(self) -> None:
        self._by_loop: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[tuple[str, str], aiohttp.ClientSession]
        ] = weakref.WeakKeyDictionary()

    def get(self, profile: ProfileConfig) -> aiohttp.ClientSession | None:
        """The profile's client for the running loop (``None`` outside one: the caller then
        makes its own)."""
        try:
            clients = self._by_loop.setdefault(asyncio.get_running_loop(), {})
        except (RuntimeError, TypeError):  # no running loop, or one without weak references
            return None
        key = (profile.name, profile.base_url)
        client = clients.get(key)
        if client is None or client.closed:
            from cleveragents.providers import new_client

            client = clients[key] = new_client()
        return client

    async def aclose(self) -> None:
        """Close and forget the clients of the running loop."""
        clients = self._by_loop.pop(asyncio.get_running_loop(), {})
        for client in clients.values():
            await client.close()


_CLIENTS = _ClientPool()

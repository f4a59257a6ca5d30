"""``ProfileConfig``: one ``[profiles.NAME]`` table, an LLM a run may choose (kept out of
``settings.py``)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cleveragents.providers import RESERVED_PARAMS
from cleveragents.sidecar.errors import ConfigError
from cleveragents.tool import LLMResponse

__all__ = ["PROFILE_KINDS", "PROVIDER_KINDS", "STRUCTURED_OUTPUT_MODES", "ProfileConfig"]

PROVIDER_KINDS = ("openai", "openai_responses", "anthropic")
PROFILE_KINDS = ("scripted", "client", *PROVIDER_KINDS)
#: How an Anthropic profile asks for a structured answer (``structured_output``).
STRUCTURED_OUTPUT_MODES = ("auto", "native", "tool")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True, slots=True)
class ProfileConfig:
    """One LLM provider profile.

    ``script`` holds a scripted profile's turns (JSON objects). Provider profiles (``openai``,
    ``anthropic``) use the rest: ``base_url`` (empty: the vendor's), ``api_key_env``, the name
    of the environment variable holding the key (``None``: ``OPENAI_API_KEY`` or
    ``ANTHROPIC_API_KEY``; empty: send no key), the per-request ``timeout_s``, ``max_retries``
    and ``params``, generation parameters copied into every request. ``stream`` asks for the
    answer as it is generated (server-sent events); ``strict_tools`` marks tool schemas
    ``strict`` (every provider kind); ``cache_prompt`` adds Anthropic prompt-caching breakpoints.
    ``stream_usage`` (kind ``openai``) asks a stream for its usage with ``stream_options``;
    false leaves that field out, for servers that refuse it. ``structured_output`` (kind
    ``anthropic``) says how a run's output schema is asked for: ``auto`` (Anthropic's
    structured outputs on a model that has them, else a forced answer tool), ``native`` or
    ``tool``.

    ``stream_delay_s`` (scripted profiles): a number streams each scripted turn as deltas,
    that many seconds apart, as a provider would (``None``: each turn comes whole). The
    embedded ``scripted`` profile streams with no delay.
    """

    name: str
    kind: str
    model: str = ""
    script: tuple[LLMResponse, ...] | None = None
    base_url: str = ""
    api_key_env: str | None = None
    timeout_s: float = 60.0
    max_retries: int = 2
    params: Mapping[str, Any] = field(default_factory=dict)
    stream: bool = True
    strict_tools: bool = False
    cache_prompt: bool = False
    stream_delay_s: float | None = None
    stream_usage: bool = True
    structured_output: str = "auto"

    def __post_init__(self) -> None:
        where = f"profiles.{self.name}"
        if self.structured_output not in STRUCTURED_OUTPUT_MODES:
            raise ConfigError(f"{where}.structured_output must be one of "
                              f"{', '.join(STRUCTURED_OUTPUT_MODES)}, got "
                              f"{self.structured_output!r}")  # fmt: skip
        if self.structured_output != "auto" and self.kind != "anthropic":
            raise ConfigError(f"{where}.structured_output is for kind 'anthropic' (OpenAI's "
                              "APIs take the schema natively); unset it here")  # fmt: skip
        if not self.stream_usage and self.kind != "openai":
            raise ConfigError(f"{where}.stream_usage is for kind 'openai' (only Chat "
                              "Completions sends stream_options); unset it here")  # fmt: skip
        if self.cache_prompt and self.kind != "anthropic":
            raise ConfigError(f"{where}.cache_prompt is for kind 'anthropic' (OpenAI caches "
                              "prompts by itself); unset it here")  # fmt: skip
        delay = self.stream_delay_s
        if delay is not None and not (isinstance(delay, int | float) and 0 <= delay <= 10):
            raise ConfigError(f"{where}.stream_delay must be a number of seconds from 0 to 10")
        if self.kind not in PROFILE_KINDS:
            kinds = ", ".join(PROFILE_KINDS)
            raise ConfigError(f"{where}.kind must be one of {kinds}, got {self.kind!r}")
        if self.base_url and not self.base_url.startswith(("http://", "https://")):
            raise ConfigError(f"{where}.base_url must be an http:// or https:// URL")
        if self.api_key_env and not _ENV_NAME.fullmatch(self.api_key_env):
            raise ConfigError(f"{where}.api_key_env must name an environment variable")
        if not (self.timeout_s > 0 and math.isfinite(self.timeout_s)):
            raise ConfigError(f"{where}.timeout must be a positive number of seconds")
        if not 0 <= self.max_retries <= 10:
            raise ConfigError(f"{where}.max_retries must be between 0 and 10")
        if reserved := sorted(RESERVED_PARAMS & set(self.params)):
            raise ConfigError(f"{where}.params may not set {', '.join(reserved)}")
        try:
            json.dumps(self.params, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{where}.params must hold JSON values: {exc}") from None

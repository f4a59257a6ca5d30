"""The sidecar's settings: defaults, then a TOML file, then environment variables, then flags."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cleveragents.providers import RESERVED_PARAMS
from cleveragents.sidecar.errors import ConfigError
from cleveragents.sidecar.eventloop import check_event_loop
from cleveragents.sidecar.governance_config import parse_automation_profiles, parse_tool_limits
from cleveragents.tool import BUILTIN_PROFILES, AutomationProfile, ToolLimit, response_from_dict

__all__ = ["ENV_PREFIX", "ProfileConfig", "SidecarConfig", "load_config"]

ENV_PREFIX = "CLEVERAGENTS_SIDECAR_"
PROVIDER_KINDS = ("openai", "anthropic")
PROFILE_KINDS = ("scripted", "client", *PROVIDER_KINDS)
_PROFILE_KEYS = {
    "scripted": {"kind", "model", "script_file", "script"},
    "client": {"kind", "model"},
    "openai": {"kind", "model", "base_url", "api_key_env", "timeout", "max_retries", "params"},
}
_PROFILE_KEYS["anthropic"] = _PROFILE_KEYS["openai"]
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True, slots=True)
class ProfileConfig:
    """One LLM provider profile.

    ``script`` holds a scripted profile's turns (JSON objects). Provider profiles (``openai``,
    ``anthropic``) use the rest: ``base_url`` (empty: the vendor's), ``api_key_env``, the name
    of the environment variable holding the key (``None``: ``OPENAI_API_KEY`` or
    ``ANTHROPIC_API_KEY``; empty: send no key), the per-request ``timeout_s``, ``max_retries``
    and ``params``, generation parameters copied into every request.
    """

    name: str
    kind: str
    model: str = ""
    script: tuple[Mapping[str, Any], ...] | None = None
    base_url: str = ""
    api_key_env: str | None = None
    timeout_s: float = 60.0
    max_retries: int = 2
    params: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        where = f"profiles.{self.name}"
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


@dataclass(frozen=True, slots=True)
class SidecarConfig:
    """Every setting of the sidecar, with production defaults."""

    listen: str = "127.0.0.1:50051"
    log_format: str = "json"
    log_level: str = "info"
    max_concurrent_runs: int = 1000
    max_message_bytes: int = 16 * 1024 * 1024
    max_iterations_cap: int = 1000
    default_tool_timeout_s: float = 60.0
    finished_run_ttl_s: float = 900.0
    max_finished_runs: int = 1000
    watcher_queue_size: int = 16384
    shutdown_grace_s: float = 10.0
    builtin_tools: bool = True
    file_tools: bool = True
    tool_modules: tuple[str, ...] = ()
    default_profile: str = "scripted"
    profiles: Mapping[str, ProfileConfig] = field(default_factory=dict)
    event_store: str = ""
    default_automation_profile: str = "supervised"
    approval_timeout_s: float = 300.0
    approve_on_timeout: bool = False
    automation_profiles: Mapping[str, AutomationProfile] = field(default_factory=dict)
    tool_limits: Mapping[str, ToolLimit] = field(default_factory=dict)
    metrics_listen: str = ""
    tracing: bool = False
    auth_token_env: str = ""
    auth_token_file: str = ""
    tls_cert_file: str = ""
    tls_key_file: str = ""
    tls_client_ca_file: str = ""
    #: ``auto`` (uvloop if installed), ``asyncio`` or ``uvloop``; used by ``cleveragents-sidecar
    #: serve``. An embedding program runs the sidecar on its own loop.
    event_loop: str = "auto"

    def __post_init__(self) -> None:
        for name in ("max_concurrent_runs", "max_message_bytes", "max_iterations_cap"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1")
        for name in ("default_tool_timeout_s", "shutdown_grace_s", "finished_run_ttl_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be a positive number of seconds")
        if self.watcher_queue_size < 1 or self.max_finished_runs < 0:
            raise ConfigError("watcher_queue_size must be >= 1 and max_finished_runs >= 0")
        if self.log_format not in ("json", "console"):
            raise ConfigError(f"log_format must be 'json' or 'console', not {self.log_format!r}")
        if self.default_profile not in self.all_profiles():
            raise ConfigError(f"default_profile {self.default_profile!r} is not a known profile")
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ConfigError("tls_cert_file and tls_key_file go together: set both or neither")
        if self.tls_client_ca_file and not self.tls_cert_file:
            raise ConfigError(
                "tls_client_ca_file (mutual TLS) needs tls_cert_file and tls_key_file"
            )
        if self.default_automation_profile not in self.all_automation_profiles():
            raise ConfigError(
                f"default_automation_profile {self.default_automation_profile!r} is not a known "
                "automation profile"
            )
        if self.approval_timeout_s <= 0:
            raise ConfigError("approval_timeout_s must be a positive number of seconds")
        check_event_loop(self.event_loop)
        if self.auth_token_env and self.auth_token_file:
            raise ConfigError("set auth_token_env or auth_token_file, not both")

    def all_automation_profiles(self) -> dict[str, AutomationProfile]:
        """The built-in automation profiles plus the configured ones (which may replace them)."""
        profiles = dict(BUILTIN_PROFILES)
        profiles.update(self.automation_profiles)
        return profiles

    def all_profiles(self) -> dict[str, ProfileConfig]:
        """Configured profiles plus the embedded ``scripted`` and ``client`` ones."""
        profiles = {
            "scripted": ProfileConfig("scripted", "scripted"),
            "client": ProfileConfig("client", "client"),
        }
        profiles.update(self.profiles)
        return profiles


_SCALARS = {
    f.name: f
    for f in dataclasses.fields(SidecarConfig)
    if f.name not in ("profiles", "tool_modules", "automation_profiles", "tool_limits")
}


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> SidecarConfig:
    """Build the configuration; later sources win. ``ConfigError`` names a bad setting."""
    env = os.environ if env is None else env
    raw: dict[str, Any] = {}
    base = Path.cwd()
    if path is None and env.get(ENV_PREFIX + "CONFIG"):
        path = env[ENV_PREFIX + "CONFIG"]
    if path is not None:
        try:
            with open(path, "rb") as fh:
                raw = tomllib.load(fh)
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
        base = Path(path).resolve().parent
    for name, spec in _SCALARS.items():
        value = env.get(ENV_PREFIX + name.upper())
        if value is not None:
            raw[name] = _from_env(name, value, spec.type)
    if (modules := env.get(ENV_PREFIX + "TOOL_MODULES")) is not None:
        raw["tool_modules"] = [m.strip() for m in modules.split(",") if m.strip()]
    raw.update({k: v for k, v in (overrides or {}).items() if v is not None})
    return _build(raw, base)


def _from_env(name: str, value: str, annotation: Any) -> Any:
    kind = str(annotation)
    try:
        if kind == "int":
            return int(value)
        if kind == "float":
            return float(value)
        if kind == "bool":
            if value.lower() in ("1", "true", "yes", "on"):
                return True
            if value.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
    except ValueError:
        raise ConfigError(f"{ENV_PREFIX}{name.upper()}={value!r} is not a valid {kind}") from None
    return value


def _build(raw: dict[str, Any], base: Path) -> SidecarConfig:
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "profiles":
            kwargs["profiles"] = _profiles(value, base)
        elif key == "automation_profiles":
            kwargs[key] = parse_automation_profiles(value)
        elif key == "tool_limits":
            kwargs[key] = parse_tool_limits(value)
        elif key == "tool_modules":
            if not isinstance(value, list) or not all(isinstance(m, str) for m in value):
                raise ConfigError("tool_modules must be a list of 'module:attribute' strings")
            kwargs["tool_modules"] = tuple(value)
        elif key in _SCALARS:
            kwargs[key] = _typed(key, value, str(_SCALARS[key].type))
        else:
            raise ConfigError(f"unknown setting {key!r}")
    return SidecarConfig(**kwargs)


def _typed(key: str, value: Any, kind: str) -> Any:
    ok = {
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": isinstance(value, int | float) and not isinstance(value, bool),
        "bool": isinstance(value, bool),
        "str": isinstance(value, str),
    }.get(kind, True)
    if not ok:
        raise ConfigError(f"setting {key!r} must be a {kind}, got {value!r}")
    return float(value) if kind == "float" else value


def _profiles(value: Any, base: Path) -> dict[str, ProfileConfig]:
    if not isinstance(value, dict):
        raise ConfigError("profiles must be a table of [profiles.NAME] tables")
    return {name: _profile(name, table, base) for name, table in value.items()}


def _profile(name: str, table: Any, base: Path) -> ProfileConfig:
    if not isinstance(table, dict):
        raise ConfigError(f"profiles.{name} must be a table")
    kind = table.get("kind")
    if kind not in PROFILE_KINDS:
        raise ConfigError(
            f"profiles.{name}.kind must be one of {', '.join(PROFILE_KINDS)}, got {kind!r}"
        )
    unknown = set(table) - _PROFILE_KEYS[kind]
    if unknown:
        raise ConfigError(f"profiles.{name}: unknown key(s) {', '.join(sorted(unknown))}")
    if kind in PROVIDER_KINDS:
        return _provider_profile(name, kind, table)
    script = None
    if "script_file" in table:
        script_path = base / str(table["script_file"])
        try:
            script = load_script(script_path.read_text(encoding="utf-8"), str(script_path))
        except OSError as exc:
            raise ConfigError(
                f"profiles.{name}: cannot read {script_path}: {exc.strerror}"
            ) from None
    elif "script" in table:
        script = load_script(json.dumps(table["script"]), f"profiles.{name}.script")
    return ProfileConfig(name, kind, str(table.get("model", "")), script)


def _provider_profile(name: str, kind: str, table: dict[str, Any]) -> ProfileConfig:
    def typed(key: str, type_name: str, default: Any) -> Any:
        return _typed(f"profiles.{name}.{key}", table.get(key, default), type_name)

    params = table.get("params", {})
    if not isinstance(params, dict):
        raise ConfigError(f"profiles.{name}.params must be a table of generation parameters")
    return ProfileConfig(
        name,
        kind,
        model=typed("model", "str", ""),
        base_url=typed("base_url", "str", ""),
        api_key_env=typed("api_key_env", "str", None) if "api_key_env" in table else None,
        timeout_s=typed("timeout", "float", 60.0),
        max_retries=typed("max_retries", "int", 2),
        params=params,
    )


def load_script(text: str, where: str) -> tuple[Mapping[str, Any], ...]:
    """Parse and check a script: a JSON array of LLM turns."""
    try:
        turns = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where} is not valid JSON ({exc.msg} at position {exc.pos})") from None
    if not isinstance(turns, list):
        raise ConfigError(f"{where} must be a JSON array of turns")
    for index, turn in enumerate(turns):
        try:
            response_from_dict(turn)
        except ValueError as exc:
            raise ConfigError(f"{where}[{index}]: {exc}") from None
    return tuple(turns)

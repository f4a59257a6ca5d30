"""Building the settings: defaults, then a TOML file, then environment variables, then flags."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cleveragents.sidecar.config.clients import parse_clients
from cleveragents.sidecar.config.governance import parse_automation_profiles, parse_tool_limits
from cleveragents.sidecar.config.groups import setting_fields
from cleveragents.sidecar.config.policies import parse_policies
from cleveragents.sidecar.config.scripts import parse_script
from cleveragents.sidecar.config.settings import (
    ENV_PREFIX,
    PROFILE_KINDS,
    PROVIDER_KINDS,
    ProfileConfig,
    SidecarConfig,
)
from cleveragents.sidecar.errors import ConfigError

__all__ = ["load_config"]

_PROFILE_KEYS = {
    "scripted": {"kind", "model", "script_file", "script", "stream_delay"},
    "client": {"kind", "model"},
    "openai": {"kind", "model", "base_url", "api_key_env", "timeout", "max_retries", "params"},
}
_PROFILE_KEYS["openai"] |= {"stream", "strict_tools"}
_PROFILE_KEYS["openai_responses"] = _PROFILE_KEYS["openai"]
_PROFILE_KEYS["anthropic"] = _PROFILE_KEYS["openai"] | {"cache_prompt", "structured_output"}
_PROFILE_KEYS["openai"] = _PROFILE_KEYS["openai"] | {"stream_usage"}  # Chat Completions only
#: Settings that are tables or lists, each read on its own.
_TABLES = (
    "profiles", "tool_modules", "sandbox_roots", "automation_profiles", "tool_limits", "clients",
    "policy", "policies", "python_path", "mcp_servers",
)  # fmt: skip
_SCALARS = {key: f for key, _, f in setting_fields(SidecarConfig) if key not in _TABLES}
_SETTINGS = tuple(key for key, _, _ in setting_fields(SidecarConfig))
#: How a setting's type is named in a message.
_KIND_NAMES = {
    "int": "a whole number", "float": "a number", "bool": "true or false", "str": "a string",
}  # fmt: skip
#: Settings that name a file: in the config file, a relative one is from the file's directory
#: (as ``python_path``, a profile's ``script_file``, a client's ``token_file`` and an MCP
#: server's ``command``, ``cwd`` and so ``args`` are). ``event_store`` as a URL is left alone.
_PATH_SETTINGS = (
    "auth_token_file", "tls_cert_file", "tls_key_file", "tls_client_ca_file", "event_store",
    "event_store_ca_file", "event_store_cert_file", "event_store_key_file", "ready_file",
)  # fmt: skip


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
        import tomllib  # only for a file: a sidecar set up from the environment never loads it

        try:
            with open(path, "rb") as fh:
                raw = tomllib.load(fh)
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
        base = Path(path).resolve().parent
        _paths_from(raw, base)
    for name, spec in _SCALARS.items():
        value = env.get(ENV_PREFIX + name.upper())
        if value is not None:
            raw[name] = _from_env(name, value, spec.type)
    if (modules := env.get(ENV_PREFIX + "TOOL_MODULES")) is not None:
        raw["tool_modules"] = [m.strip() for m in modules.split(",") if m.strip()]
    if (roots := env.get(ENV_PREFIX + "SANDBOX_ROOTS")) is not None:
        raw["sandbox_roots"] = [r for r in roots.split(os.pathsep) if r]
    if (paths := env.get(ENV_PREFIX + "PYTHON_PATH")) is not None:
        raw["python_path"] = [p for p in paths.split(os.pathsep) if p]
    raw.update({k: v for k, v in (overrides or {}).items() if v is not None})
    config = _build(raw, base)
    if path is not None and str(base) not in config.python_path:
        # tool_modules next to the config file import without PYTHONPATH.
        config = dataclasses.replace(config, python_path=(*config.python_path, str(base)))
    return config


def _did_you_mean(name: str, known: Sequence[str]) -> str:
    """``"; did you mean 'x'?"`` for the closest of ``known`` to a misspelt ``name``, or ``""``."""
    import difflib  # only when a name is wrong (2M instructions an import less)

    close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
    return f"; did you mean {close[0]!r}?" if close else ""


def _paths_from(raw: dict[str, Any], base: Path) -> None:
    """Make the file's relative paths absolute from its directory ``base`` (those of
    variables and flags stay relative to the working directory, as a shell's are)."""
    for key in _PATH_SETTINGS:
        value = raw.get(key)
        if isinstance(value, str) and value and "://" not in value:
            raw[key] = str(base / value)


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
        raise ConfigError(
            f"{ENV_PREFIX}{name.upper()}={value!r} is not {_KIND_NAMES.get(kind, kind)}"
        ) from None
    return value


def _build(raw: dict[str, Any], base: Path) -> SidecarConfig:
    kwargs: dict[str, Any] = {}
    if "policy" in raw or "policies" in raw:
        kwargs["policy"], kwargs["policies"] = parse_policies(
            raw.pop("policy", None), raw.pop("policies", None)
        )
    for key, value in raw.items():
        if key == "profiles":
            kwargs["profiles"] = _profiles(value, base)
        elif key == "automation_profiles":
            kwargs[key] = parse_automation_profiles(value)
        elif key == "clients":
            kwargs[key] = parse_clients(value, base)
        elif key == "mcp_servers":
            from cleveragents.sidecar.config.mcp import parse_mcp_servers

            kwargs[key] = parse_mcp_servers(value, base)
        elif key == "tool_limits":
            kwargs[key] = parse_tool_limits(value)
        elif key == "tool_modules":
            if not isinstance(value, list) or not all(isinstance(m, str) for m in value):
                raise ConfigError("tool_modules must be a list of 'module:attribute' strings")
            kwargs["tool_modules"] = tuple(value)
        elif key == "python_path":
            if not isinstance(value, list | tuple) or not all(isinstance(p, str) for p in value):
                raise ConfigError("python_path must be a list of directories")
            kwargs[key] = tuple(str(base / p) for p in value)
        elif key == "sandbox_roots":
            if not isinstance(value, list) or not all(isinstance(r, str) for r in value):
                raise ConfigError("sandbox_roots must be a list of absolute paths or patterns")
            kwargs["sandbox_roots"] = tuple(value)
        elif key in _SCALARS:
            kwargs[key] = _typed(key, value, str(_SCALARS[key].type))
        else:
            raise ConfigError(f"unknown setting {key!r}{_did_you_mean(key, _SETTINGS)}")
    return SidecarConfig(**kwargs)


def _typed(key: str, value: Any, kind: str) -> Any:
    ok = {
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": isinstance(value, int | float) and not isinstance(value, bool),
        "bool": isinstance(value, bool),
        "str": isinstance(value, str),
    }.get(kind, True)
    if not ok:
        raise ConfigError(f"setting {key!r} must be {_KIND_NAMES.get(kind, kind)}, got {value!r}")
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
    unknown = sorted(set(table) - _PROFILE_KEYS[kind])
    if unknown:
        raise ConfigError(
            f"profiles.{name}: unknown key(s) {', '.join(unknown)}"
            f"{_did_you_mean(unknown[0], sorted(_PROFILE_KEYS[kind]))}; a profile of kind {kind} "
            f"takes {', '.join(sorted(_PROFILE_KEYS[kind]))}"
        )
    if kind in PROVIDER_KINDS:
        return _provider_profile(name, kind, table)
    script = None
    if "script_file" in table:
        script_path = base / str(table["script_file"])
        try:
            script = _script(script_path.read_text(encoding="utf-8"), str(script_path))
        except OSError as exc:
            raise ConfigError(
                f"profiles.{name}: cannot read {script_path}: {exc.strerror}"
            ) from None
    elif "script" in table:
        script = _script(json.dumps(table["script"]), f"profiles.{name}.script")
    delay = table.get("stream_delay")
    if delay is not None and (isinstance(delay, bool) or not isinstance(delay, int | float)):
        raise ConfigError(f"profiles.{name}.stream_delay must be a number of seconds")
    return ProfileConfig(
        name, kind, str(table.get("model", "")), script,
        stream_delay_s=None if delay is None else float(delay),
    )  # fmt: skip


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
        stream=typed("stream", "bool", True),
        strict_tools=typed("strict_tools", "bool", False),
        cache_prompt=typed("cache_prompt", "bool", False),
        stream_usage=typed("stream_usage", "bool", True),
        structured_output=typed("structured_output", "str", "auto"),
    )


def _script(text: str, where: str) -> tuple[Any, ...]:
    try:
        return parse_script(text, where)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None

"""Parse the governance tables of the sidecar's TOML: automation profiles and tool limits."""

from __future__ import annotations

from typing import Any

from cleveragents.sidecar.errors import ConfigError
from cleveragents.tool import AutomationProfile, Decision, ToolLimit

__all__ = ["parse_automation_profiles", "parse_tool_limits"]

_PROFILE_KEYS = {"allow", "ask", "forbid", "side_effects", "default"}
_LIMIT_KEYS = {"max_concurrent", "rate_per_s", "burst"}


def parse_automation_profiles(value: Any) -> dict[str, AutomationProfile]:
    """``[automation_profiles.NAME]`` tables: glob lists and side-effect/default decisions."""
    profiles = {}
    for name, table in _tables(value, "automation_profiles").items():
        unknown = set(table) - _PROFILE_KEYS
        if unknown:
            raise ConfigError(
                f"automation_profiles.{name}: unknown key(s) {', '.join(sorted(unknown))}"
            )
        profiles[name] = AutomationProfile(
            name,
            allow=_patterns(table, "allow", name),
            ask=_patterns(table, "ask", name),
            forbid=_patterns(table, "forbid", name),
            side_effects=_decision(table, "side_effects", name),
            default=_decision(table, "default", name),
        )
    return profiles


def parse_tool_limits(value: Any) -> dict[str, ToolLimit]:
    """``[tool_limits.TOOL]`` tables: ``max_concurrent``, ``rate_per_s``, ``burst``."""
    limits = {}
    for name, table in _tables(value, "tool_limits").items():
        unknown = set(table) - _LIMIT_KEYS
        if unknown:
            raise ConfigError(f"tool_limits.{name}: unknown key(s) {', '.join(sorted(unknown))}")
        try:
            limits[name] = ToolLimit(
                max_concurrent=table.get("max_concurrent"),
                rate_per_s=table.get("rate_per_s"),
                burst=table.get("burst", 1),
            )
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"tool_limits.{name}: {exc}") from None
    return limits


def _tables(value: Any, where: str) -> dict[str, dict[str, Any]]:
    if not isinstance(value, dict) or not all(isinstance(t, dict) for t in value.values()):
        raise ConfigError(f"{where} must be a table of [{where}.NAME] tables")
    return value


def _patterns(table: dict[str, Any], key: str, name: str) -> tuple[str, ...]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        raise ConfigError(f"automation_profiles.{name}.{key} must be a list of tool-name globs")
    return tuple(value)


def _decision(table: dict[str, Any], key: str, name: str) -> Decision:
    value = table.get(key, "allow")
    try:
        return Decision(value)
    except ValueError:
        raise ConfigError(
            f"automation_profiles.{name}.{key} must be 'allow', 'ask' or 'forbid', not {value!r}"
        ) from None

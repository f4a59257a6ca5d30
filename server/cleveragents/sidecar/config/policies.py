"""Governance policies: what a client may ask of the sidecar, as the operator states it.

The global ``[policy]`` table applies to every client that names no policy; each
``[policies.NAME]`` table is a complete policy whose unspecified keys take the global
policy's values. Lists are ``fnmatch`` globs matched case-sensitively.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cleveragents.sidecar.errors import ConfigError

__all__ = ["Policy", "check_deciders", "parse_policies"]

_GLOBS = ("automation_profiles", "llm_profiles", "llm_models")
_QUOTAS = ("max_concurrent_runs", "runs_per_minute")
_FLAGS = ("allow_tool_shadowing", "self_approval")
_KEYS = {*_GLOBS, *_QUOTAS, *_FLAGS}


@dataclass(frozen=True, slots=True)
class Policy:
    """One governance policy (``name`` empty: the global ``[policy]``).

    ``automation_profiles``, ``llm_profiles`` and ``llm_models`` are the automation profiles,
    LLM profiles and ``llm.model`` overrides a client may ask for. ``allow_tool_shadowing``
    lets a ``Session``'s tool take the name of a server tool. ``max_concurrent_runs`` and
    ``runs_per_minute`` are quotas per principal (0: none). ``self_approval`` lets the
    identity that started a run decide its approvals; without it, another identity with the
    ``approver`` or ``admin`` role must (four eyes).
    """

    name: str = ""
    automation_profiles: tuple[str, ...] = ("*",)
    allow_tool_shadowing: bool = False
    llm_profiles: tuple[str, ...] = ("*",)
    llm_models: tuple[str, ...] = ("*",)
    max_concurrent_runs: int = 0
    runs_per_minute: int = 0
    self_approval: bool = True

    def __post_init__(self) -> None:
        for key in _GLOBS:
            patterns = getattr(self, key)
            if isinstance(patterns, list):  # a list from code reads as well as a tuple
                patterns = tuple(patterns)
                object.__setattr__(self, key, patterns)
            if not isinstance(patterns, tuple) or not all(
                isinstance(p, str) and p for p in patterns
            ):
                raise ConfigError(f"{self.where}.{key} must be a list of non-empty globs")
        for key in _FLAGS:
            if not isinstance(getattr(self, key), bool):
                raise ConfigError(f"{self.where}.{key} must be true or false")
        for key in _QUOTAS:
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{self.where}.{key} must be 0 (no quota) or a positive integer")

    @property
    def where(self) -> str:
        """The TOML table this policy comes from, as error messages name it."""
        return f"policies.{self.name}" if self.name else "policy"

    def allows(self, key: str, value: str) -> bool:
        """Whether ``value`` matches one of the globs of the list ``key``."""
        patterns: tuple[str, ...] = getattr(self, key)
        return any(fnmatch.fnmatchcase(value, pattern) for pattern in patterns)

    def check_known(self, key: str, known: Sequence[str]) -> None:
        """``ConfigError`` if a glob of ``key`` matches none of ``known`` (a typo)."""
        for pattern in getattr(self, key):
            if not any(fnmatch.fnmatchcase(name, pattern) for name in known):
                raise ConfigError(
                    f"{self.where}.{key}: {pattern!r} matches none of the configured "
                    f"{key.replace('_', ' ')} ({', '.join(sorted(known))})"
                )


def check_deciders(
    policies: Mapping[str, Policy], identities: Mapping[str, tuple[str, frozenset[str]]]
) -> None:
    """``ConfigError`` when a policy with ``self_approval = false`` governs an identity whose
    runs nobody else may decide (no other identity has the approver or admin role): every
    approval of its runs would go to the default. ``identities``: name -> (policy, roles)."""
    deciders = {name for name, (_, roles) in identities.items() if roles & {"approver", "admin"}}
    for name, (policy_name, _) in sorted(identities.items()):
        policy = policies[policy_name]
        if not policy.self_approval and not deciders - {name}:
            raise ConfigError(
                f"{policy.where}.self_approval = false governs identity {name!r}, but no other "
                "identity may decide its runs' approvals: give another [clients.NAME] the "
                "approver or admin role (or keep self_approval)"
            )


def parse_policies(global_table: Any, named: Any) -> tuple[Policy, dict[str, Policy]]:
    """The ``[policy]`` table and the ``[policies.NAME]`` tables (either may be ``None``)."""
    base = _policy(Policy(), "", global_table if global_table is not None else {})
    if named is None:
        return base, {}
    if not isinstance(named, dict) or not all(isinstance(t, dict) for t in named.values()):
        raise ConfigError("policies must be a table of [policies.NAME] tables")
    return base, {name: _policy(base, name, table) for name, table in named.items()}


def _policy(base: Policy, name: str, table: Any) -> Policy:
    where = f"policies.{name}" if name else "policy"
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table")
    if unknown := set(table) - _KEYS:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key in _GLOBS:
            if not isinstance(value, list):
                raise ConfigError(f"{where}.{key} must be a list of globs")
            value = tuple(value)
        values[key] = value
    return dataclasses.replace(base, name=name, **values)

"""``[clients.NAME]`` tables: the named client identities, each with its credentials."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cleveragents.sidecar.config.settings import ClientConfig
from cleveragents.sidecar.errors import ConfigError

__all__ = ["parse_clients"]

_KEYS = {"token_env", "token_file", "token", "subjects", "roles", "policy"}


def parse_clients(value: Any, base: Path) -> dict[str, ClientConfig]:
    """The ``clients`` table; a ``token_file`` is relative to the config file's directory."""
    if not isinstance(value, dict):
        raise ConfigError("clients must be a table of [clients.NAME] tables")
    return {name: _client(name, table, base) for name, table in value.items()}


def _client(name: str, table: Any, base: Path) -> ClientConfig:
    where = f"clients.{name}"
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table")
    if unknown := sorted(set(table) - _KEYS):
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}")
    for key in ("token_env", "token_file", "token", "policy"):
        if not isinstance(table.get(key, ""), str):
            raise ConfigError(f"{where}.{key} must be a string")
    lists = {key: table.get(key, []) for key in ("subjects", "roles")}
    for key, items in lists.items():
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise ConfigError(f"{where}.{key} must be a list of strings")
    token_file = table.get("token_file", "")
    return ClientConfig(
        name,
        token_env=table.get("token_env", ""),
        token_file=str(base / token_file) if token_file else "",
        token=table.get("token", ""),
        subjects=tuple(lists["subjects"]),
        roles=frozenset(lists["roles"]),
        policy=table.get("policy", ""),
    )

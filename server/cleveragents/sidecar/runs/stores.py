"""Which ``EventStore`` a sidecar's ``event_store`` setting names: none (memory), a Redis URL,
or a SQLite file."""

from __future__ import annotations

import os
from collections.abc import Mapping

from cleveragents.sidecar.config import SidecarConfig
from cleveragents.sidecar.errors import ConfigError
from cleveragents.sidecar.runs.sqlite_store import SqliteEventStore
from cleveragents.sidecar.runs.store import EventStore

__all__ = ["is_redis_url", "store_for"]

#: The ``event_store`` values that name a Redis server (anything else is a SQLite file).
_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


def is_redis_url(event_store: str) -> bool:
    """Whether ``event_store`` names a Redis server rather than a SQLite file."""
    return event_store.startswith(_REDIS_SCHEMES)


def store_for(config: SidecarConfig, env: Mapping[str, str] | None = None) -> EventStore | None:
    """The store ``config`` asks for (``None``: memory); redis-py is imported only for Redis."""
    if not config.event_store:
        return None
    if not is_redis_url(config.event_store):
        return SqliteEventStore(config.event_store)
    from cleveragents.sidecar.runs.redis_store import RedisEventStore

    password = ""
    if name := config.event_store_password_env:
        password = (os.environ if env is None else env).get(name, "")
        if not password:
            raise ConfigError(f"event_store_password_env names {name!r}, which is unset or empty")
    return RedisEventStore(config.event_store, password=password)

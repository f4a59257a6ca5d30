"""Which ``EventStore`` a sidecar's ``event_store`` setting names (none: memory; a Redis URL; or
a SQLite file), and the run directory that comes with it: a fleet's for Redis, shared with the
other sidecars on that Redis; a sidecar alone's for the others."""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping

from cleveragents.sidecar.config import SidecarConfig
from cleveragents.sidecar.errors import ConfigError
from cleveragents.sidecar.fleet.directory import RunDirectory
from cleveragents.sidecar.runs import RunManager
from cleveragents.sidecar.runs.store import EventStore

__all__ = ["directory_for", "is_redis_url", "store_for"]

#: The ``event_store`` values that name a Redis server (anything else is a SQLite file).
_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


def is_redis_url(event_store: str) -> bool:
    """Whether ``event_store`` names a Redis server rather than a SQLite file."""
    return event_store.startswith(_REDIS_SCHEMES)


def store_for(config: SidecarConfig, env: Mapping[str, str] | None = None) -> EventStore | None:
    """The store ``config`` asks for (``None``: memory); sqlite3 and redis-py are imported only
    for their stores."""
    if not config.store.url:
        return None
    if not is_redis_url(config.store.url):
        from cleveragents.sidecar.runs.sqlite_store import SqliteEventStore  # with sqlite3

        return SqliteEventStore(config.store.url)
    import redis.asyncio

    from cleveragents.sidecar.fleet.fencing import Claims
    from cleveragents.sidecar.fleet.layout import Keys
    from cleveragents.sidecar.fleet.lease import Lease
    from cleveragents.sidecar.fleet.redis_store import RedisEventStore, redis_options

    password = ""
    if name := config.store.password_env:
        password = (os.environ if env is None else env).get(name, "")
        if not password:
            raise ConfigError(f"event_store_password_env names {name!r}, which is unset or empty")
    for name in ("event_store_ca_file", "event_store_cert_file", "event_store_key_file"):
        if (path := config.setting(name)) and not os.access(path, os.R_OK):
            raise ConfigError(f"{name} {path!r} cannot be read (missing, or no access)")
    url = config.store.url
    options = redis_options(
        url,
        password=password,
        ca_file=config.store.ca_file,
        cert_file=config.store.cert_file,
        key_file=config.store.key_file,
    )
    client = redis.asyncio.Redis.from_url(url, **options)
    claims = Claims(config.store.sidecar_id or uuid.uuid4().hex[:16])
    lease = Lease(client, claims, config.store.lease_s, Keys(config.store.key_prefix))
    return RedisEventStore(url, options, client, claims, lease)


def directory_for(config: SidecarConfig, manager: RunManager) -> RunDirectory:
    """The run directory of ``manager``'s runs: with a Redis store, of the fleet's too."""
    takes_over = config.store.resume_runs and config.session_reattach_s > 0
    store = manager.store
    if type(store).__name__ != "RedisEventStore":  # redis-py is imported only for Redis
        return RunDirectory(manager, takes_over=takes_over)
    from cleveragents.sidecar.fleet.redis_fleet import RedisFleet
    from cleveragents.sidecar.fleet.redis_store import RedisEventStore

    assert isinstance(store, RedisEventStore)
    fleet = RedisFleet(
        store.client, store.claims, store.lease, manager.stats, manager.frame_limit, store.shown
    )
    return RunDirectory(manager, fleet, takes_over=takes_over)

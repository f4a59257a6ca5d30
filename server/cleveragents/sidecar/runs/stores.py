"""Which ``EventStore`` a sidecar's ``event_store`` setting names: none (memory), a Redis URL,
or a SQLite file; and, for a store several sidecars share, what ties the manager to the fleet."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

import structlog

from cleveragents.sidecar.config import SidecarConfig
from cleveragents.sidecar.errors import ConfigError, SidecarError
from cleveragents.sidecar.runs.manager import RunManager
from cleveragents.sidecar.runs.resume import ADOPTION_REASON, handover_reason
from cleveragents.sidecar.runs.store import EventStore, StoredRun

if TYPE_CHECKING:
    from cleveragents.sidecar.runs.redis_handover import RedisHandovers
    from cleveragents.sidecar.runs.shared import Control

__all__ = ["is_redis_url", "share", "store_for"]

log = structlog.get_logger("cleveragents.sidecar.shared")

#: The ``event_store`` values that name a Redis server (anything else is a SQLite file).
_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


def is_redis_url(event_store: str) -> bool:
    """Whether ``event_store`` names a Redis server rather than a SQLite file."""
    return event_store.startswith(_REDIS_SCHEMES)


def store_for(config: SidecarConfig, env: Mapping[str, str] | None = None) -> EventStore | None:
    """The store ``config`` asks for (``None``: memory); sqlite3 is imported only for SQLite,
    redis-py only for Redis."""
    if not config.event_store:
        return None
    if not is_redis_url(config.event_store):
        from cleveragents.sidecar.runs.sqlite_store import SqliteEventStore

        return SqliteEventStore(config.event_store)
    from cleveragents.sidecar.runs.redis_store import RedisEventStore

    password = ""
    if name := config.event_store_password_env:
        password = (os.environ if env is None else env).get(name, "")
        if not password:
            raise ConfigError(f"event_store_password_env names {name!r}, which is unset or empty")
    for name in ("event_store_ca_file", "event_store_cert_file", "event_store_key_file"):
        if (path := getattr(config, name)) and not os.access(path, os.R_OK):
            raise ConfigError(f"{name} {path!r} cannot be read (missing, or no access)")
    return RedisEventStore(
        config.event_store,
        password=password,
        ca_file=config.event_store_ca_file,
        cert_file=config.event_store_cert_file,
        key_file=config.event_store_key_file,
        lease_s=config.event_store_lease_s,
        sidecar_id=config.sidecar_id,
    )


def share(store: EventStore | None, manager: RunManager) -> None:
    """With a store several sidecars share (Redis), let ``manager`` serve the others' runs,
    adopt the runs of those whose leases expire, and obey their control requests."""
    if type(store).__name__ != "RedisEventStore":  # redis-py is imported only for Redis
        return
    from cleveragents.sidecar.runs.redis_store import RedisEventStore
    from cleveragents.sidecar.runs.shared import SharedRuns

    assert isinstance(store, RedisEventStore)
    fleet = store.fleet
    manager.shared = SharedRuns(fleet, manager.stats, manager.frame_limit)
    fleet.on_adopt = lambda runs: manager.take_back(runs, ADOPTION_REASON)
    fleet.on_lost = manager.lose

    def control(request: Control) -> None:
        run = manager.get(request.run_id)
        if run is None or run.finished:
            log.info("control for a run not live here", op=request.op, run_id=request.run_id)
        elif request.op == "cancel":
            manager.cancel(run, request.reason or "cancelled by CancelRun")
        elif request.op == "decide" and run.approvals is not None:
            try:
                run.approvals.decide(
                    request.call_id, request.approved, request.reason, "rpc", request.identity
                )
            except SidecarError as exc:
                log.warning("approval decision refused", run_id=run.run_id, error=exc.message)

    fleet.on_control = control
    _hand_over(fleet.handovers, manager)


def _hand_over(handovers: RedisHandovers, manager: RunManager) -> None:
    """Let ``manager`` hand its parked Session runs to the sidecars their clients reach, and
    take those handed to it (``redis_handover``)."""
    from cleveragents.sidecar.runs.redis_handover import handed_over_message
    from cleveragents.sidecar.runs.shared import ATTACHED, GONE

    def release(run_id: str, identity: str) -> str:
        run = manager.get(run_id)
        if run is None or run.ended or run.owner != identity:
            return GONE
        entry = manager.parked.get(run_id)
        if entry is None or entry.reserved:
            return ATTACHED
        entry.reserved = True  # no client re-attaches here while it is claimed
        return ""

    def claimed(run_id: str, to: str, moved: bool) -> None:
        entry = manager.parked.get(run_id)
        if not moved:
            if entry is not None:
                entry.reserved = False
            return
        manager.parked.unpark(run_id)
        manager.lose(run_id, handed_over_message(run_id, handovers.fleet.sidecar_id, to))

    def handed(stored: StoredRun, sender: str, awaited: bool) -> None:
        if (live := manager.get(stored.run_id)) is not None and not live.ended:
            log.warning("handed-over run already live here", run_id=stored.run_id)
            return
        manager.take_back([stored], handover_reason(sender))
        if (entry := manager.parked.get(stored.run_id)) is not None:
            entry.reserved = awaited

    handovers.on_release = release
    handovers.on_claimed = claimed
    handovers.on_handed = handed
